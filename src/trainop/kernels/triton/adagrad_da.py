"""AdagradDA on Triton (``csrc/rules.h``'s ``adagrad_da``)::

    ga += g; gga += g*g; denom = sqrt(gga) + l2*t*lr
    var = sign(ga) * max(|ga| - l1*t, 0) * (-lr) / denom   (l1 > 0)
    var = ga * lr * (-1) / denom                           (l1 = 0)

lr = 0: the accumulators advance, var keeps its value. hyper: lr, l1, l2, t (= global_step + 1
in float32, a device tensor: never read on the host).
"""

from __future__ import annotations

import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import hyper, prologue, put, sign, tensor
from trainop.kernels.triton.launch import launch

__all__ = ["RULES"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


@triton.jit
def _adagrad_da(var, grad, ga, gga, half, h, mult, inf, n, idx, width, HAS_MULT: tl.constexpr,
                HAS_INF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr,
                TABLE: tl.constexpr, ALIGNED: tl.constexpr):
    mask, at, g, t = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS,
                              TABLE, ALIGNED)
    var = tensor(var, 0, t, idx, n, TABLE, ALIGNED)
    ga = tensor(ga, 2, t, idx, n, TABLE, ALIGNED)
    gga = tensor(gga, 3, t, idx, n, TABLE, ALIGNED)
    half = tensor(half, 4, t, idx, n, TABLE, ALIGNED)
    lr, l1, l2, t = hyper(h, 0), hyper(h, 1), hyper(h, 2), hyper(h, 3)
    a = tl.load(ga + at, mask=mask) + g
    s = tl.load(gga + at, mask=mask) + g * g
    tl.store(ga + at, a, mask=mask)
    tl.store(gga + at, s, mask=mask)
    denom = tl.sqrt_rn(s) + l2 * t * lr
    excess = tl.abs(a) - l1 * t
    shrunk = tl.div_rn(sign(a) * tl.where(excess < 0.0, 0.0, excess) * -lr, denom)
    plain = tl.div_rn(a * lr * -1.0, denom)
    out = tl.where(l1 > 0.0, shrunk, plain)
    # var is read only at lr == 0 (it keeps its value): a load predicated off otherwise,
    # which moves no memory, so the pass streams the floor, g ga gga in and var ga gga out
    kept = tl.load(var + at, mask=tl.where(mask, lr, 1.0) == 0.0, other=0.0)
    put(var, half, at, tl.where(lr != 0.0, out, kept), mask, HALF)


def adagrad_da(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    launch(_adagrad_da, lists, layout, layout.scalars(values), multiplier,
           found_inf, rows=rows, half=half)


RULES = {"adagrad_da": adagrad_da}
