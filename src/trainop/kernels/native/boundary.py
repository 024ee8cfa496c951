"""The one checked C boundary: what must hold before any tensor's memory is handed to C.

The native kernels work on raw data pointers and element counts, so a wrong size is not an
exception but a crash or a silent overwrite. Every entry point of ``trainop.kernels.native``
that reaches C (the dense rules ``run``, the sparse rows ``sparse_rows``, ``unique_rows``,
``l2_norms``) calls ``checked`` first; nothing else in trainop calls the C functions.

``checked(lists, dtype=..., ...)`` verifies, for every tensor of every list:

- it is a plain dense tensor: exactly ``torch.Tensor`` or ``torch.nn.Parameter`` (not a
  subclass such as ``DTensor``, ``FakeTensor`` or ``FunctionalTensor``), strided, on the CPU
  (so not ``meta``);
- it has the expected dtype (the variables' dtype, or a list's own fixed dtype: NovoGrad's
  float32 second moments) and element count (tensor ``t`` of every list has the element count
  of variable ``t``; a list the rule reads as one element per tensor holds 0-dim tensors);
- it is contiguous;
- no tensor that is written (every list but the gradients) overlaps another tensor of the call
  (tensors that are only read may share memory).

The device-agnostic checks (exact type, dtype/device/size, overlap) are ``kernels.boundary``'s,
shared with the Triton kernels; this module adds the C metadata reader and the cache.

Outcomes: ``None`` (a subclass or a non-contiguous tensor: the caller takes its safe path,
``foreach`` or the reference, which handle such tensors), a ``ValueError`` naming the list, the
tensor and what is wrong (wrong dtype, element count, layout, device or written memory that
overlaps: no path could run it correctly), or the data pointers and element counts to call C
with.

Cost: every call makes one pass over the tensors (exact type, strided, CPU, dtype,
contiguous; data pointers and element counts), in C by the metadata reader where it is built
(a few nanoseconds per tensor). The full check (shapes, 0-dim lists, the sort of address
ranges) runs once: a caller that steps the same tensors again passes a ``cache`` object, and
the check is remembered under the variables' and slots' data pointers and every tensor's
element count, repeated only when one of them changed (a tensor replaced, ``resize_()``,
``set_()``, a new storage). A cached step passes ``read``: its own gradient pass already read
and checked the variables and gradients (``StepPlan.read_for``), so the pass here covers the
slot lists only, comparing them in C with the last full check (``plain(..., compare=True)``),
and that check's arrays are reused with this step's gradient pointers written in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from trainop.kernels.boundary import PLAIN, PLAIN_TYPES, check_overlap, full_check, is_plain
from trainop.kernels.native import metadata
from trainop.kernels.native._binding import pointers, sizes

__all__ = ["PLAIN", "PLAIN_TYPES", "checked", "checked_rows", "is_plain", "plain_dense"]

def plain_dense(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether every tensor is plain (``is_plain``), strided, on the CPU and contiguous: what
    C may read as one block of memory of ``numel`` elements (dtype and size are the caller's)."""
    return is_plain(tensors) and all(t.layout == torch.strided and t.device.type == "cpu"
                                     and t.is_contiguous() for t in tensors)


