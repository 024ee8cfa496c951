"""Adagrad on Triton (``csrc/rules.h``'s ``adagrad``, no epsilon)::

    accum += g*g; var -= g*lr*(1/sqrt(accum))

hyper: lr.
"""

from __future__ import annotations

import triton
import triton.language as tl

from trainop.kernels.triton._common import gradient, hyper, live
from trainop.kernels.triton.launch import device_scalars, launch

__all__ = ["RULES"]


@triton.jit
def _adagrad(var, grad, accum, h, mult, inf, n, HAS_MULT: tl.constexpr, HAS_INF: tl.constexpr,
             BLOCK: tl.constexpr):
    offs, mask = live(n, inf, HAS_INF, BLOCK)
    g = gradient(grad, offs, mask, mult, HAS_MULT)
    a = tl.load(accum + offs, mask=mask) + g * g
    tl.store(accum + offs, a, mask=mask)
    x = tl.load(var + offs, mask=mask)
    tl.store(var + offs, x - g * hyper(h, 0) * tl.div_rn(1.0, tl.sqrt_rn(a)), mask=mask)


def adagrad(lists, values, multiplier, found_inf) -> None:
    launch(_adagrad, lists, device_scalars(values, lists[0][0].device), multiplier, found_inf)


RULES = {"adagrad": adagrad}
