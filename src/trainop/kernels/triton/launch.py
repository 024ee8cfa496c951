"""The host side of the Triton kernels: device-resident hyperparameters, the units a bucket is
launched over, and the launch itself. Imports no Triton (the kernels are passed in).

- ``device_scalars``: a rule's hyperparameters as one float32 tensor on the bucket's device.
  Python floats are constants of the call (cached per device and values, so a steady state
  allocates nothing); 0-dim tensors (a learning-rate schedule, Adam's beta powers, a step
  counter) are copied on the device, never read on the host.
- ``units``: a bucket whose tensors lie back to back in one storage (a flat buffer,
  ``trainop.flatten``) is one unit, launched once over all its elements; otherwise one unit
  per non-empty tensor.
- ``block_table``: the blocks of a list of tensors (each block inside one tensor) as device
  addresses and element counts, so that one launch reads any number of tensors (the norm pass).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["BLOCK", "OPTIONS", "block_table", "complement", "device_scalars", "launch",
           "product", "units"]

#: Elements per program.
BLOCK = 1024
#: The compile options of every launch: no fused multiply-add contraction, so that each
#: multiplication and addition rounds to float32 on its own, in the reference rule's order (as
#: the C kernels, built with ``-ffp-contract=off``, and torch's elementwise ops). Triton's
#: default contracts ``a * b + c`` into one FMA, which changes the last bits of most rules.
#: The interpreter ignores it (numpy never contracts).
OPTIONS = {"enable_fp_fusion": False}
#: Element counts a dense unit is split at: Triton's JIT compiles an integer argument divisible
#: by 16 (and addresses divisible by 16 bytes) as such, which lets the masked loads and stores
#: be 128-bit; any other count makes every access of the launch 32-bit. A unit of at least
#: ``SPLIT_AT`` elements whose count is not a multiple of ``ALIGN`` (a flat buffer of any
#: model) is launched as its first ``n - n % ALIGN`` elements and then its last few.
ALIGN = 16
SPLIT_AT = 1 << 20
_CACHE: dict[tuple, torch.Tensor] = {}
_CACHE_LIMIT = 256
#: Block tables (``block_table``), fewer: one is 16 bytes per block of a model's gradients, and
#: gradients reallocated every step (``zero_grad(set_to_none=True)``) may move.
_TABLES: dict[tuple, torch.Tensor] = {}
_TABLES_LIMIT = 8


def complement(x: Any) -> Any:
    """``1 - x`` in double (what the C kernels compute before rounding to float32)."""
    return 1.0 - x.double() if isinstance(x, torch.Tensor) else 1.0 - float(x)


def product(*xs: Any) -> Any:
    """The product of ``xs`` in double (a tensor when any is a tensor)."""
    out: Any = 1.0
    for x in xs:
        out = out * (x.double() if isinstance(x, torch.Tensor) else float(x))
    return out


def device_scalars(values: Sequence[Any], device: torch.device) -> torch.Tensor:
    """``values`` (Python numbers or 0-dim tensors) as one 1-D float32 tensor on ``device``;
    nothing is read on the host."""
    if not any(isinstance(v, torch.Tensor) for v in values):
        key = (device, tuple(float(v) for v in values))
        return _cached(_CACHE, _CACHE_LIMIT, key,
                       lambda: torch.tensor(key[1], dtype=torch.float32), device)
    return torch.cat([
        v.detach().to(device=device, dtype=torch.float32).reshape(1)
        if isinstance(v, torch.Tensor)
        else torch.full((1,), float(v), dtype=torch.float32, device=device) for v in values])


def _cached(cache: dict[tuple, torch.Tensor], limit: int, key: tuple,
            make: Callable[[], torch.Tensor], device: torch.device) -> torch.Tensor:
    """The device copy of the host tensor ``make()``, made once per ``key`` in ``cache`` (at
    most ``limit`` entries): staged in pinned memory and copied without blocking (a pageable
    copy would wait for the device), and never written again (so a copy still in flight, or a
    captured graph, reads what it was given). Made during a CUDA graph capture it cannot be
    (a copy from the host is not capturable): a ``RuntimeError`` says to step once first."""
    found = cache.get(key)
    if found is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "trainop's Triton kernels met new constants during a CUDA graph capture (a "
                "Python-number hyperparameter whose value changed, or a new tensor layout); "
                "they are copied to the device once, which a capture cannot record. Run the "
                "same step once before capturing (torch's warm-up), and give values that "
                "change between replays (a learning rate schedule) as device tensors")
        if len(cache) >= limit:
            cache.clear()
        staged = make()
        if device.type == "cuda":
            staged = staged.pin_memory()
        found = cache[key] = staged.to(device, non_blocking=True)
    return found


def block_table(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The blocks of ``tensors`` (contiguous, one dtype and device), ``BLOCK`` elements each
    and none crossing a tensor's end: ``(table, first, blocks)`` with ``table`` the int64
    pairs (start address, element count) of every block and ``first`` the int64 index of each
    tensor's first block (one more entry: ``blocks``), both on the tensors' device. Built from
    the addresses and sizes alone (nothing read on the device), once per layout."""
    device = tensors[0].device
    layout = tuple((t.data_ptr(), t.numel()) for t in tensors)
    key = ("blocks", device, tensors[0].element_size(), layout)

    def make() -> torch.Tensor:
        counts = np.array([n for _, n in layout], dtype=np.int64)
        per = (counts + BLOCK - 1) // BLOCK
        first = np.concatenate([[0], np.cumsum(per)]).astype(np.int64)
        owner = np.repeat(np.arange(len(layout)), per)
        start = (np.arange(int(first[-1]), dtype=np.int64) - first[owner]) * BLOCK
        base = np.array([a for a, _ in layout], dtype=np.uint64).view(np.int64)
        table = np.stack([base[owner] + start * key[2],
                          np.minimum(counts[owner] - start, BLOCK)], axis=1)
        return torch.from_numpy(np.concatenate([table.reshape(-1), first]))

    both = _cached(_TABLES, _TABLES_LIMIT, key, make, device)
    blocks = (both.numel() - len(layout) - 1) // 2
    return both[:2 * blocks], both[2 * blocks:], blocks