def checked(lists: Sequence[Sequence[torch.Tensor]], *, dtype: torch.dtype,
            list_dtypes: dict[int, torch.dtype] | None = None,
            scalar_lists: frozenset[int] = frozenset(), read_only: frozenset[int] = frozenset({1}),
            cache: Any = None, rule: str = "kernel",
            read: tuple[np.ndarray, np.ndarray] | None = None
            ) -> tuple[np.ndarray, np.ndarray] | None:
    """Check ``lists`` (list 0: the variables) for a native call (see the module doc).

    Args:
        lists: the tensor lists of the call, each as long as the variables' list.
        dtype: the dtype of every tensor unless ``list_dtypes`` says otherwise for its list.
        list_dtypes: list index -> fixed dtype (e.g. NovoGrad's float32 moments).
        scalar_lists: indices of the lists read as one element per tensor (0-dim tensors).
        read_only: indices of the lists C only reads (may alias each other).
        cache: an object with a ``native_checked`` attribute where the check is remembered
            (a step plan's bucket), or ``None``.
        rule: the kernel's name, for messages.
        read: where this step already read the variables (list 0) and gradients (list 1) in
            its own pass over them (the step plan's gradient pass, ``metadata.cpp``'s
            ``gradients``, which found every one exactly a ``torch.Tensor`` or
            ``nn.Parameter``, strided, on the CPU, contiguous, of the variables' dtype and each
            gradient of its variable's shape, with no code but trainop's run since): their
            data pointers (variables, then gradients) and the variables' element counts. The
            pass over the tensors then reads the slot lists only.

    Returns:
        ``(addresses, numel)``: the data pointers of every tensor, list after list, and the
        variables' element counts, or ``None`` where the caller must take its safe path.

    Raises:
        ValueError: a tensor of the wrong dtype, element count, layout or device, or written
            memory that overlaps another tensor of the call.

    Example:
        >>> import torch
        >>> from trainop.kernels.native import boundary
        >>> v, g = torch.zeros(3), torch.ones(3)
        >>> boundary.checked([[v], [g]], dtype=torch.float32) is not None
        True
    """
    if not lists or not lists[0]:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    list_dtypes = list_dtypes or {}
    dtypes = tuple(list_dtypes.get(k, dtype) for k in range(len(lists)))
    if read is not None and len(lists) >= 2 and not list_dtypes.keys() & {0, 1}:
        found = None if cache is None else _as_last_checked(lists, dtypes, cache, read)
        if found is not None:
            return found
        status, addresses, counts = _read_slots(lists, dtypes, read)
    else:
        status, addresses, counts = _read(lists, dtypes)
    if status == _SUBCLASS:
        return None  # a tensor subclass: its own semantics, on the safe path
    if status != _OK:
        if status != _NOT_CONTIGUOUS:
            full_check(lists, dtype, list_dtypes, scalar_lists, rule)
        return None  # not contiguous: the list path
    n = len(lists[0])
    if len(lists) == 1 and not scalar_lists and 0 in read_only and metadata.load() is not None:
        return addresses, counts  # one list C only reads: the reader's pass checked it all
    if cache is not None:
        # The variables' and slots' memory and every tensor's size (the gradients, new every
        # step, by size only): while these are as last checked, so is everything checked.
        key = counts.tobytes() + addresses[:n].tobytes() + addresses[2 * n:].tobytes()
        if cache.native_checked == key:
            return addresses, counts[:n]
    full_check(lists, dtype, list_dtypes, scalar_lists, rule)
    if not check_overlap(lists, addresses, counts, read_only, rule):
        return None
    if cache is not None:
        cache.native_checked = key
        cache.native_arrays = (addresses, counts, addresses.ctypes.data, counts.ctypes.data)
    return addresses, counts[:n]


def _as_last_checked(lists, dtypes, cache, read) -> tuple[np.ndarray, np.ndarray] | None:
    """The cached step's fast path (``checked`` with ``read`` and ``cache``): the arrays of
    the last full check, when this step's variables (as the gradient pass read them) and
    slots (one pass in C, comparing) have the same data pointers and element counts, with
    this step's gradient pointers written in; ``None``: the general path."""
    arrays = getattr(cache, "native_arrays", None)
    reader = metadata.load()
    if arrays is None or reader is None:
        return None
    addresses, counts, addresses_at, counts_at = arrays
    n = len(lists[0])
    pointers_read, numel = read
    if (len(addresses) != n * len(lists) or numel.tobytes() != counts[:n].tobytes()
            or pointers_read[:n].tobytes() != addresses[:n].tobytes()):
        return None
    if len(lists) > 2:
        slots = [t if type(t) is list else list(t) for t in lists[2:]]
        if reader.plain(slots, PLAIN_TYPES, dtypes[2:], addresses_at + 16 * n,
                        counts_at + 16 * n, True) != _OK:
            return None
    addresses[n:2 * n] = pointers_read[n:]
    return addresses, counts[:n]


# The status codes of the reader's ``plain`` (metadata.cpp), also given by the Python fallback.
_OK, _SUBCLASS, _NOT_CONTIGUOUS, _BAD_LAYOUT, _BAD_DTYPE = 0, 1, 2, 3, 4


