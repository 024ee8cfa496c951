"""Sparse gradients on the native kernels: TF's deduplication of a gradient's rows, and the
update of only the touched rows by an optimizer's rule (deduplicating on the way).

A COO gradient from ``nn.Embedding(sparse=True)`` comes uncoalesced: its rows in lookup
order, repeated where a token repeats. TF hands every sparse update the distinct rows (in order
of first occurrence) and their summed values (``unique`` + ``unsorted_segment_sum``).
``torch.Tensor.coalesce`` gives the same rows sorted, but sorts and copies every value even
when no row repeats; ``unique_rows`` finds the distinct rows with a hash table over the indices
and returns the gradient's own values, uncopied, when none repeats.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence

import torch

from trainop.kernels.native import boundary, fork, metadata
from trainop.kernels.native._binding import SUFFIXES, doubles, function, supports
from trainop.kernels.row_slices import RowSlices, coalesced_rows_distinct

__all__ = ["first_outside", "sparse_rows", "unique_rows"]

_UNIQUE_ARGS = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                ctypes.c_void_p]
_SUM_ARGS = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 4
_ROWS_ARGS = [ctypes.c_int64] * 3 + [ctypes.c_void_p] * 4 + [ctypes.c_int]
_MISSING: set[str] = set()  # rules looked up without a sparse-row export


def first_outside(indices: torch.Tensor, limit: int) -> int | None:
    """The position of the first of the int64 row ``indices`` (1-D, or ``[1, n]``: a COO
    tensor's one sparse dimension) outside ``[0, limit)``, ``-1`` if all lie inside, or
    ``None`` where C cannot read them (not a plain contiguous CPU int64 tensor, or no
    metadata reader): then the caller scans them with torch. One pass in the metadata reader,
    which checks the tensor itself (no fake or subclass tensor is read, so no graph break is
    needed), without torch's operator dispatch: the range check of a sparse gradient's rows,
    made on every sparse step before anything moves."""
    reader = metadata.load()
    return None if reader is None else reader.first_outside(indices, limit, boundary.PLAIN_TYPES)


@torch._disable_dynamo  # never traced by torch.compile: real tensors only
def unique_rows(grad: torch.Tensor) -> RowSlices | None:
    """The distinct rows of a sparse COO gradient with one sparse dimension, in order of first
    occurrence, and each row's values summed in the order given (TF's order); ``None`` where
    the kernels cannot read it (not a CPU float32/float64 tensor with one sparse dimension) or
    an index is out of range (then ``trainop.kernels.row_slices.row_slices`` gives torch's error).

    Already coalesced, or with no repeated row: the gradient's own indices and values (no
    copy). Cost: one pass over the indices, plus one over the values where rows repeat.
    """
    if not grad.is_sparse or grad.sparse_dim() != 1 or not supports(grad.dtype, grad.device):
        return None
    indices, values = grad._indices()[0], grad._values()
    if grad.is_coalesced() and coalesced_rows_distinct(indices):  # else: the flag lies
        return RowSlices(indices, values)
    indices, values = indices.contiguous(), values.contiguous()
    if (not boundary.plain_dense([indices, values]) or indices.dtype != torch.int64
            or values.dtype != grad.dtype or values.dim() == 0
            or values.shape[0] != indices.numel()):
        return None
    n = indices.numel()
    slot_of = torch.empty(n, dtype=torch.int64)
    first_of = torch.empty(n, dtype=torch.int64)
    distinct = function("trainop_unique_rows", _UNIQUE_ARGS, ctypes.c_int64)(
        n, indices.data_ptr(), grad.shape[0], slot_of.data_ptr(), first_of.data_ptr())
    if distinct == -2:
        raise MemoryError("trainop's native unique_rows could not allocate its hash table")
    if distinct < 0:
        return None
    if distinct == n:
        return RowSlices(indices, values)
    first_of = first_of[:distinct]
    summed = values.new_empty((distinct, *values.shape[1:]))
    function(f"trainop_sum_rows_{SUFFIXES[values.dtype]}", _SUM_ARGS, None)(
        n, math.prod(values.shape[1:]), values.data_ptr(), slot_of.data_ptr(),
        first_of.data_ptr(), summed.data_ptr())
    return RowSlices(indices.index_select(0, first_of), summed)


@torch._disable_dynamo  # never traced by torch.compile: real tensors only
def sparse_rows(rule: str, var: torch.Tensor, slots: Sequence[torch.Tensor],
                indices: torch.Tensor, values: torch.Tensor, hyper: Sequence[float]) -> bool:
    """The native ``rule`` (``csrc/rules.h``, one with a sparse-row export) applied to the rows
    ``indices`` of ``var`` and its ``slots`` only, in one threaded call; returns False (nothing
    done) where the kernel cannot run these tensors or an index is out of range, so the caller
    runs the reference (which raises torch's error). ``hyper``: the rule's hyperparameters,
    as for its dense kernel.

    ``indices`` may repeat (a gradient's rows as given): the kernel sums each row's values in
    the order given, as ``unique_rows`` does, before its single update of that row, so a raw
    COO gradient needs no separate deduplication."""
    dtype = var.dtype
    if not supports(dtype, var.device):
        return False
    table_pointers = boundary.checked_rows([var, *slots], indices, values, rule=rule)
    if table_pointers is None:
        return False
    name = f"trainop_rows_{rule}_{SUFFIXES[dtype]}"
    if name in _MISSING:
        return False
    try:
        kernel = function(name, _ROWS_ARGS)
    except AttributeError:  # a rule without a sparse-row export
        _MISSING.add(name)
        return False
    status = kernel(indices.numel(), math.prod(var.shape[1:]), var.shape[0], indices.data_ptr(),
                    values.data_ptr(), table_pointers, doubles(hyper), fork.threads())
    if status == -2:
        raise MemoryError(f"trainop's native sparse {rule} kernel could not allocate its row "
                          "tables")
    return status == 0
