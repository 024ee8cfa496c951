"""Triton's interpreter, sped up for trainop's block sums, with the same bits.

Under ``TRITON_INTERPRET=1`` a ``tl.reduce`` whose combine function is not one of Triton's own
runs ``ReduceOps.generic_reduce``: a left fold ``acc = combine(acc, x[i])`` along the axis, one
interpreted call per element (about 5 ms each: a 1024-element block takes seconds, and the
norm pass of every Triton test (NovoGrad, clipping, the gate) sums many such blocks).
``trainop.kernels.triton._common.total`` reduces with ``_add`` (``a + b``); for it the fold is
``np.add.accumulate`` along the axis in the input's dtype: the same additions in the same order,
each rounded to that dtype as the interpreter rounds them, so every bit is the same (checked
against the interpreter's own fold in ``test_triton_fast_reduce.py``). Every other reduction
runs the interpreter's code unchanged.
"""

from __future__ import annotations

import numpy as np

__all__ = ["is_trainop_add", "patch_block_sums"]

_PATCHED = "_trainop_fast_block_sums"
_ADD = ("trainop.kernels.triton._common", "_add")


def is_trainop_add(combine_fn) -> bool:
    """Whether ``combine_fn`` (a jitted function) is ``_common._add``."""
    fn = getattr(combine_fn, "fn", combine_fn)
    return (getattr(fn, "__module__", None), getattr(fn, "__name__", None)) == _ADD


def _folded(data: np.ndarray, axis: int) -> np.ndarray:
    """The left fold of ``+`` along ``axis`` (``np.add.accumulate``: strictly sequential)."""
    return np.take(np.add.accumulate(data, axis=axis, dtype=data.dtype), -1, axis=axis)


def patch_block_sums() -> bool:
    """Route the interpreter's reductions by ``_common._add`` over one floating-point input of
    at least one element along the axis to ``np.add.accumulate``; True if in place."""
    try:
        from triton.runtime import interpreter
    except Exception:  # no usable Triton: its tests skip on their own
        return False
    ops = getattr(interpreter, "ReduceOps", None)
    original = getattr(ops, "generic_reduce", None)
    if original is None or not hasattr(ops, "unravel") or not hasattr(ops, "to_tensor"):
        return False
    if getattr(original, _PATCHED, False):
        return True

    def generic_reduce(self, input):
        if len(input) != 1 or not is_trainop_add(self.combine_fn):
            return original(self, input)
        original_axis = self.axis
        (arg,), axis = self.unravel(input, self.axis)
        data = arg.handle.data
        if not np.issubdtype(data.dtype, np.floating) or data.shape[axis] == 0:
            return original(self, input)
        out = _folded(data, axis)
        if self.keep_dims:
            out = (np.expand_dims(out, axis) if original_axis is not None
                   else out.reshape((1,) * data.ndim))
        elif original_axis is None:
            out = out.item()
        return [self.to_tensor(out, input[0].dtype)]

    setattr(generic_reduce, _PATCHED, True)
    generic_reduce.original = original
    ops.generic_reduce = generic_reduce
    return True
