"""Every gradient is read before any variable is written: TensorFlow's order, kept where a
gradient shares memory with a tensor the step writes.

TF computes every gradient before any apply op writes a variable, so each update sees the
gradients' values from before the step (contrib's decoupled decay decays the variable, then
applies the base update with that value). trainop's paths write bucket after bucket, tensor
after tensor or list after list (the decoupled decay first): a gradient that is memory of a
variable or slot of the same step (``p0.grad = p1.detach()``, a view into another parameter,
the parameter's own storage, TF-style ``apply_gradients([(v1, v0), ...])``) would be read
after that memory moved, differently on each path. Such a gradient is copied before the first
write, and only it; the gradient the caller gave (``p.grad``) is not changed.

Cost: where the metadata reader is built, its pass over the gradients finds the common case,
every gradient in a storage of its own that does not require grad (what autograd makes): the
step plan's gradient pass reads it with the rest (``gradients``' third value), the general path
in one more C pass (``shared``). Only otherwise are the gradients' byte ranges compared with
those of every variable and slot of the step (``byte_extents``: one C pass, one sort). Without
the reader the comparison runs every step. A gradient that is the very tensor object of a slot
(another parameter's or its own) is found the same way and read first on every implementation
(``tests/test_gradient_own_slot.py``, ``tests/test_differential.py``). Dense gradients only: a
sparse gradient's values are not compared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from trainop.contract.overlap import byte_extents
from trainop.kernels.boundary import PLAIN_TYPES, overlapping, sorted_ranges
from trainop.kernels.native import metadata

__all__ = ["read_first"]


def read_first(grads: list[torch.Tensor], written: Callable[[], Sequence[torch.Tensor]],
               start: int = 0, *, shared: bool | None = None) -> list[torch.Tensor] | None:
    """``grads`` with every dense gradient from position ``start`` on that shares memory with
    a tensor of ``written()`` (the variables and slots the step writes) replaced by a
    contiguous copy made now, before anything is written; ``None`` where none does (the
    common case: nothing to copy, nothing made). ``shared``: the filter's answer for those
    gradients where the caller's own pass read it (the step plan's ``gradients``), else
    ``None`` (read here)."""
    own = grads[start:] if start else grads
    if shared is None:
        reader = metadata.load()
        shared = reader is None or (bool(own) and reader.shared(own, PLAIN_TYPES))
    if not (shared and own):
        return None
    targets = written()
    hit = overlapping(*byte_extents(own), sorted_ranges(*byte_extents(targets)))
    if not hit.any():
        return None
    out = list(grads)
    for i in np.flatnonzero(hit).tolist():
        out[start + i] = own[i].clone(memory_format=torch.contiguous_format)
    return out
