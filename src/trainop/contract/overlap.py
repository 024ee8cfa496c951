"""Parameters that share memory are rejected when they join an optimizer.

Two parameters whose elements overlap (views of one tensor, ``x[:3]`` and ``x[2:]``) make every
update order-dependent: each kernel reads one and writes the other. The check sorts the
parameters' byte ranges within each storage once per registration (``add_param_group``, TF-style
first sight), never per step. A strided view counts as the range from its first to its last
element (interleaved views such as ``x[::2]`` and ``x[1::2]`` are rejected too: give each
parameter its own storage). A parameter whose own elements overlap (``expand``) is rejected as well.
Tensor subclasses (DTensor, ...) and ``meta`` tensors have no
storage to compare and are skipped. ``byte_extents`` gives the same ranges as addresses, for a
step that compares its gradients with the memory it writes (``contract/read_first.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise

import numpy as np
import torch

from trainop.kernels.native import metadata

__all__ = ["byte_extents", "check_memory_written", "check_no_duplicates", "check_no_overlap",
           "check_written_apart", "own_elements_overlap"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def check_no_duplicates(tensors: list[torch.Tensor], arg: str) -> None:
    """``ValueError`` naming both positions if one tensor is listed twice in ``arg`` (the
    simplest overlap, reported as what it is)."""
    first: dict[int, int] = {}
    for i, t in enumerate(tensors):
        j = first.setdefault(id(t), i)
        if j != i:
            raise ValueError(f"Expected `{arg}` without duplicates, got the same tensor (shape "
                             f"{tuple(t.shape)}) at {arg}[{j}] and {arg}[{i}] (a duplicate "
                             f"entry); list each variable once")


def _byte_range(p: torch.Tensor) -> tuple[int, int, int] | None:
    """The storage's address and the byte offsets ``[low, high)`` from ``p``'s first to past
    its last element; None without a storage to compare. torch's strides are never negative
    (``flip`` copies, ``from_numpy`` refuses a negative stride), so the first element is at
    the storage offset."""
    if type(p) not in _PLAIN or p.layout != torch.strided or p.is_meta or p.numel() == 0:
        return None
    # a shape and its strides have the same length
    span = 1 + sum((n - 1) * s for n, s in zip(p.shape, p.stride()))  # noqa: B905
    size = p.element_size()
    low = p.storage_offset() * size
    return p.untyped_storage().data_ptr(), low, low + span * size


def byte_extents(tensors: Sequence[torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """The byte addresses ``[start, end)`` (int64 arrays) from each tensor's first to past its
    last element; ``[0, 0)`` for one without a storage to compare (a subclass, a sparse or
    ``meta`` tensor, no elements). One C pass where the metadata reader is built (its
    ``extents``), else tensor by tensor."""
    tensors = list(tensors)
    out = np.zeros(2 * len(tensors), dtype=np.int64)
    reader = metadata.load()
    if reader is not None:
        reader.extents(tensors, _PLAIN, out.ctypes.data)
    else:
        for i, t in enumerate(tensors):
            found = _byte_range(t)
            if found is not None:
                out[2 * i] = found[0] + found[1]
                out[2 * i + 1] = found[0] + found[2]
    return out[0::2], out[1::2]


def own_elements_overlap(t: torch.Tensor) -> bool:
    """Whether some elements of ``t`` share memory (an expanded tensor, stride 0)."""
    found = _byte_range(t)
    return found is not None and (found[2] - found[1]) < t.numel() * t.element_size()


def check_no_overlap(params: Iterable[torch.Tensor]) -> None:
    """Raise ``ValueError`` if two distinct parameters share elements (see module doc).

    Example:
        >>> import torch
        >>> x = torch.zeros(4)
        >>> check_no_overlap([x[:2], x[2:]])  # disjoint views: fine
    """
    labelled = []
    seen: set[int] = set()
    for i, p in enumerate(params):
        if id(p) in seen:  # the same parameter named twice is not two that overlap
            continue
        seen.add(id(p))
        if own_elements_overlap(p):
            raise ValueError(
                f"Expected parameters that do not share memory, got parameter {i} (shape "
                f"{tuple(p.shape)}, stride {p.stride()}) whose own elements overlap (an "
                "expanded tensor?); give it its own storage (e.g. .clone())")
        labelled.append((p, f"parameters {i} (shape {tuple(p.shape)})",
                         f"{i} (shape {tuple(p.shape)})"))
    found = _first_overlap(labelled)
    if found is not None:
        raise ValueError(
            f"Expected parameters that do not share memory, got {found[0]} and "
            f"{found[1]} overlapping in one storage; give every parameter its own storage "
            "(e.g. .clone())")


def check_written_apart(tensors: Iterable[tuple[torch.Tensor, str]]) -> None:
    """Raise ``ValueError`` if two tensors an update writes (parameters and their slots, each
    with a label such as ``"the slot 'm' of parameter 3"``) share elements: a slot replaced by
    a view of its parameter or of another slot (or the very same tensor as another slot) would
    be written twice per step."""
    found = _first_overlap([(t, label, label) for t, label in tensors])
    if found is not None:
        raise ValueError(
            f"Expected the parameters and slots an update writes not to share memory, got "
            f"{found[0]} and {found[1]} overlapping in one storage; give each its own "
            "storage (e.g. .clone())")


def check_memory_written(tensors: list[tuple[torch.Tensor, str]]) -> None:
    """``check_written_apart``, and first no tensor whose own elements overlap (an expanded
    tensor assigned as ``p.data``): a kernel writing it would write one element twice."""
    for t, label in tensors:
        if own_elements_overlap(t):
            raise ValueError(
                f"Expected the parameters and slots an update writes not to share memory, got "
                f"{label} (stride {t.stride()}) whose own elements overlap (an expanded "
                "tensor?); give it its own storage (e.g. .clone())")
    check_written_apart(tensors)


def _first_overlap(labelled):
    """For the first two ``(tensor, label, label)`` items whose tensors' byte
    ranges overlap within one storage (one sort): the first one's first label and the second
    one's second label; None if no two overlap. Sorted by storage and start, two ranges of one
    storage overlap only if two neighbours do (disjoint neighbours keep every later range past
    every earlier one's end), so neighbours are all that is compared."""
    ranges = []
    for t, first, second in labelled:
        found = _byte_range(t)
        if found is not None:
            ranges.append((*found, first, second))
    ranges.sort(key=lambda r: (r[0], r[1]))
    for a, b in pairwise(ranges):
        if a[0] == b[0] and b[1] < a[2]:
            return a[3], b[4]
    return None
