"""Adadelta on Triton (``csrc/rules.h``'s ``adadelta``)::

    accum = accum*rho + g*g*(1-rho)
    update = sqrt(accum_update + eps) * (1/sqrt(accum + eps)) * g
    var -= update*lr; accum_update = accum_update*rho + update*update*(1-rho)

hyper: lr, rho, epsilon (the kernel reads lr, rho, epsilon, 1-rho).
"""

from __future__ import annotations

import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import hyper, prologue, put, tensor
from trainop.kernels.triton.launch import complement, launch

__all__ = ["RULES"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


@triton.jit
def _adadelta(var, grad, accum, accum_update, half, h, mult, inf, n, idx, width,
              HAS_MULT: tl.constexpr,
              HAS_INF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr,
              TABLE: tl.constexpr, ALIGNED: tl.constexpr):
    mask, at, g, t = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS,
                              TABLE, ALIGNED)
    var = tensor(var, 0, t, idx, n, TABLE, ALIGNED)
    accum = tensor(accum, 2, t, idx, n, TABLE, ALIGNED)
    accum_update = tensor(accum_update, 3, t, idx, n, TABLE, ALIGNED)
    half = tensor(half, 4, t, idx, n, TABLE, ALIGNED)
    lr, rho, eps, one_minus_rho = hyper(h, 0), hyper(h, 1), hyper(h, 2), hyper(h, 3)
    a = tl.load(accum + at, mask=mask) * rho + g * g * one_minus_rho
    tl.store(accum + at, a, mask=mask)
    u = tl.load(accum_update + at, mask=mask)
    update = tl.sqrt_rn(u + eps) * tl.div_rn(1.0, tl.sqrt_rn(a + eps)) * g
    x = tl.load(var + at, mask=mask)
    put(var, half, at, x - update * lr, mask, HALF)
    tl.store(accum_update + at, u * rho + update * update * one_minus_rho, mask=mask)


def adadelta(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    lr, rho, eps = values
    launch(_adadelta, lists, layout, layout.scalars([lr, rho, eps, complement(rho)]),
           multiplier, found_inf, rows=rows, half=half)


RULES = {"adadelta": adadelta}
