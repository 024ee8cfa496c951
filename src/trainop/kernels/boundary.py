"""The device-agnostic half of the kernel boundary, shared by the native (C, CPU) and the Triton
(CUDA, or CPU under Triton's interpreter) kernels: what must hold before a tensor's memory is
handed to a kernel that works on raw pointers and element counts.

- ``is_plain``: exactly ``torch.Tensor`` or ``torch.nn.Parameter`` (not a subclass such as
  ``DTensor``, ``FakeTensor`` or ``FunctionalTensor``);
- ``full_check``: every tensor strided on the kernel's device (the CPU, or the variables' device
  for the Triton kernels), of the expected dtype and element
  count (tensor ``t`` of every list has the element count of variable ``t``; a list read as one
  element per tensor holds 0-dim tensors), else a ``ValueError`` naming the list and tensor;
- ``check_overlap``: no written tensor overlaps another written one (``ValueError``) or one
  only read (``False``: the caller's list path, which reads before it writes);
- ``sorted_ranges`` and ``overlapping``: the search behind it, for byte ranges of any source
  (the Triton layouts' moving gradients, the step's gradients read before any write).

``kernels.native.boundary`` adds the C metadata reader and the per-bucket cache for the CPU;
``kernels.triton`` calls these with its own device and kernel name.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["PLAIN", "PLAIN_TYPES", "check_overlap", "full_check", "is_plain", "overlapping",
           "sorted_ranges"]

#: The tensor types whose memory may go to a kernel (exact types, no subclasses).
PLAIN = frozenset({torch.Tensor, torch.nn.Parameter})
#: The same as a tuple (what the C metadata reader's checks take).
PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
_LIST_NAMES = ("variables", "gradients")
_CPU = torch.device("cpu")


def is_plain(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether every tensor is exactly a ``torch.Tensor`` or ``nn.Parameter`` (one C loop)."""
    return PLAIN.issuperset(map(type, tensors))


def list_name(k: int) -> str:
    """The name of list ``k`` of a kernel call, for messages."""
    return _LIST_NAMES[k] if k < len(_LIST_NAMES) else f"slot list {k - 2}"


def full_check(lists, dtype: torch.dtype, list_dtypes: dict[int, torch.dtype],
               scalar_lists: frozenset[int], rule: str, *, device: torch.device | None = None,
               kernel: str = "native") -> None:
    """Raise ``ValueError`` for a tensor no path could run: a wrong layout or device, dtype,
    element count or shape (see the module doc). ``device``: the one device every tensor
    must be on (``None``: the CPU); ``kernel``: the kernel family's name in messages."""
    variables = lists[0]
    on = _CPU if device is None else device
    where_device = "CPU" if on.type == "cpu" else str(on)
    for k, tensors in enumerate(lists):
        expected = list_dtypes.get(k, dtype)
        if len(tensors) != len(variables):
            raise ValueError(f"trainop's {kernel} {rule} call: {list_name(k)} holds "
                             f"{len(tensors)} tensors for {len(variables)} variables")
        for t, (x, v) in enumerate(zip(tensors, variables, strict=True)):
            where = f"trainop's {kernel} {rule} call: {list_name(k)}[{t}]"
            if x.layout != torch.strided or x.device != on:
                raise ValueError(f"{where} must be a dense {where_device} tensor, got layout "
                                 f"{x.layout} on {x.device}")
            if x.dtype != expected:
                raise ValueError(f"{where} must have dtype {expected}, got {x.dtype}")
            if k in scalar_lists:
                if x.dim() != 0:
                    raise ValueError(f"{where} must be a 0-dim tensor, got shape "
                                     f"{tuple(x.shape)}")
            elif x.numel() != v.numel() or (k > 0 and x.dim() != 0 and x.shape != v.shape):
                raise ValueError(f"{where} must have its variable's shape {tuple(v.shape)} "
                                 f"({v.numel()} elements), got shape {tuple(x.shape)} "
                                 f"({x.numel()} elements)")


def sorted_ranges(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-empty byte ranges ``[start, end)`` (int64 arrays) sorted by start, as
    ``(starts, reach)``: ``reach[i]`` the furthest end of ranges ``0..i`` (what ``overlapping``
    searches, whether or not the ranges overlap each other)."""
    keep = end > start
    start, end = start[keep], end[keep]
    order = np.argsort(start, kind="stable")
    return start[order], np.maximum.accumulate(end[order]) if len(end) else end


def overlapping(start: np.ndarray, end: np.ndarray,
                ranges: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """For each byte range ``[start, end)`` (int64 arrays), whether it shares a byte with one of
    ``ranges`` (``sorted_ranges``): one binary search per range. Empty ranges share none."""
    starts, reach = ranges
    if not len(starts):
        return np.zeros(len(start), dtype=bool)
    idx = np.searchsorted(starts, end, side="left") - 1
    return (end > start) & (idx >= 0) & (reach[np.maximum(idx, 0)] > start)


def check_overlap(lists, addresses: np.ndarray, counts: np.ndarray, read_only: frozenset[int],
                  rule: str, *, kernel: str = "native") -> bool:
    """No written tensor overlaps another written one (raises) or one only read (False: the
    list path, which reads before it writes), by one sort of address ranges. ``addresses`` and
    ``counts``: every tensor's data pointer and element count, list after list."""
    n = len(lists[0])
    written, read = [], []
    for k, tensors in enumerate(lists):
        size = tensors[0].element_size() if tensors else 0
        start = addresses[k * n:(k + 1) * n].astype(np.int64)
        end = start + counts[k * n:(k + 1) * n] * size
        (read if k in read_only else written).append((start, end))
    if not written:
        return True
    w_start, reach = sorted_ranges(np.concatenate([s for s, _ in written]),
                                   np.concatenate([e for _, e in written]))
    if len(w_start) > 1 and bool(np.any(reach[:-1] > w_start[1:])):
        raise ValueError(f"trainop's {kernel} {rule} call: tensors it writes (variables or "
                         "slots) share memory; give every parameter and slot its own storage")
    # a gradient sharing written memory: the list path
    return not any(bool(overlapping(start, end, (w_start, reach)).any()) for start, end in read)
