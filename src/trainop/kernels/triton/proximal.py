"""Proximal gradient descent and proximal Adagrad on Triton (``csrc/rules.h``'s
``proximal_gd`` and ``proximal_adagrad``). The proximal step with step size s::

    prox = var - g*s; var = sign(prox)*max(|prox| - s*l1, 0)/(s*l2 + 1)  (l1 > 0)
                      var = prox/(s*l2 + 1)                              (l1 = 0)

GD: s = lr (s*l1 and s*l2 + 1 in double). Adagrad: accum += g*g; s = (1/sqrt(accum))*lr.
hyper: lr, l1, l2.
"""

from __future__ import annotations

import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import hyper, prologue, put, sign, tensor
from trainop.kernels.triton.launch import launch, product

__all__ = ["RULES"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


@triton.jit
def _proximal(v, g, s, s_l1, s_l2_plus_one, l1):
    prox = v - g * s
    shrunk = tl.div_rn(sign(prox) * tl.where(tl.abs(prox) - s_l1 < 0.0, 0.0,
                                             tl.abs(prox) - s_l1), s_l2_plus_one)
    return tl.where(l1 > 0.0, shrunk, tl.div_rn(prox, s_l2_plus_one))


@triton.jit
def _proximal_gd(var, grad, half, h, mult, inf, n, idx, width,
                 HAS_MULT: tl.constexpr, HAS_INF: tl.constexpr,
                 BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr,
                 TABLE: tl.constexpr, ALIGNED: tl.constexpr):
    mask, at, g, t = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS,
                              TABLE, ALIGNED)
    var = tensor(var, 0, t, idx, n, TABLE, ALIGNED)
    half = tensor(half, 2, t, idx, n, TABLE, ALIGNED)
    v = tl.load(var + at, mask=mask)
    out = _proximal(v, g, hyper(h, 0), hyper(h, 1), hyper(h, 2), hyper(h, 3))
    put(var, half, at, out, mask, HALF)


@triton.jit
def _proximal_adagrad(var, grad, accum, half, h, mult, inf, n, idx, width, HAS_MULT: tl.constexpr,
                      HAS_INF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr,
                      HALF: tl.constexpr,
                      TABLE: tl.constexpr, ALIGNED: tl.constexpr):
    mask, at, g, t = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS,
                              TABLE, ALIGNED)
    var = tensor(var, 0, t, idx, n, TABLE, ALIGNED)
    accum = tensor(accum, 2, t, idx, n, TABLE, ALIGNED)
    half = tensor(half, 3, t, idx, n, TABLE, ALIGNED)
    lr, l1, l2 = hyper(h, 0), hyper(h, 1), hyper(h, 2)
    a = tl.load(accum + at, mask=mask) + g * g
    tl.store(accum + at, a, mask=mask)
    s = tl.div_rn(1.0, tl.sqrt_rn(a)) * lr
    v = tl.load(var + at, mask=mask)
    put(var, half, at, _proximal(v, g, s, s * l1, s * l2 + 1.0, l1), mask, HALF)


def proximal_gd(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    lr, l1, l2 = values
    h = layout.scalars([lr, product(lr, l1), product(lr, l2) + 1.0, l1])
    launch(_proximal_gd, lists, layout, h, multiplier, found_inf, rows=rows, half=half)


def proximal_adagrad(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    launch(_proximal_adagrad, lists, layout, layout.scalars(values), multiplier,
           found_inf, rows=rows, half=half)


RULES = {"proximal_gd": proximal_gd, "proximal_adagrad": proximal_adagrad}