def _span(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """One 1-D view over ``tensors`` where they lie back to back in one storage, else None."""
    first = tensors[0]
    storage = first.untyped_storage().data_ptr()
    end = first.data_ptr()
    for t in tensors:
        if t.data_ptr() != end or t.untyped_storage().data_ptr() != storage:
            return None
        end += t.numel() * t.element_size()
    total = sum(t.numel() for t in tensors)
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (total,))


def units(lists: Sequence[Sequence[torch.Tensor]]) -> list[list[torch.Tensor]]:
    """The launch units of a call: one unit (a tensor of each list) per launch."""
    if len(lists[0]) > 1:
        spans = [_span(tensors) for tensors in lists]
        if all(s is not None for s in spans):
            return [spans] if spans[0].numel() else []
    return [[t.reshape(-1) for t in unit] for unit in zip(*lists, strict=True)
            if unit[0].numel()]


def parts(unit: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    """A dense unit (1-D tensors of one length) as the launches it takes: itself, or, from
    ``SPLIT_AT`` elements on, a head whose length is a multiple of ``ALIGN`` and the tail. The
    rules are elementwise, so the split changes no number; the head's tensors start where the
    unit's do, the tail's ``head * element size`` bytes (a multiple of 16) further."""
    n = unit[0].numel()
    head = n - n % ALIGN
    if head == n or n < SPLIT_AT:
        return [list(unit)]
    return [[t[:head] for t in unit], [t[head:] for t in unit]]


def launch(kernel: Callable, lists: Sequence[Sequence[torch.Tensor]], h: torch.Tensor,
           multiplier: torch.Tensor | None, found_inf: torch.Tensor | None,
           **constexprs: Any) -> None:
    """``kernel`` over every unit of ``lists``: arguments the unit's tensors, ``h``, the
    multiplier, the skip flag, the element count, the row arguments (unused), then the
    constexprs. With ``rows`` (a sparse gradient's distinct rows, int64, and their values as
    ``lists[1]``'s one tensor) one launch over the rows' elements of the tables ``lists[0]``,
    ``lists[2:]`` (one each). With ``where`` (an every-row rule: int64 per row of the
    tables, the row's place among the gradient's rows ``lists[1]``, or -1) one launch over
    every element of the tables, the row arguments ``where`` and the row width. ``half``:
    the variables' float16/bfloat16 model copies, written in the same pass (a list as long
    as ``lists[0]``), or None."""
    rows = constexprs.pop("rows", None)
    where = constexprs.pop("where", None)
    half = constexprs.pop("half", None)
    if where is not None:  # every element of the tables, the gradient's rows gathered
        var = lists[0][0]
        n = var.numel()
        found = [[t[0] for t in lists] + [var if half is None else half[0]]] if n else []
        args = (where, n // where.numel() if where.numel() else 1)
    elif rows is not None:
        values = lists[1][0]
        n = values.numel()
        width = n // rows.numel() if rows.numel() else 1
        found = [[t[0] for t in lists] + [lists[0][0] if half is None else half[0]]] if n else []
        args: tuple = (rows, width)
    else:
        found = units(lists if half is None else [*lists, half])
        if half is None:
            found = [[*unit, unit[0]] for unit in found]  # no copy: the variable stands in
        found = [part for unit in found for part in parts(unit)]
        args = (h, 1)
    for unit in found:
        n = unit[0 if where is not None else 1].numel()
        kernel[((n + BLOCK - 1) // BLOCK,)](
            *unit, h, h if multiplier is None else multiplier,
            h if found_inf is None else found_inf, n, *args,
            HAS_MULT=multiplier is not None, HAS_INF=found_inf is not None, BLOCK=BLOCK,
            ROWS=rows is not None, HALF=half is not None, **constexprs, **OPTIONS)
