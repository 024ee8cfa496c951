"""Sparse gradients: torch COO tensors in the role of ``tf.IndexedSlices``.

A gradient from ``nn.Embedding(sparse=True)`` (or a COO tensor built by hand, possibly with
duplicate row indices) is turned into :class:`RowSlices`: unique row indices and the summed
values of each row, exactly what TensorFlow's ``_apply_sparse_duplicate_indices`` hands to an
optimizer after ``unique`` + ``unsorted_segment_sum``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

__all__ = ["RowSlices", "coalesced_rows_distinct", "row_slices", "raw_row_slices",
           "update_rows"]


class RowSlices(NamedTuple):
    """Rows ``indices`` (1-D int64) of a gradient and their ``values`` (``[len(indices), ...]``)."""

    indices: torch.Tensor
    values: torch.Tensor


def coalesced_rows_distinct(indices: torch.Tensor) -> bool:
    """Whether the row indices of a gradient flagged coalesced are what the flag says: strictly
    increasing. ``torch.sparse_coo_tensor(..., is_coalesced=True)`` takes the caller's word and
    ``coalesce()`` then does nothing, so repeated rows would reach the update unsummed (one
    comparison pass; the flag is never trusted without it)."""
    return indices.numel() < 2 or bool((indices[1:] > indices[:-1]).all())


def _honest(grad: torch.Tensor) -> torch.Tensor:
    """``grad``, or a truly coalesced copy where its coalesced flag is wrong."""
    if grad.is_coalesced() and grad.sparse_dim() == 1 and \
            not coalesced_rows_distinct(grad._indices()[0]):
        return torch.sparse_coo_tensor(grad._indices(), grad._values(), grad.shape).coalesce()
    return grad


def row_slices(grad: torch.Tensor) -> RowSlices:
    """Deduplicate a sparse COO gradient into unique rows and their summed values (a gradient
    wrongly flagged coalesced is coalesced for real)."""
    coalesced = _honest(grad).coalesce()
    if coalesced.sparse_dim() == 1:
        return RowSlices(coalesced.indices()[0], coalesced.values())
    # More than one sparse dimension: gather the touched rows of the dense equivalent.
    rows = torch.unique(coalesced.indices()[0])
    return RowSlices(rows, coalesced.to_dense().index_select(0, rows))


def raw_row_slices(grad: torch.Tensor) -> RowSlices:
    """The rows of a sparse gradient as given, duplicates kept (for scatter-add style updates)."""
    if grad.is_coalesced() or grad.sparse_dim() != 1:
        return row_slices(grad)  # checks the flag
    return RowSlices(grad._indices()[0], grad._values())


def update_rows(
    update: Callable[[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]], None],
    var: torch.Tensor,
    rows: RowSlices,
    slots: dict[str, torch.Tensor],
) -> None:
    """Apply a dense in-place ``update(var, grad, slots)`` to the given rows only.

    The rows of ``var`` and of every slot are gathered, updated by the dense rule, and written
    back; all other rows (of the variable and of its slots) stay untouched, which is TF's sparse
    semantics for every optimizer except Adam and Nadam.
    """
    idx = rows.indices
    var_rows = var.index_select(0, idx)
    slot_rows = {name: slot.index_select(0, idx) for name, slot in slots.items()}
    update(var_rows, rows.values, slot_rows)
    var.index_copy_(0, idx, var_rows)
    for name, slot in slots.items():
        slot.index_copy_(0, idx, slot_rows[name])
