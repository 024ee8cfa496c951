"""RMSProp on Triton, TF's dense kernel form (``csrc/rules.h``'s ``rmsprop`` and
``rmsprop_centered``)::

    ms += (g*g - ms)*(1-decay); mg += (g - mg)*(1-decay) (centered)
    mom = mom*momentum + g*lr/sqrt(ms + eps)  |  .../sqrt(ms - mg*mg + eps) (centered)
    var -= mom

hyper: lr, decay, momentum, epsilon (the kernel reads lr, momentum, epsilon, 1-decay).
"""

from __future__ import annotations

import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import gradient, hyper, live, put, rows
from trainop.kernels.triton.launch import complement, device_scalars, launch

__all__ = ["RULES"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


@triton.jit
def _rmsprop(var, grad, ms, mg, mom, half, h, mult, inf, n, idx, width, HAS_MULT: tl.constexpr,
             HAS_INF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr,
             CENTERED: tl.constexpr):
    offs, mask = live(n, inf, HAS_INF, BLOCK)
    at = rows(offs, mask, idx, width, ROWS)
    g = gradient(grad, offs, mask, mult, HAS_MULT)
    lr, momentum, eps, one_minus_decay = hyper(h, 0), hyper(h, 1), hyper(h, 2), hyper(h, 3)
    s0 = tl.load(ms + at, mask=mask)
    s = s0 + (g * g - s0) * one_minus_decay
    tl.store(ms + at, s, mask=mask)
    if CENTERED:
        c0 = tl.load(mg + at, mask=mask)
        c = c0 + (g - c0) * one_minus_decay
        tl.store(mg + at, c, mask=mask)
        denom = tl.sqrt_rn(s - c * c + eps)
    else:
        denom = tl.sqrt_rn(s + eps)
    m = tl.load(mom + at, mask=mask) * momentum + tl.div_rn(g * lr, denom)
    tl.store(mom + at, m, mask=mask)
    x = tl.load(var + at, mask=mask)
    put(var, half, at, x - m, mask, HALF)


def _run(lists, values, multiplier, found_inf, centered: bool, rows=None,
         half=None) -> None:
    lr, decay, momentum, eps = values
    h = device_scalars([lr, momentum, eps, complement(decay)], lists[0][0].device)
    if centered:
        var, grad, ms, mg, mom = lists
    else:
        (var, grad, ms, mom), mg = lists, lists[2]  # mg unused: any tensor of the unit's size
    launch(_rmsprop, [var, grad, ms, mg, mom], h, multiplier, found_inf, CENTERED=centered,
           rows=rows, half=half)


def rmsprop(lists, values, multiplier, found_inf, rows=None, half=None) -> None:
    _run(lists, values, multiplier, found_inf, False, rows, half)


def rmsprop_centered(lists, values, multiplier, found_inf, rows=None, half=None) -> None:
    _run(lists, values, multiplier, found_inf, True, rows, half)


RULES = {"rmsprop": rmsprop, "rmsprop_centered": rmsprop_centered}
