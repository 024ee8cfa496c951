"""The one way into the Triton kernels: an ``Entry`` per optimizer (``entry_of``), which owns
that optimizer's layouts (``tables.Cache``), runs every launch under the tensors' device and
orders what it keeps on the current stream (``device``), and holds its lock from the first
check to the last launch of a call (so threads stepping optimizers of their own share nothing
but the kernels' import, and a call that fails its checks has written nothing).

A dense bucket (``update``) is checked whole before anything launches: gradients of several
dtypes (a mixed-precision master's float16/bfloat16 and float32 gradients) are one layout
per dtype, each checked first; the local shards of sharded tensors whose rule reads whole-
tensor norms (NovoGrad under FSDP2) get their squared norms summed over the ranks (``reduce``,
one collective) after the checks and before the launches. Calls made without an optimizer
(TF's functions used alone, the module's ``run``/``l2_norms``) share one entry of their own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import torch

from trainop.kernels.boundary import is_plain
from trainop.kernels.triton import device as devices
from trainop.kernels.triton import tables

__all__ = ["Entry", "entry_of"]

_DTYPE, _DEVICE, _LAYOUT = (attrgetter(a) for a in ("dtype", "device", "layout"))
_CREATE = threading.Lock()


def _package() -> Any:
    import trainop.kernels.triton as package

    return package


def entry_of(owner: Any) -> Entry:
    """``owner``'s entry (an optimizer's ``_triton_entry``, made on first use), or the shared
    entry of calls made without one (``owner`` ``None``)."""
    if owner is None:
        return _SHARED
    found = getattr(owner, "_triton_entry", None)
    if found is None:
        with _CREATE:
            found = getattr(owner, "_triton_entry", None)
            if found is None:
                found = Entry(steps=True)
                owner._triton_entry = found
    return found


def _binding() -> Any:
    import trainop.kernels.native._binding as binding

    return binding


def _on(value: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """A 0-dim (or one-element) gate value as a kernel reads it: on ``device``, no view made
    where none is needed (each view is one more operation per launch)."""
    if value is None:
        return None
    if value.device != device:
        value = value.to(device=device)
    if value.requires_grad:
        value = value.detach()
    return value if value.dim() <= 1 and value.is_contiguous() else value.reshape(1)


def _as_list(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return tensors if type(tensors) is list else list(tensors)


def _plain_gradients(layout: Any, grads: Sequence[torch.Tensor], dtype: torch.dtype) -> bool:
    """Whether this step's gradients pass the boundary as those of the layout's first step
    did: exact tensors, one dtype (the variables', or one half dtype for float32 variables),
    strided, on the device, each of its variable's element count. Python's checks, where the
    native metadata reader is not built."""
    dtypes = set(map(_DTYPE, grads))
    if len(dtypes) != 1:
        return False
    (found,) = dtypes
    return ((found == dtype or (found in _package().HALF_DTYPES and dtype == torch.float32))
            and is_plain(grads) and set(map(_DEVICE, grads)) == {layout.device}
            and set(map(_LAYOUT, grads)) == {torch.strided}
            and bool((_binding().sizes(grads) == layout.counts).all()))


def _gradients_at(layout: Any, grads: Sequence[torch.Tensor], dtype: torch.dtype) -> Any:
    """The gradients' data pointers (uint64) where they pass the boundary as those of the
    layout's first step did (``_plain_gradients``), else ``None``."""
    first = grads[0].dtype
    if not (first == dtype or (first in _package().HALF_DTYPES and dtype == torch.float32)):
        return None
    binding = _binding()
    grads = _as_list(grads)
    found = binding.plain_on([grads], (first,), layout.device)
    if found is not None:
        at, counts = found
        return at if np.array_equal(counts, layout.counts) else None
    if binding.reads_in_c():
        return None  # (the reader refused one: the full boundary names it, or the safe path)
    return binding.pointers([grads]) if _plain_gradients(layout, grads, dtype) else None


def _update_key(rule: str, fixed: list[Sequence[torch.Tensor]], device: torch.device,
                half: bool) -> tuple | None:
    """The layout key of a dense call's lists but the gradients (``fixed``): the rule,
    device, dtypes, every data pointer and element count; ``None`` where one is not a plain
    contiguous tensor of its list's first dtype on ``device``."""
    fixed = [_as_list(t) for t in fixed]
    dtypes = tuple(t[0].dtype for t in fixed)
    binding = _binding()
    found = binding.plain_on(fixed, dtypes, device)
    if found is not None:
        at, counts = found
    elif binding.reads_in_c() or not all(map(is_plain, fixed)):
        return None
    else:
        at = binding.pointers(fixed)
        if at is None:
            return None
        counts = np.fromiter((x.numel() for tensors in fixed for x in tensors), np.int64)
    return ("update", rule, device, half, dtypes, at.tobytes(), counts.tobytes())


class _RowsLayout:
    """What a sparse update keeps per table: its hyperparameters' device tensor."""

    __slots__ = ("scalars", "stream")

    def __init__(self, scalars: Any) -> None:
        self.scalars = scalars
        self.stream: Any = None

    @property
    def pinned(self) -> bool:
        return self.scalars.pinned

    def device_tensors(self) -> list[torch.Tensor | None]:
        return [self.scalars.h]


def _split_by_gradient_dtype(lists, half) -> list[tuple[list, list | None]]:
    """A bucket whose gradients have several dtypes as one call per dtype (the rules are
    elementwise or per tensor: the split changes no number), else the bucket itself."""
    grads = lists[1]
    if len({g.dtype for g in grads}) < 2:
        return [(list(lists), None if half is None else list(half))]
    parts: dict[torch.dtype, list[int]] = {}
    for i, g in enumerate(grads):
        parts.setdefault(g.dtype, []).append(i)
    return [([[t[i] for i in idx] for t in lists],
             None if half is None else [half[i] for i in idx]) for idx in parts.values()]


class Entry:
    """One owner's way into the Triton kernels (see the module doc). ``steps``: an
    optimizer's entry, told each step (``next_step``), whose cache keeps what its last two
    steps used."""

    __slots__ = ("cache", "lock")

    def __init__(self, *, steps: bool) -> None:
        self.cache = tables.Cache(steps=steps)
        self.lock = threading.RLock()

    def next_step(self) -> None:
        with self.lock:
            self.cache.next_step()

    # ------------------------------------------------------------------ dense
    @torch._disable_dynamo  # under torch.compile: a graph break, the launches run eagerly
    def update(self, rule: str, lists: Sequence[Sequence[torch.Tensor]], hyper: Sequence[Any],
               *, multiplier: torch.Tensor | None = None,
               found_inf: torch.Tensor | None = None,
               half: Sequence[torch.Tensor] | None = None,
               squares: torch.Tensor | None = None,
               reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
               mixed: bool = False) -> bool:
        """``kernels.triton.run`` (see there) through this entry; ``mixed``: the gradients
        may have several dtypes (``widen_gradients``: a master's half and float32 gradients;
        one kernel call per dtype), else they are one dtype (another list is refused at the
        boundary, a ``ValueError``); ``reduce``: for a rule of
        ``WHOLE_NORM_RULES`` over local shards, the sum over the ranks of each tensor's
        squared norm (one collective), run after the checks passed. False: nothing done."""
        package = _package()
        variables = lists[0]
        if not variables:
            return True
        family = package._FAMILIES.get(rule) if rule in package.DENSE_RULES else None
        dtype, device = variables[0].dtype, variables[0].device
        if squares is not None and (
                rule not in package.WHOLE_NORM_RULES or squares.dtype != torch.float64
                or squares.shape != (len(variables),) or squares.device != device):
            raise ValueError(f"trainop's triton {rule} call: squares must be a float64 tensor "
                             f"of shape ({len(variables)},) on {device} for a rule of "
                             f"{sorted(package.WHOLE_NORM_RULES)}, got {squares.dtype} "
                             f"{tuple(squares.shape)} on {squares.device}")
        if family is None or not package.supports(dtype, device):
            return False
        if reduce is not None and rule not in package.WHOLE_NORM_RULES:
            return False
        if half is not None and half[0].dtype not in package.HALF_DTYPES:
            return False
        with self.lock, devices.guard(device):
            calls = []
            parts = (_split_by_gradient_dtype(lists, half) if mixed
                     else [(list(lists), None if half is None else list(half))])
            for part, part_half in parts:
                layout = self._layout(rule, part, part_half)
                if layout is None:
                    return False
                calls.append((part, part_half, layout))
            if reduce is not None:
                if len(calls) != 1:
                    return False
                squares = self._square_sums(lists[1], multiplier)
                if squares is None:
                    return False
                squares = reduce(squares)
            multiplier, found_inf = _on(multiplier, device), _on(found_inf, device)
            extra = {} if squares is None else {"squares": squares}
            for part, part_half, layout in calls:
                with package._family(family) as module:
                    module.RULES[rule](part, list(hyper), multiplier, found_inf, layout,
                                       half=part_half, **extra)
        return True

    def _layout(self, rule: str, lists: list, half: list | None) -> Any:
        """The layout of a dense call (variables, gradients, slots, half copies), its
        gradients' addresses on the device this step; ``None`` where the caller takes its
        safe path. The boundary (``checked``) runs in full for a new layout or tensors that
        are not as the layout's were; otherwise only the gradients are checked."""
        package = _package()
        scalar = package._SCALAR_F32.get(rule, frozenset())
        list_dtypes = dict.fromkeys(scalar, torch.float32)
        if lists[1] and lists[1][0].dtype in package.HALF_DTYPES:  # a master's model gradient
            list_dtypes[1] = lists[1][0].dtype
        every = list(lists)
        if half is not None:
            list_dtypes[len(every)] = half[0].dtype
            every.append(half)
        variables, grads = every[0], every[1]
        device = variables[0].device
        fixed = [variables, *every[2:]]
        is_half = half is not None
        # the table lists what the kernels take: the half copies last, the variables standing in
        listed = every if is_half else [*every, variables]
        key = _update_key(rule, fixed, device, is_half)
        grads_at = None
        if key is not None:
            layout = self.cache.items.get(key)
            if layout is not None:
                grads_at = _gradients_at(layout, grads, variables[0].dtype)
        if grads_at is None:
            if not package.checked(every, dtype=variables[0].dtype, list_dtypes=list_dtypes,
                                   scalar_lists=scalar, rule=rule):
                return None
            key = key or _update_key(rule, fixed, device, is_half)
            grads_at = _binding().pointers([_as_list(grads)])
        layout = self.cache(key, lambda: tables.Layout(
            listed, device, moving=1, scalar_lists=scalar,
            written=[k for k in range(len(every)) if k != 1]))
        devices.order(layout, device, layout.device_tensors())  # before its table is written
        return layout if layout.refresh(grads, grads_at) else None

    # ------------------------------------------------------------------ sparse
    @torch._disable_dynamo
    def sparse_rows(self, rule: str, var: torch.Tensor, slots: Sequence[torch.Tensor],
                    indices: torch.Tensor, values: torch.Tensor, hyper: Sequence[Any], *,
                    found_inf: torch.Tensor | None = None) -> bool:
        """``kernels.triton.sparse_rows`` (see there) through this entry."""
        package = _package()
        if (rule not in package.SPARSE_RULES or not package.supports(var.dtype, var.device)
                or var.dim() == 0):
            return False
        held = [var, *slots]
        device = var.device
        if not (is_plain([*held, indices, values]) and all(
                t.layout == torch.strided and t.device == device and t.is_contiguous()
                for t in (*held, indices, values))):
            return False
        if (indices.dtype != torch.int64 or indices.dim() != 1 or values.dtype != var.dtype
                or values.shape != (indices.numel(), *var.shape[1:])):
            return False
        if rule in package.DENSIFIED_RULES:
            with devices.guard(device):
                dense = torch.zeros_like(var).index_add_(0, indices, values)
            return self.update(rule, [[var], [dense], *[[s] for s in slots]], hyper,
                               found_inf=found_inf)
        if any(t.dtype != var.dtype or t.shape != var.shape for t in slots):
            return False
        lists = [[var], [values], *[[s] for s in slots]]
        if not package._apart(lists, frozenset({1}), rule):
            return False
        key = ("rows", rule, device, tuple(t.data_ptr() for t in held))
        with self.lock, devices.guard(device):
            holder = self.cache(key, lambda: _RowsLayout(tables.Scalars(device)))
            devices.order(holder, device, holder.device_tensors())
            with package._family(package._FAMILIES[rule]) as module:
                module.RULES[rule](lists, list(hyper), None, _on(found_inf, device), holder,
                                   rows=indices)
        return True

    # ------------------------------------------------------------------ read pass
    def l2_norms(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
        """``kernels.triton.l2_norms`` (see there) through this entry."""
        package = _package()
        if not tensors:
            return None
        first = tensors[0]
        if not (first.dtype in (*package.DTYPES, *package.HALF_DTYPES)
                and package.supports(torch.float32, first.device)):
            return None
        found = _plain_list(tensors)
        if found is None:
            if not _alike(tensors):
                return None
            if not all(t.is_contiguous() for t in tensors):
                with devices.guard(first.device):
                    tensors = [t.contiguous() for t in tensors]
        return self._read(tensors, None, sqrt=True, found=found)

    def square_sums(self, tensors: Sequence[torch.Tensor],
                    multiplier: torch.Tensor | None = None) -> torch.Tensor | None:
        """``kernels.triton.square_sums`` (see there) through this entry."""
        with self.lock:
            return self._square_sums(tensors, multiplier)

    def _square_sums(self, tensors, multiplier) -> torch.Tensor | None:
        package = _package()
        if not tensors:
            return None
        first = tensors[0]
        if not package.supports(first.dtype, first.device):
            return None
        found = _plain_list(tensors)
        if found is None and not (_alike(tensors) and all(t.is_contiguous() for t in tensors)):
            return None
        return self._read(tensors, multiplier, sqrt=False, found=found)

    def _read(self, tensors, multiplier, *, sqrt: bool, found) -> torch.Tensor:
        package = _package()
        device = tensors[0].device
        with self.lock, devices.guard(device), package._family("norms") as module:
            return module.sums(tensors, _on(multiplier, device), sqrt=sqrt, found=found,
                               cache=self.cache, order=devices.order)


def _plain_list(tensors: Sequence[torch.Tensor]) -> tuple | None:
    """The data pointers and element counts of ``tensors`` where each is an exact, strided,
    contiguous tensor of the first's dtype and device (one C pass), else ``None``."""
    first = tensors[0]
    return _binding().plain_on([_as_list(tensors)], (first.dtype,), first.device)


def _alike(tensors: Sequence[torch.Tensor]) -> bool:
    """Exact tensors, strided, of the first's dtype and device (C-level passes)."""
    first = tensors[0]
    return (is_plain(tensors) and set(map(_DTYPE, tensors)) == {first.dtype}
            and set(map(_DEVICE, tensors)) == {first.device}
            and set(map(_LAYOUT, tensors)) == {torch.strided})


#: The entry of calls made without an optimizer (a plain LRU cache).
_SHARED = Entry(steps=False)
