"""Gradient descent on Triton: ``var -= g * lr`` (``csrc/rules.h``'s ``gradient_descent``).

hyper: lr.
"""

from __future__ import annotations

import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import hyper, prologue, put, tensor
from trainop.kernels.triton.launch import launch

__all__ = ["RULES"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


@triton.jit
def _gradient_descent(var, grad, half, h, mult, inf, n, idx, width, HAS_MULT: tl.constexpr,
                      HAS_INF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr,
                      HALF: tl.constexpr,
                      TABLE: tl.constexpr, ALIGNED: tl.constexpr):
    mask, at, g, t = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS,
                              TABLE, ALIGNED)
    var = tensor(var, 0, t, idx, n, TABLE, ALIGNED)
    half = tensor(half, 2, t, idx, n, TABLE, ALIGNED)
    x = tl.load(var + at, mask=mask)
    put(var, half, at, x - g * hyper(h, 0), mask, HALF)


def gradient_descent(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    launch(_gradient_descent, lists, layout, layout.scalars(values), multiplier,
           found_inf, rows=rows, half=half)


RULES = {"gradient_descent": gradient_descent}
