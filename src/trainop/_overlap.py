"""Parameters that share memory are rejected when they join an optimizer.

Two parameters whose elements overlap (views of one tensor, ``x[:3]`` and ``x[2:]``) make every
update order-dependent: each kernel reads one and writes the other. The check sorts the
parameters' byte ranges within each storage once per registration (``add_param_group``, TF-style
first sight), never per step. A strided view counts as the range from its first to its last
element (interleaved views such as ``x[::2]`` and ``x[1::2]`` are rejected too: give each
parameter its own storage). A parameter whose own elements overlap (``expand``) is rejected as well.
Tensor subclasses (DTensor, ...) and ``meta`` tensors have no
storage to compare and are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["check_no_overlap"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _byte_range(p: torch.Tensor) -> tuple[int, int, int] | None:
    if type(p) not in _PLAIN or p.layout != torch.strided or p.is_meta or p.numel() == 0:
        return None
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(p.shape, p.stride(), strict=True))
    low = p.storage_offset() + sum((n - 1) * s for n, s in zip(p.shape, p.stride(), strict=True)
                                   if s < 0)
    size = p.element_size()
    return p.untyped_storage().data_ptr(), low * size, (low + span) * size


def check_no_overlap(params: Iterable[torch.Tensor]) -> None:
    """Raise ``ValueError`` if two distinct parameters share elements (see module doc).

    Example:
        >>> import torch
        >>> x = torch.zeros(4)
        >>> check_no_overlap([x[:2], x[2:]])  # disjoint views: fine
    """
    ranges = []
    seen: set[int] = set()
    for i, p in enumerate(params):
        if id(p) in seen:
            continue
        seen.add(id(p))
        found = _byte_range(p)
        if found is not None and (found[2] - found[1]) < p.numel() * p.element_size():
            raise ValueError(
                f"Expected parameters that do not share memory, got parameter {i} (shape "
                f"{tuple(p.shape)}, stride {p.stride()}) whose own elements overlap (an "
                "expanded tensor?); give it its own storage (e.g. .clone())")
        if found is not None:
            ranges.append((*found, i, p))
    ranges.sort(key=lambda r: (r[0], r[1]))
    widest = None  # the range reaching furthest so far, within the current storage
    for b in ranges:
        a, widest = widest, (b if widest is None or widest[0] != b[0] or b[2] > widest[2]
                             else widest)
        if a is not None and a[0] == b[0] and b[1] < a[2]:
            raise ValueError(
                f"Expected parameters that do not share memory, got parameters {a[3]} (shape "
                f"{tuple(a[4].shape)}) and {b[3]} (shape {tuple(b[4].shape)}) overlapping in one "
                "storage; give every parameter its own storage (e.g. .clone())")
