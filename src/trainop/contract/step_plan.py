"""A cached plan for the torch-style ``step()``: per-step Python work that does not grow with a
Python loop over tensors beyond one pass that reads ``p.grad``.

The plan groups the parameters once into buckets (one param group, dtype and device each) with
their slot lists, so a step only gathers the gradients, checks them in one pass and hands whole
lists to the fused or foreach kernel. It is rebuilt whenever the optimizer's parameters or state
change (``add_param_group``, ``load_state_dict``, TF-style registration) and is only used when
every parameter already has its slots and every gradient is dense and well-formed; any other
step takes the general, fully validated path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter, is_, methodcaller
from typing import Any

import numpy as np
import torch

from trainop.contract.read_first import read_first
from trainop.kernels.native import metadata

# Attribute readers for map(): a list of tensors read without a Python loop body.
_GRAD, _LAYOUT = attrgetter("grad"), attrgetter("layout")
_SHAPE, _DTYPE = attrgetter("shape"), attrgetter("dtype")
_POINTER = methodcaller("data_ptr")
_PLAIN = (torch.Tensor, torch.nn.Parameter)


@dataclass
class Bucket:
    group_index: int
    params: list[torch.Tensor]
    slots: dict[str, list[torch.Tensor]]
    start: int  # this bucket's slice of the plan's flat parameter list
    stop: int
    # What the native branch last checked (the variables' and slots' data pointers and the
    # variables' sizes): while they are the same, so are the storages and sizes it checked.
    native_checked: Any = None
    # The arrays of that check (pointers, counts and their addresses), reused while the
    # variables and slots are as they were (``boundary._as_last_checked``).
    native_arrays: Any = None
    # The implementation chosen for these hyperparameters (the namespace of a reused Prepared).
    chosen_for: Any = None
    implementation: str | None = None


@dataclass
class StepPlan:
    params: list[torch.Tensor]  # every parameter, bucket by bucket
    buckets: list[Bucket]
    groups: GroupsSnapshot  # the groups' parameters when the plan was built
    # The optimizer's state object and its change count when the plan was built (see _state).
    state: Any = field(default=None, init=False)
    state_version: int = field(default=-1, init=False)
    # Filled from the parameters when the plan is built: their shapes and dtypes then, and
    # torch.strided for each (what the gradients must be); for the metadata reader, the same
    # with their devices as one int64 record (``metadata.cpp``'s ``gradients``).
    shapes: list = field(init=False)
    dtypes: list = field(init=False)
    layouts: list = field(init=False)
    record: np.ndarray = field(init=False)
    bulk: bool = field(init=False)
    # What this step's gradient pass read for the C boundary (see ``read_for``).
    _reads: np.ndarray = field(init=False)
    _read_valid: bool = field(default=False, init=False)
    # Whether that pass found a gradient that may share memory (``read_first``'s filter, read
    # in the same C pass); None where it was not read there.
    _shared: bool | None = field(default=None, init=False)
    _written_list: list | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.shapes = [p.shape for p in self.params]
        self.pointers = [p.data_ptr() for p in self.params]
        self.dtypes = [p.dtype for p in self.params]
        self.layouts = [torch.strided] * len(self.params)
        # The metadata reader takes plain tensors and Parameters (no __torch_function__).
        self.bulk = all(type(p) in _PLAIN for p in self.params)
        reader = metadata.load() if self.bulk else None
        self.record = np.asarray(reader.record(self.params) if reader is not None else [],
                                 dtype=np.int64)
        self._reads = np.empty(3 * len(self.params), dtype=np.int64)
        # numpy's .ctypes costs a microsecond a call: the addresses, read once
        self._record_at, self._reads_at = self.record.ctypes.data, self._reads.ctypes.data

    def gradients(self) -> list[torch.Tensor] | None:
        """The gradients in plan order, or ``None`` if any is missing, sparse or malformed (not
        of its parameter's shape and dtype), or a parameter is no longer of the shape and dtype
        the plan was built for (``p.data = t`` since then): the general path then validates
        everything (slots against the new shape) before anything moves. List comparisons, which
        cost less than a Python condition per tensor; where the metadata reader is built, it
        makes the same checks in one call, and where every parameter and gradient is a plain
        contiguous CPU tensor also reads what the C boundary needs of them (``read_for``).
        A gradient sharing memory with a parameter or slot of the plan is a copy made here
        (``read_first``)."""
        grads = self._gradients()
        return None if grads is None else self.read_first(grads)

    def read_first(self, grads: list[torch.Tensor], start: int = 0) -> list[torch.Tensor]:
        """``grads`` where none from ``start`` on shares memory with a parameter or slot of the
        plan, else with those copied (``contract.read_first``; ``read_for`` then reads nothing:
        its pointers are the shared memory's)."""
        copied = read_first(grads, self._written, start, shared=self._shared)
        if copied is None:
            return grads
        self._read_valid = False
        return copied

    def _written(self) -> list[torch.Tensor]:
        """Every tensor a step of this plan writes: the parameters and their slots (the list
        made once: the plan's tensors do not change)."""
        if self._written_list is None:
            self._written_list = [*self.params, *(t for b in self.buckets
                                                  for slot in b.slots.values() for t in slot)]
        return self._written_list

    def _gradients(self) -> list[torch.Tensor] | None:
        """``gradients`` as they are (a gradient sharing memory not copied)."""
        self._read_valid, self._shared = False, None
        reader = metadata.load() if self.bulk else None
        if reader is not None:
            found = reader.gradients(self.params, self._record_at, len(self.record), _PLAIN,
                                     self._reads_at)
            if found is None:
                return None
            grads, self._read_valid, self._shared = found
            return grads
        grads = list(map(_GRAD, self.params))
        try:
            layouts = list(map(_LAYOUT, grads))
        except AttributeError:  # a missing gradient
            return None
        if (layouts != self.layouts or list(map(_SHAPE, grads)) != self.shapes
                or list(map(_DTYPE, grads)) != self.dtypes
                or list(map(_SHAPE, self.params)) != self.shapes
                or list(map(_DTYPE, self.params)) != self.dtypes
                or list(map(_POINTER, self.params)) != self.pointers):
            return None
        return grads

    def moved(self) -> bool:
        """Whether a parameter is no longer the memory the plan was built for (``p.data = t``,
        of the same shape or not): then the general path checks the step (``gradients`` found
        it) and the plan is built again."""
        reader = metadata.load() if self.bulk else None
        if reader is not None:
            return list(self.record) != list(reader.record(self.params))
        return (list(map(_SHAPE, self.params)) != self.shapes
                or list(map(_DTYPE, self.params)) != self.dtypes
                or list(map(_POINTER, self.params)) != self.pointers)

    def read_for(self, bucket: Bucket) -> tuple[np.ndarray, np.ndarray] | None:
        """What this step's ``gradients()`` read of ``bucket``'s parameters and gradients for
        the C boundary (``kernels.native.boundary.checked``'s ``read``): their data pointers,
        parameters then gradients, and the parameters' element counts; ``None`` where it did
        not (no metadata reader, or a tensor that is not a plain contiguous CPU tensor).
        Valid until the next ``gradients()``; nothing but trainop's own code may run between
        the two (hyperparameters, callables included, are evaluated before the gradients are
        read)."""
        if not self._read_valid:
            return None
        n, start, stop = len(self.params), bucket.start, bucket.stop
        reads = self._reads
        if start == 0 and stop == n:
            return reads[:2 * n].view(np.uint64), reads[2 * n:]
        return (np.concatenate((reads[start:stop], reads[n + start:n + stop])).view(np.uint64),
                reads[2 * n + start:2 * n + stop])


class GroupsSnapshot:
    """The parameter objects of every param group at one moment, to notice direct edits of
    the groups (``group["params"][i] = q``, appending, replacing the list) in one identity
    comparison per parameter (``operator.is_``: a tensor's ``==`` would compare values)."""

    __slots__ = ("_params",)

    def __init__(self, param_groups) -> None:
        self._params = [list(g["params"]) for g in param_groups]

    def matches(self, param_groups) -> bool:
        saved = self._params
        return len(param_groups) == len(saved) and all(
            len(g["params"]) == len(ps) and all(map(is_, g["params"], ps))
            for g, ps in zip(param_groups, saved, strict=True))


def build_plan(param_groups, state, slot_names) -> StepPlan | None:
    """The plan for these groups, or ``None`` if some parameter lacks one of its group's
    ``slot_names`` (no slots yet; reading ``opt.state[p]`` leaves an empty entry behind) or
    appears twice (then the general path runs, which creates slots and handles repeats)."""
    buckets: dict[tuple, list[torch.Tensor]] = {}
    seen: set[int] = set()
    for gi, group in enumerate(param_groups):
        for p in group["params"]:
            slots = state.get(p)
            if id(p) in seen or slots is None or any(n not in slots for n in slot_names[gi]):
                return None
            seen.add(id(p))
            buckets.setdefault((gi, p.dtype, p.device), []).append(p)
    params: list[torch.Tensor] = []
    out = []
    for (gi, _, _), ps in buckets.items():
        names = slot_names[gi]  # (not a wrapper's keys in the same state: Lookahead's)
        slots = {n: [state[p][n] for p in ps] for n in names}
        out.append(Bucket(gi, ps, slots, len(params), len(params) + len(ps)))
        params.extend(ps)
    return StepPlan(params, out, GroupsSnapshot(param_groups))