def _read(lists, dtypes) -> tuple[int, np.ndarray, np.ndarray]:
    """One pass over every tensor: a status code (see ``metadata.cpp``'s ``plain``), the data
    pointers and the element counts, list after list. By the metadata reader in one call
    where it is built, else attribute by attribute (the same checks, in Python)."""
    total = sum(map(len, lists))
    reader = metadata.load()
    if reader is not None:
        lists = [t if type(t) is list else list(t) for t in lists]
        both = np.empty(2 * total, dtype=np.int64)  # one allocation: pointers, then counts
        address = both.ctypes.data
        status = reader.plain(lists, PLAIN_TYPES, dtypes, address, address + 8 * total)
        return status, both[:total].view(np.uint64), both[total:]
    if not all(map(is_plain, lists)):
        return _SUBCLASS, None, None
    if any(t.layout != torch.strided or t.device.type != "cpu"
           for tensors in lists for t in tensors):
        return _BAD_LAYOUT, None, None
    if any(t.dtype != d for tensors, d in zip(lists, dtypes, strict=True) for t in tensors):
        return _BAD_DTYPE, None, None
    addresses = pointers(lists)
    if addresses is None:
        return _NOT_CONTIGUOUS, None, None
    return _OK, addresses, np.concatenate([sizes(tensors) for tensors in lists])


def _read_slots(lists, dtypes, read) -> tuple[int, np.ndarray, np.ndarray]:
    """``_read`` where the variables and gradients were read already (``checked``'s
    ``read``): the slot lists are read, and the three put together."""
    pointers_read, numel = read
    if len(lists) == 2:
        return _OK, pointers_read, np.concatenate((numel, numel))
    status, addresses, counts = _read(lists[2:], dtypes[2:])
    if status != _OK:
        return status, None, None
    return (_OK, np.concatenate((pointers_read, addresses)),
            np.concatenate((numel, numel, counts)))


def checked_rows(tables: Sequence[torch.Tensor], indices: torch.Tensor,
                 values: torch.Tensor | None, *, rule: str = "rows") -> bytes | None:
    """``checked`` for a call over rows: ``tables`` (a variable and its slots, all written, of
    the variable's shape and dtype), 1-D int64 ``indices`` into their first dimension and
    ``values`` (``[len(indices), *rows]``, the variable's dtype; ``None`` where the call reads
    indices only). The tables' data pointers (uint64 each, as the row kernels take them):
    C may run them; ``None``: the caller takes its safe path (a subclass, a non-contiguous
    tensor, a 0-dim table, tables, indices or values of another dtype or shape, shared
    written memory). Indices are range-checked by the kernels themselves (they return before
    writing). One call of the metadata reader where it is built (``rows``).
    """
    reader = metadata.load()
    if reader is not None:  # the same checks in one call
        return reader.rows(tables if type(tables) is list else list(tables), indices, values,
                           PLAIN_TYPES)
    var = tables[0]
    extra = [indices] if values is None else [indices, values]
    if not (plain_dense(extra) and plain_dense(tables)):
        return None
    if indices.dtype != torch.int64 or indices.dim() != 1 or var.dim() == 0:
        return None
    if values is not None and (values.dtype != var.dtype
                               or values.shape != (indices.numel(), *var.shape[1:])):
        return None
    if any(t.dtype != var.dtype or t.shape != var.shape for t in tables):
        return None  # the reference raises torch's error (the step validates shapes first)
    # A few tensors: pairwise, no sort. Written tables may not overlap each other, and the
    # read indices and values may not overlap a table.
    ranges = [_span(t) for t in tables]
    for i, (lo, hi) in enumerate(ranges):
        if any(b > lo and a < hi for a, b in ranges[i + 1:]):
            return None
    if any(b > lo and a < hi for lo, hi in map(_span, extra) for a, b in ranges):
        return None  # a gradient sharing a table's memory: the reference handles it
    return np.array([lo for lo, _ in ranges], dtype=np.uint64).tobytes()


def _span(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()  # (an empty tensor: start == end)
