"""The cheap half of the check: one device-side reduction per checked tensor, read once a step.

A probe of a tensor is its sum (accumulated in float32 for 16-bit tensors), taken when the
tensor is produced (a snapshot: later in-place changes do not move it). The sum of a tensor is
NaN or infinite whenever one of its elements is: NaN propagates, an infinity survives addition
of finite values, and ``inf + -inf`` is NaN. It is one read pass with no temporary, 10-30x
cheaper than ``torch.isfinite(t).all()`` on the CPU.

A sum can also be non-finite while every element is finite: it overflowed (``inf``), or two
partial sums overflowed with opposite signs (``inf - inf = NaN``). So the log keeps a reference
to each probed tensor until it is read, and a non-finite probe is confirmed on the tensor itself
(``torch.isnan``/``torch.isinf``, only for the probes that read non-finite): an overflow-only sum
is skipped, a confirmed one is never dropped. A tensor changed in place after its probe cannot
be confirmed so; its probe counts as confirmed (the sum of a snapshot, ``Bad.confirmed`` false).

Many tensors known at once (the parameters' gradients before the update, the parameters and
the optimizer's state after it) are probed by ``add_many`` under a few fused reductions (on the
CPU the sums of the large tensors and one sum of the small ones concatenated; on an accelerator
one multi-tensor ``torch._foreach_norm``), on one thread below ``_HUGE`` elements. A non-finite
reduction is traced to its tensor by looking at each tensor of the list in order (the tensors
as they are then). The gradients reaching module outputs are collected by their hooks
(``defer``) and reduced together at the read.

Probes stay on the device. ``ProbeLog.first_bad()`` stacks them per dtype and reads one boolean
(one host synchronisation per read, whatever the number of probes); only when it is set are
the probes read individually to find the first confirmed one in execution order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
from torch._utils import _flatten_dense_tensors

__all__ = ["Bad", "Probe", "ProbeLog", "kind_of"]

_WIDEN = (torch.float16, torch.bfloat16)
_SMALL = 16384  # elements: smaller tensors are concatenated and summed together by add_many
_HUGE = 1 << 20  # elements: add_many sums larger tensors with the step's thread count


@dataclass(frozen=True)
class Probe:
    """Where a probed tensor came from. ``name`` is the module's qualified name (``"<input>"``
    for the model's input data), ``detail`` the argument or parameter name, ``call`` the index of
    the model call within the step (gradient accumulation calls the model several times),
    ``seq`` a number identifying the module output whose gradient a backward probe saw."""

    phase: str
    name: str
    step: int
    call: int = 0
    detail: str | None = None
    slot: str | None = None
    seq: int = -1


@dataclass(frozen=True)
class Bad:
    """The first confirmed non-finite probe of a read: the probe, the kinds of values its
    tensor holds (``{"nan"}``, ``{"inf"}`` or both), the tensor (``None`` if it was changed in
    place since: then ``kinds`` comes from the probe's sum), whether the tensor confirmed it,
    and the probes read before it (in execution order)."""

    probe: Probe
    kinds: frozenset[str]
    tensor: torch.Tensor | None
    confirmed: bool
    before: tuple[Probe, ...]


class ProbeLog:
    """Probes in execution order, kept on the device until ``first_bad`` reads them.

    Each entry's description is kept as the tuple of ``Probe``'s fields (a ``Probe`` is only
    built for the entries that are looked at): ``add`` runs a hundred times a step.
    """

    def __init__(self) -> None:
        self._values: list[torch.Tensor] = []
        self._probes: list[tuple] = []
        self._tensors: list[tuple[torch.Tensor, int]] = []
        # add_many: (position among the single probes, reductions, (indices, describe), tensors)
        self._chunks: list[tuple[int, list[torch.Tensor], tuple[list[int], Callable],
                                 list[tuple[torch.Tensor, int]]]]
        self._chunks = []
        self._pending: list[tuple[int, torch.Tensor, tuple]] = []  # defer: (position, t, probe)

    def __len__(self) -> int:
        return len(self._probes)

    def defer(self, tensor: torch.Tensor, probe: tuple) -> None:
        """Record a tensor that nothing changes in place before the next read (a gradient
        handed to a hook): its reduction is fused with the other deferred ones at the read."""
        self._pending.append((len(self._probes), tensor, probe))

    def _flush(self) -> None:
        """The deferred tensors as ``add_many`` chunks, one per position."""
        pending, self._pending = self._pending, []
        start = 0
        for i in range(1, len(pending) + 1):
            if i == len(pending) or pending[i][0] != pending[start][0]:
                group = pending[start:i]
                self._add_chunk(group[0][0], [t for _, t, _ in group],
                                lambda j, group=group: group[j][2])
                start = i

    def add_many(self, tensors: list[torch.Tensor], describe: Callable[[int], tuple]) -> None:
        """Record many floating-point tensors under a few fused reductions (``_reduce_many``; a
        sparse tensor goes through ``add``). ``describe(i)`` gives the probe of ``tensors[i]``
        (built only when it is looked at). A non-finite reduction is traced back to its tensor
        by looking at each tensor of the list, in order."""
        if self._pending:
            self._flush()
        self._add_chunk(len(self._probes), tensors, describe)

    def _add_chunk(self, position: int, tensors: list[torch.Tensor],
                   describe: Callable[[int], tuple]) -> None:
        kept: list[int] = []
        dense: list[torch.Tensor] = []
        for i, tensor in enumerate(tensors):
            if tensor.is_sparse:
                self.add(tensor, describe(i))
            elif tensor.numel():
                kept.append(i)
                dense.append(tensor)
        if dense:
            self._chunks.append((position, _reduce_many(dense), (kept, describe),
                                 [(t, t._version) for t in dense]))

    def add(self, tensor: torch.Tensor, probe: tuple) -> None:
        """Record one floating-point tensor described by ``probe`` (``Probe``'s fields)."""
        if tensor.is_sparse:
            tensor = tensor._values()
        if tensor.numel() == 0:
            return
        if tensor.requires_grad:
            tensor = tensor.detach()
        self._values.append(_sum(tensor))
        self._probes.append(probe)
        self._tensors.append((tensor, tensor._version))

    def insert(self, index: int, tensor: torch.Tensor, probe: tuple) -> None:
        """Record a probe at position ``index`` (keyword inputs, known only after the call, go
        where the call began)."""
        n = len(self._probes)
        self.add(tensor, probe)
        if len(self._probes) > n:
            for entries in (self._values, self._probes, self._tensors):
                entries.insert(index, entries.pop())
            self._chunks = [(at + (at > index), *rest) for at, *rest in self._chunks]
            self._pending = [(at + (at > index), *rest) for at, *rest in self._pending]

    def clear(self) -> None:
        self._values.clear()
        self._probes.clear()
        self._tensors.clear()
        self._chunks.clear()
        self._pending.clear()

    def first_bad(self) -> Bad | None:
        """The first probe, in execution order, whose tensor holds a NaN or an Inf; ``None`` if
        there is none (every sum finite, or the non-finite sums only overflowed). Clears the
        log."""
        return next(self.bad_probes(), None)

    def bad_probes(self) -> Iterator[Bad]:
        """The probes whose tensors hold a NaN or an Inf, in execution order (overflowed sums of
        finite values skipped). The log is cleared when the iteration begins."""
        if self._pending:
            self._flush()
        values, probes, tensors, chunks = self._values, self._probes, self._tensors, self._chunks
        self._values, self._probes, self._tensors, self._chunks = [], [], [], []
        if (not values and not chunks) or _all_finite(values, [v for c in chunks for v in c[1]]):
            return
        order: list[tuple[float | None, tuple, tuple[torch.Tensor, int]]] = []
        singles = torch.stack([v.double().cpu() for v in values]).tolist() if values else []
        at = 0
        for position, chunk, metas, kept in [*chunks, (len(values), None, [], [])]:
            order += zip(singles[at:position], probes[at:position], tensors[at:position],
                         strict=True)
            at = position
            if chunk is not None:  # None: look at the tensor itself
                value = 0.0 if _all_finite([], chunk) else None
                indices, describe = metas
                order += ((value, describe(i), entry)
                          for i, entry in zip(indices, kept, strict=True))
        for i, (s, probe, (tensor, version)) in enumerate(order):
            if s is not None and s == s and abs(s) != float("inf"):
                continue
            before = tuple(Probe(*p) for _, p, _ in order[:i])
            if s is not None and tensor._version != version:
                # changed in place since its probe: trust the probe's snapshot
                yield Bad(Probe(*probe), frozenset({"nan" if s != s else "inf"}), None, False,
                          before)
                continue
            kinds = frozenset(kind_of([tensor]))
            if kinds:
                yield Bad(Probe(*probe), kinds, tensor, True, before)


def _reduce_many(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """1-dim tensors, one per device, that are all finite when every element of ``tensors`` is
    (and then only overflowed). On an accelerator, the 2-norms by one multi-tensor kernel
    (``torch._foreach_norm``); on the CPU, where that runs tensor by tensor, the sums of the
    large tensors and one sum over the small ones flattened together per dtype: those below
    ``_HUGE`` elements on one thread (``_OneThread``), the huge ones with the thread count the
    step uses (there the work outweighs waking a second thread)."""
    parts: list[torch.Tensor] = []
    huge: list[torch.Tensor] = []
    small: dict[torch.dtype, list[torch.Tensor]] = {}
    accel: dict[torch.device, list[torch.Tensor]] = {}
    with torch.no_grad():
        with _ONE_THREAD:
            for t in tensors:
                n = t.numel()
                if not t.is_cpu:
                    accel.setdefault(t.device, []).append(t)
                elif n < _SMALL:
                    small.setdefault(t.dtype, []).append(t)
                elif n >= _HUGE:
                    huge.append(t)
                else:
                    parts.append(_sum(t))
            for group in small.values():
                parts.append(_sum(_flatten_dense_tensors(group) if len(group) > 1 else group[0]))
        parts += [_sum(t) for t in huge]
        out = [torch.stack([v if v.dtype == torch.float32 else v.float() for v in parts])
               ] if parts else []
        out += [torch.stack(torch._foreach_norm(group, 2)).float() for group in accel.values()]
    return out


def _sum(t: torch.Tensor) -> torch.Tensor:
    return t.sum(dtype=torch.float32) if t.dtype in _WIDEN else t.sum()


class _OneThread:
    """The fused CPU reductions on one thread: they are bound by memory bandwidth, and on a busy
    machine every extra parallel region waits for a second thread (the plain step's own ops keep
    the thread count they had). Used around the few fused reductions of a step only: switching
    the thread count around every single probe cost more than it saved (``trainop bench
    --numerics``). Not reentrant."""

    threads = 1

    def __enter__(self) -> None:
        self.threads = torch.get_num_threads()
        if self.threads > 1:
            torch.set_num_threads(1)

    def __exit__(self, *exc) -> None:
        if self.threads > 1:
            torch.set_num_threads(self.threads)


_ONE_THREAD = _OneThread()


def kind_of(values: Iterable[torch.Tensor]) -> set[str]:
    """Which non-finite kinds (``"nan"``, ``"inf"``) the floating (or complex) tensors hold
    (host reads)."""
    kinds: set[str] = set()
    for t in values:
        if (not isinstance(t, torch.Tensor) or t.numel() == 0
                or not (t.is_floating_point() or t.is_complex())):
            continue
        if bool(torch.isnan(t).any()):
            kinds.add("nan")
        if bool(torch.isinf(t).any()):
            kinds.add("inf")
    return kinds


def _all_finite(values: list[torch.Tensor], chunks: list[torch.Tensor]) -> bool:
    """One host read: whether every 0-dim tensor in ``values`` and every element of the 1-dim
    ``chunks`` is finite."""
    groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for v in values:
        groups.setdefault((v.dtype, v.device), []).append(v)
    flags = [torch.isfinite(torch.stack(vs)).all() for vs in groups.values()]
    flags += [torch.isfinite(c).all() for c in chunks]
    if len(flags) > 1:
        same = len({f.device for f in flags}) == 1
        flags = [torch.stack(flags if same else [f.cpu() for f in flags]).all()]
    return bool(flags[0])
