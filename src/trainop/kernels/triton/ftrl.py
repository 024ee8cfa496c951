"""FTRL-Proximal on Triton (``csrc/rules.h``'s ``ftrl``); P(x) = x^(-lr_power), sqrt for
lr_power = -0.5::

    gs = g + var*(2*shrinkage) (shrinkage > 0); new = accum + g*g
    linear += gs - (P(new) - P(accum))/lr * var; quad = P(new)/lr + 2*l2
    var = |linear| > l1 ? (sign(linear)*l1 - linear)/quad : 0; accum = new

lr = 0 changes nothing. P for another power is evaluated in float64 and rounded to float32
(libdevice's ``pow`` on a GPU, ``exp2(log2(x) * p)`` under the interpreter): two float64
``pow`` per element, about 185 float64 instructions, which bounds the kernel at about half the
copy bandwidth on an H100. The powers whose float32 result is one correctly rounded operation
(lr_power 0: 1; -0.5: sqrt; -1: x; -2: x*x, as torch's ``pow`` special-cases them) are
compile-time cases (``POWER``), with no float64 work.
hyper: lr, lr_power, l1, l2, l2_shrinkage.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import gradient, hyper, place, put, rows, sign, tensor
from trainop.kernels.triton.launch import launch, product

__all__ = ["RULES"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


#: The interpreter has no libdevice: there x^p is exp2(log2(x)*p) in float64.
_NUMPY: tl.constexpr = tl.constexpr(INTERPRETED)


@triton.jit
def _power64(x64, p64):
    if _NUMPY:
        return tl.exp2(tl.log2(x64) * p64)
    else:
        return libdevice.pow(x64, p64)


#: ``POWER``: the host saw lr_power = -0.5 (sqrt), 0 (one), -1 (x itself), -2 (x*x), or
#: another power or a tensor (``GENERAL``: decided per element on the device).
SQRT, ONE, SAME, SQUARE, GENERAL = 0, 1, 2, 3, 4
_POWERS = {-0.5: SQRT, 0.0: ONE, -1.0: SAME, -2.0: SQUARE}


@triton.jit
def _power(x, neg_power, POWER: tl.constexpr):
    """x^(neg_power), by the host's case ``POWER`` (each exact: one rounding); ``GENERAL``:
    sqrt for 0.5, float64 ``pow`` rounded to float32 otherwise (x^0 = 1)."""
    if POWER == 0:
        return tl.sqrt_rn(x)
    elif POWER == 1:
        return tl.full(x.shape, 1.0, tl.float32)  # (1 for NaN too, as torch's pow(x, 0))
    elif POWER == 2:
        return x
    elif POWER == 3:
        return x * x
    else:
        general = _power64(x.to(tl.float64), neg_power.to(tl.float64)).to(tl.float32)
        general = tl.where(neg_power == 0.0, 1.0, general)
        return tl.where(neg_power == 0.5, tl.sqrt_rn(x), general)


@triton.jit
def _ftrl(var, grad, accum, linear, half, h, mult, inf, n, idx, width, HAS_MULT: tl.constexpr,
          HAS_INF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr,
          TABLE: tl.constexpr, ALIGNED: tl.constexpr, POWER: tl.constexpr):
    offs, mask, t = place(n, inf, width, HAS_INF, BLOCK, TABLE, ALIGNED)
    at = rows(offs, mask, idx, width, ROWS)
    var = tensor(var, 0, t, idx, n, TABLE, ALIGNED)
    grad = tensor(grad, 1, t, idx, n, TABLE, ALIGNED)
    accum = tensor(accum, 2, t, idx, n, TABLE, ALIGNED)
    linear = tensor(linear, 3, t, idx, n, TABLE, ALIGNED)
    half = tensor(half, 4, t, idx, n, TABLE, ALIGNED)
    lr, neg_power, l1 = hyper(h, 0), hyper(h, 1), hyper(h, 2)
    two_l2, shrink, two_shrink = hyper(h, 3), hyper(h, 4), hyper(h, 5)
    mask = mask & (tl.full((BLOCK,), 0.0, tl.float32) + lr != 0.0)  # lr = 0: nothing changes
    g = gradient(grad, offs, mask, mult, HAS_MULT)
    v = tl.load(var + at, mask=mask)
    a = tl.load(accum + at, mask=mask)
    gs = tl.where(shrink > 0.0, g + v * two_shrink, g)
    na = a + g * g
    p_new = _power(na, neg_power, POWER)
    p_old = _power(a, neg_power, POWER)
    lin = tl.load(linear + at, mask=mask) + (gs - tl.div_rn(p_new - p_old, lr) * v)
    tl.store(linear + at, lin, mask=mask)
    quad = tl.div_rn(p_new, lr) + two_l2
    moved = tl.div_rn(sign(lin) * l1 - lin, quad)
    put(var, half, at, tl.where(tl.abs(lin) > l1, moved, 0.0), mask, HALF)
    tl.store(accum + at, na, mask=mask)


def ftrl(lists, values, multiplier, found_inf, layout, rows=None, half=None) -> None:
    lr, lr_power, l1, l2, shrink = values
    h = layout.scalars([lr, product(-1.0, lr_power), l1, product(2.0, l2), shrink,
                        product(2.0, shrink)])
    # the power a compile-time case where one operation gives it (TF's default -0.5: sqrt)
    power = GENERAL if isinstance(lr_power, torch.Tensor) else _POWERS.get(float(lr_power),
                                                                           GENERAL)
    launch(_ftrl, lists, layout, h, multiplier, found_inf, rows=rows, half=half, POWER=power)


RULES = {"ftrl": ftrl}
