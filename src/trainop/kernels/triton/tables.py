"""The Triton path's device tables and constants, made once per layout and kept on the device.

A ``Layout`` describes one list of tensor lists (a bucket's variables, gradients, slots and
half copies; or the gradients the read pass measures) to a kernel that covers all of them in
one launch, whatever their number and sizes. One int64 device tensor holds, each section
starting at a multiple of 16 bytes:

- ``addresses``: ``L x T`` data pointers, list after list (``T`` tensors, ``L`` lists);
- ``blocks``: one record of four per block of ``block`` elements (``BLOCK`` unless the layout
  asks for another: the read pass's blocks of a 2-byte dtype are twice as long, so that each
  moves as many bytes as a float32 one) (tensor index, first element,
  end element, the block's index in tensor order, which places its partial sum), the blocks
  the vectorized launch takes first (``aligned``: every fixed list's address of the tensor
  16-byte aligned and the block's end a multiple of 16 elements), then the others;
- ``chunks``: the two-level reduction of the blocks' partial sums: ``(first, end)`` block
  indices of each run of at most ``RUN`` blocks of one tensor, then per tensor the index of
  its first chunk (``T + 1`` entries).

One list moves (``moving``: the gradients, which a new backward or
``zero_grad(set_to_none=True)`` puts at new addresses): its addresses are compared each step
(a tuple of data pointers) and, where they changed, written on the device by a small copy from
a host row into the existing table (``staging.Staging``: capturable, no allocation). Each
update layout also keeps its rule's hyperparameters as one float32 device tensor
(``Scalars``), written in place.

The layouts are kept in their owner's cache (``Cache``: one per optimizer, see
``entry.Entry``), bounded, least recently used first out; a layout a captured CUDA graph reads
(its host rows frozen by a capture), or one the optimizer's last two steps used, is never
evicted. Each holder of device tensors remembers the stream that used them last
(``stream``, ``device_tensors``; ordered by ``device.order``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from operator import methodcaller
from typing import Any

import numpy as np
import torch

from trainop.kernels.boundary import overlapping, sorted_ranges
from trainop.kernels.triton import staging

__all__ = ["BLOCK", "LIMIT", "RUN", "Cache", "Layout", "Scalars"]

#: Layouts a cache keeps before it evicts: least recently used first, never one a captured
#: graph reads, and, in an optimizer's cache, never one its last two steps used.
LIMIT = 64
_PTR = methodcaller("data_ptr")
_NUMEL = methodcaller("numel")
#: Elements a block of the tables covers by default (``launch.BLOCK``, repeated to stay below it).
BLOCK = 1024
#: Partial sums (one per block) a run adds, at most (``norms._run_sums``).
RUN = 1024
_RECORD = 4  # int64 per block record


class Cache:
    """The layouts of one owner (an optimizer's Triton entry, or the entry of calls made
    without one) by key, made on first use. Beyond ``LIMIT`` entries the least recently used
    are evicted, except those a captured graph reads (``pinned``) and, where ``steps`` (an
    optimizer's cache, told each step by ``next_step``), those the current or the previous
    step used: an optimizer with any number of param groups keeps every layout its steps use
    (no rebuild, nothing a capture would have to make), and layouts of tensors it no longer
    steps go once over the limit. Not locked: its owner's lock is held around every use.
    ``made`` counts the layouts made (for tests and the benchmark)."""

    __slots__ = ("generation", "items", "made", "steps", "used")

    def __init__(self, *, steps: bool) -> None:
        self.items: OrderedDict[tuple, Any] = OrderedDict()
        self.used: dict[tuple, int] = {}
        self.steps = steps
        self.generation = 0
        self.made = 0

    def next_step(self) -> None:
        """A new step of the owner begins."""
        self.generation += 1

    def __call__(self, key: tuple, make: Callable[[], Any]) -> Any:
        """The object of ``key``, made by ``make()`` the first time (never while a CUDA graph
        is captured: ``make`` raises there)."""
        found = self.items.get(key)
        if found is None:
            found = make()
            self.items[key] = found
            self.made += 1
            self.used[key] = self.generation
            if len(self.items) > LIMIT:
                self._evict()
        else:
            self.items.move_to_end(key)
            self.used[key] = self.generation
        return found

    def _evict(self) -> None:
        over = len(self.items) - LIMIT
        recent = self.generation - 1 if self.steps else None
        for key in list(self.items):
            if over <= 0:
                return
            if self.items[key].pinned:
                continue
            if recent is not None and self.used[key] >= recent:
                return  # (the rest were used later still)
            del self.items[key], self.used[key]
            over -= 1

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, key: object) -> bool:
        return key in self.items

    def values(self):
        return self.items.values()


class Scalars:
    """A rule's hyperparameters as one float32 device tensor, made once and written in place:
    the Python numbers through a host row when they change (``Staging``), the 0-dim tensors
    (beta powers, a tensor learning rate) by one device copy, nothing read on the host."""

    __slots__ = ("device", "h", "staging", "stream", "views")

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream: Any = None  # the stream that used ``h`` last (``device.order``)
        self.h: torch.Tensor | None = None
        self.staging: staging.Staging | None = None
        self.views: list[torch.Tensor] = []

    @property
    def pinned(self) -> bool:
        return self.staging is not None and self.staging.replayed

    def __call__(self, values: Sequence[Any]) -> torch.Tensor:
        n = len(values)
        if self.h is None or self.h.numel() != n:
            if staging.capturing(self.device):
                raise staging.warm_up_error("new hyperparameters")
            self.h = torch.zeros(n, dtype=torch.float32, device=self.device)
            self.staging = staging.Staging(n, torch.float32, self.device)
            self.views = list(self.h.unbind())
        tensors = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
        key = tuple(None if isinstance(v, torch.Tensor) else float(v) for v in values)
        if tensors:
            if self.staging.changed(key):
                self.staging.send(tuple(0.0 if v is None else v for v in key), self.h, key=key)
            torch._foreach_copy_([self.views[i] for i in tensors],
                                 [_scalar(values[i]) for i in tensors])
        else:
            self.staging.send(key, self.h, key=key)
        return self.h


def _scalar(value: torch.Tensor) -> torch.Tensor:
    """A 0-dim tensor value as ``_foreach_copy_`` takes it (a view only where needed)."""
    if value.dim() == 0 and not value.requires_grad:
        return value
    return value.detach().reshape(())


def _blocks(counts: np.ndarray, aligned: np.ndarray, block: int = BLOCK
            ) -> tuple[np.ndarray, int, np.ndarray]:
    """The block records of blocks of ``block`` elements (aligned ones first), how many are
    aligned, and each tensor's first block index (``T + 1`` entries)."""
    per = (counts + block - 1) // block
    first = np.concatenate([[0], np.cumsum(per)]).astype(np.int64)
    total = int(first[-1])
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), per)
    start = (np.arange(total, dtype=np.int64) - first[owner]) * block
    stop = np.minimum(start + block, counts[owner])
    records = np.stack([owner, start, stop, np.arange(total, dtype=np.int64)], axis=1)
    vector = aligned[owner] & (stop % 16 == 0)
    ordered = np.concatenate([records[vector], records[~vector]])
    return ordered, int(vector.sum()), first


