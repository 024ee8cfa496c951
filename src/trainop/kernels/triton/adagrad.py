"""Adagrad on Triton (``csrc/rules.h``'s ``adagrad``, no epsilon)::

    accum += g*g; var -= g*lr*(1/sqrt(accum))

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
def _adagrad(var, grad, accum, half, h, mult, inf, n, idx, width,
             HAS_MULT: tl.constexpr, HAS_INF: tl.constexpr,
             BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr,
             TABLE: tl.constexpr, ALIGNED: tl.constexpr):
    mask, at, g, t = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS,
                              TABLE, ALIGNED)
    var = tensor(var, 0, t, idx, n, TABLE, ALIGNED)
    accum = tensor(accum, 2, t, idx, n, TABLE, ALIGNED)
    half = tensor(half, 3, t, idx, n, TABLE, ALIGNED)
    a = tl.load(accum + at, mask=mask) + g * g
    tl.store(accum + at, a, mask=mask)
    x = tl.load(var + at, mask=mask)
    put(var, half, at, x - g * hyper(h, 0) * tl.div_rn(1.0, tl.sqrt_rn(a)), mask, HALF)


def adagrad(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    launch(_adagrad, lists, layout, layout.scalars(values), multiplier, found_inf,
           rows=rows, half=half)


RULES = {"adagrad": adagrad}
