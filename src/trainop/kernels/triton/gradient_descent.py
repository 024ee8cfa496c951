"""Gradient descent on Triton: ``var -= g * lr`` (``csrc/rules.h``'s ``gradient_descent``).

hyper: lr.
"""

from __future__ import annotations

import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import hyper, prologue, put
from trainop.kernels.triton.launch import device_scalars, launch

__all__ = ["RULES"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


@triton.jit
def _gradient_descent(var, grad, half, h, mult, inf, n, idx, width, HAS_MULT: tl.constexpr,
                      HAS_INF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr,
                      HALF: tl.constexpr):
    mask, at, g = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS)
    x = tl.load(var + at, mask=mask)
    put(var, half, at, x - g * hyper(h, 0), mask, HALF)


def gradient_descent(lists, values, multiplier, found_inf, rows=None, half=None) -> None:
    launch(_gradient_descent, lists, device_scalars(values, lists[0][0].device), multiplier,
           found_inf, rows=rows, half=half)


RULES = {"gradient_descent": gradient_descent}