def _chunks(first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs of at most ``RUN`` blocks of one tensor (first, end block index), and each
    tensor's first run (``T + 1`` entries)."""
    per = first[1:] - first[:-1]
    runs = (per + RUN - 1) // RUN
    run_first = np.concatenate([[0], np.cumsum(runs)]).astype(np.int64)
    owner = np.repeat(np.arange(len(per), dtype=np.int64), runs)
    lo = first[owner] + (np.arange(int(run_first[-1]), dtype=np.int64) - run_first[owner]) * RUN
    hi = np.minimum(lo + RUN, first[owner + 1])
    return np.stack([lo, hi], axis=1), run_first


def _even(a: np.ndarray) -> np.ndarray:
    """``a`` padded to an even length (the next section starts 16-byte aligned)."""
    return np.concatenate([a, np.zeros(len(a) % 2, dtype=np.int64)])


class Layout:
    """The device table of ``lists`` (tensors of one device, contiguous, checked by the
    caller), list ``moving`` refreshed each step (see the module doc); ``scalar_lists``: lists
    of one element per tensor (not streamed: no alignment needed); ``written``: the lists the
    kernels write, whose ranges a moving tensor must not overlap; ``block``: the elements of
    a block (a multiple of 16; the kernels' ``BLOCK``)."""

    def __init__(self, lists: Sequence[Sequence[torch.Tensor]], device: torch.device, *,
                 moving: int, scalar_lists: frozenset[int] = frozenset(),
                 written: Sequence[int] = (), block: int = BLOCK) -> None:
        if staging.capturing(device):
            raise staging.warm_up_error("a new layout")
        self.device = device
        self.block = block
        self.moving = moving
        self.tensors = len(lists[0])
        self.lists = len(lists)
        self.scalars = Scalars(device)
        base = 0 if moving else 1 if len(lists) > 1 else 0
        self.counts = np.fromiter(map(_NUMEL, lists[base]), dtype=np.int64,
                                  count=self.tensors)
        self.count_list = self.counts.tolist()
        addresses = np.array([list(map(_PTR, tensors)) for tensors in lists],
                             dtype=np.int64).reshape(len(lists), self.tensors)
        self.written = self._ranges(lists, addresses, written)
        self.staging = staging.Staging(self.tensors, torch.int64, device)
        self.staging.last = addresses[moving].tobytes()
        self._moving = addresses[moving]
        self.moving_aligned = not (addresses[moving] & 15).any()
        self.table: torch.Tensor | None = None
        self._work: tuple[torch.Tensor, ...] | None = None
        self._identity: torch.Tensor | None = None
        self._addresses = addresses
        self._fixed = [k for k in range(len(lists)) if k != moving and k not in scalar_lists]
        self.stream: Any = None  # the stream that used its device tensors last

    def device_tensors(self) -> list[torch.Tensor | None]:
        """The device tensors it keeps across steps (for ``device.order``)."""
        return [self.table, self.scalars.h, *(self._work or ()), self._identity]

    @property
    def pinned(self) -> bool:
        return self.staging.replayed or self.scalars.pinned

    @staticmethod
    def _ranges(lists, addresses, written) -> tuple[np.ndarray, np.ndarray] | None:
        if not written:
            return None
        start = np.concatenate([addresses[k] for k in written])
        end = np.concatenate([addresses[k] + np.fromiter(map(_NUMEL, lists[k]), np.int64)
                              * lists[k][0].element_size() for k in written])
        return sorted_ranges(start, end)

    def build(self) -> None:
        """Make the device table (once; never while a CUDA graph is captured)."""
        if self.table is not None:
            return
        if staging.capturing(self.device):
            raise staging.warm_up_error("a new layout")
        addresses = self._addresses
        addresses[self.moving] = self._moving
        fixed = addresses[self._fixed]
        aligned = ((fixed & 15) == 0).all(axis=0) if len(self._fixed) else np.ones(
            self.tensors, dtype=bool)
        records, self.aligned_blocks, first = _blocks(self.counts, aligned, self.block)
        runs, run_first = _chunks(first)
        self.blocks, self.runs = len(records), len(runs)
        self.most_runs = int((run_first[1:] - run_first[:-1]).max(initial=0))
        sections = [_even(addresses.reshape(-1)), records.reshape(-1), runs.reshape(-1),
                    run_first]
        host = torch.from_numpy(np.concatenate(sections))
        if self.device.type == "cuda":
            host = host.pin_memory()
        table = host.to(self.device, non_blocking=True)
        starts = np.cumsum([0] + [len(s) for s in sections]).tolist()
        n = self.tensors
        self.moving_view = table[self.moving * n:(self.moving + 1) * n]
        self.block_table = table[starts[1]:starts[2]]
        self.rest_table = table[starts[1] + self.aligned_blocks * _RECORD:starts[2]]
        self.run_table = table[starts[2]:starts[3]]
        self.run_first = table[starts[3]:starts[4]]
        self.table = table

    def work_space(self) -> tuple[torch.Tensor, ...]:
        """Float64 room for the blocks' partial sums and the runs' sums (made once)."""
        if self._work is None:
            if staging.capturing(self.device):
                raise staging.warm_up_error("a new layout")
            self._work = tuple(torch.empty(max(n, 1), dtype=torch.float64, device=self.device)
                               for n in (self.blocks, self.runs))
        return self._work

    def identity(self) -> torch.Tensor:
        """int64 ``0, 1, ..., T`` on the device: one run per tensor (made once)."""
        if self._identity is None:
            if staging.capturing(self.device):
                raise staging.warm_up_error("a new layout")
            self._identity = torch.arange(self.tensors + 1, dtype=torch.int64,
                                          device=self.device)
        return self._identity

    def refresh(self, tensors: Sequence[torch.Tensor], at: np.ndarray) -> bool:
        """Give the device this step's addresses ``at`` (uint64, read by the caller) of the
        moving list ``tensors`` (checked by the caller for dtype, shape, device and
        contiguity): copied where they changed. False (nothing done) where one overlaps memory
        a kernel writes (the caller's list path, which reads before it writes)."""
        at = at.view(np.int64)
        key = at.tobytes()
        if not self.staging.changed(key):
            return True
        if self.written is not None and bool(overlapping(
                at, at + self.counts * tensors[0].element_size(), self.written).any()):
            return False
        self.moving_aligned = not (at & 15).any()
        if self.table is None:
            self.staging.last = key  # no table yet: build() takes them
            self._moving = at
        else:
            self.staging.send(at, self.moving_view, key=key)
        return True
