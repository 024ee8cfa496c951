"""Momentum on Triton (``csrc/rules.h``'s ``momentum``), with contrib's decoupled decay first
(MomentumW)::

    var -= var*wd (wd != 0); accum = accum*momentum + g
    var -= accum*lr  |  var -= g*lr + accum*momentum*lr  (Nesterov)

hyper: lr, momentum, use_nesterov (0/1), wd.
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
def _momentum(var, grad, accum, half, h, mult, inf, n, idx, width,
              HAS_MULT: tl.constexpr, HAS_INF: tl.constexpr,
              BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr,
              TABLE: tl.constexpr, ALIGNED: tl.constexpr):
    mask, at, g, t = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS,
                              TABLE, ALIGNED)
    var = tensor(var, 0, t, idx, n, TABLE, ALIGNED)
    accum = tensor(accum, 2, t, idx, n, TABLE, ALIGNED)
    half = tensor(half, 3, t, idx, n, TABLE, ALIGNED)
    lr, momentum = hyper(h, 0), hyper(h, 1)
    nesterov, wd = hyper(h, 2), hyper(h, 3)
    v = tl.load(var + at, mask=mask)
    v = tl.where(wd != 0.0, v - v * wd, v)
    a = tl.load(accum + at, mask=mask) * momentum + g
    tl.store(accum + at, a, mask=mask)
    out = tl.where(nesterov != 0.0, v - (g * lr + a * momentum * lr), v - a * lr)
    put(var, half, at, out, mask, HALF)


def momentum(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    launch(_momentum, lists, layout, layout.scalars(values), multiplier, found_inf,
           rows=rows, half=half)


RULES = {"momentum": momentum}
