"""The host side of the Triton kernels: the units a bucket is launched over, and the launch
itself. Imports no Triton (the kernels are passed in).

- A bucket of one tensor per list (a single tensor, a flat buffer of ``trainop.flatten``) is
  launched over its elements with the tensors as the kernel's arguments (``units``, ``parts``).
- A bucket of any other number of tensors is ONE launch over the blocks of all of them (two
  where some blocks can be vectorized and others not) through its device table
  (``tables.Layout``, made once per layout; the gradients' addresses refreshed on the device
  when they move).
- The hyperparameters come as one float32 device tensor (``tables.Scalars``, written in place:
  nothing made per step, nothing read on the host).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["BLOCK", "OPTIONS", "complement", "launch", "parts", "product", "units"]

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


def complement(x: Any) -> Any:
    """``1 - x`` in double (what the C kernels compute before rounding to float32)."""
    return 1.0 - x.double() if isinstance(x, torch.Tensor) else 1.0 - float(x)


def product(*xs: Any) -> Any:
    """The product of ``xs`` in double (a tensor when any is a tensor)."""
    out: Any = 1.0
    for x in xs:
        out = out * (x.double() if isinstance(x, torch.Tensor) else float(x))
    return out


def units(lists: Sequence[Sequence[torch.Tensor]]) -> list[list[torch.Tensor]]:
    """The launch units of a call of one tensor per list: that tensor of each list, 1-D (none
    where it is empty)."""
    return [[t.reshape(-1) for t in unit] for unit in zip(*lists, strict=True)
            if unit[0].numel()]


def parts(unit: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    """A dense unit (1-D tensors of one length) as the launches it takes: itself, or, from
    ``SPLIT_AT`` elements on, a head whose length is a multiple of ``ALIGN`` and the tail. The
    rules are elementwise, so the split changes no number; the head's tensors start where the
    unit's do, the tail's ``head * element size`` bytes (a multiple of 16) further. A tensor
    of another length (a per-tensor value, such as NovoGrad's one-element denominator, read
    at the tensor's index) goes whole into both launches: cut, its tail would be an empty
    view past its end."""
    n = unit[0].numel()
    head = n - n % ALIGN
    if head == n or n < SPLIT_AT:
        return [list(unit)]
    return [[t[:head] if t.numel() == n else t for t in unit],
            [t[head:] if t.numel() == n else t for t in unit]]


def launch(kernel: Callable, lists: Sequence[Sequence[torch.Tensor]], layout: Any,
           h: torch.Tensor, multiplier: torch.Tensor | None, found_inf: torch.Tensor | None,
           **constexprs: Any) -> None:
    """``kernel`` over ``lists``: arguments the tensors (or, with ``TABLE``, each list's first
    tensor and ``layout``'s table), ``h``, the multiplier, the skip flag, the element count
    (the tensor count), the row arguments (the table), then the constexprs. One tensor per
    list: a launch over its elements (``units``, ``parts``); more: one launch over the blocks
    of all of them (``layout``, a ``tables.Layout`` whose gradients the caller refreshed this
    step), two where only some blocks can be vectorized. With ``rows`` (a sparse gradient's
    distinct rows, int64, and their values as ``lists[1]``'s one tensor) one launch over the
    rows' elements of the tables ``lists[0]``, ``lists[2:]`` (one each). With ``where`` (an
    every-row rule: int64 per row of the tables, the row's place among the gradient's rows
    ``lists[1]``, or -1) one launch over every element of the tables, the row arguments
    ``where`` and the row width. ``half``: the variables' float16/bfloat16 model copies,
    written in the same pass (a list as long as ``lists[0]``), or None."""
    rows = constexprs.pop("rows", None)
    where = constexprs.pop("where", None)
    half = constexprs.pop("half", None)
    every = [*lists, lists[0] if half is None else half]  # no copy: the variable stands in
    mult = h if multiplier is None else multiplier
    inf = h if found_inf is None else found_inf
    flags = {"HAS_MULT": multiplier is not None, "HAS_INF": found_inf is not None,
             "BLOCK": BLOCK, "HALF": half is not None, **constexprs, **OPTIONS}
    if where is not None:  # every element of the tables, the gradient's rows gathered
        n = every[0][0].numel()
        if n:
            kernel[((n + BLOCK - 1) // BLOCK,)](
                *[t[0] for t in every], h, mult, inf, n, where,
                n // where.numel() if where.numel() else 1, ROWS=False, **flags)
        return
    if rows is not None:
        n = every[1][0].numel()
        if n:
            kernel[((n + BLOCK - 1) // BLOCK,)](
                *[t[0] for t in every], h, mult, inf, n, rows,
                n // rows.numel() if rows.numel() else 1, ROWS=True, TABLE=False,
                ALIGNED=False, **flags)
        return
    if len(every[0]) == 1:
        for part in (p for unit in units(every) for p in parts(unit)):
            n = part[0].numel()
            kernel[((n + BLOCK - 1) // BLOCK,)](*part, h, mult, inf, n, h, 1, ROWS=False,
                                               TABLE=False, ALIGNED=False, **flags)
        return
    layout.build()
    firsts = [t[0] for t in every]
    args = (h, mult, inf, layout.tensors, layout.table)
    rest, count = layout.block_table, layout.blocks
    if layout.moving_aligned and layout.aligned_blocks:
        kernel[(layout.aligned_blocks,)](*firsts, *args, layout.block_table, ROWS=False,
                                         TABLE=True, ALIGNED=True, **flags)
        rest, count = layout.rest_table, layout.blocks - layout.aligned_blocks
    if count:
        kernel[(count,)](*firsts, *args, rest, ROWS=False, TABLE=True, ALIGNED=False, **flags)
