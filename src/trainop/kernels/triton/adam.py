"""Adam, Nadam and AdamW on Triton (``csrc/rules.h``'s ``adam``), TF's step size computed on
the device from the float32 beta powers::

    alpha = lr*sqrt(1 - beta2_power)/(1 - beta1_power)       (float32, as TF)
    var -= var*wd (wd != 0); m += (g - m)*(1-beta1); v += (g*g - v)*(1-beta2)
    var -= num*alpha/(sqrt(v) + eps), num = m  |  g*(1-beta1) + m*beta1  (Nadam)

hyper: lr, beta1, beta2, epsilon, use_nesterov (0/1), wd, beta1_power, beta2_power (the
powers are the optimizer's 0-dim float32 tensors: never read on the host).
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
def _adam(var, grad, m, v, half, h, mult, inf, n, idx, width,
          HAS_MULT: tl.constexpr, HAS_INF: tl.constexpr,
          BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr):
    offs, mask = live(n, inf, HAS_INF, BLOCK)
    at = rows(offs, mask, idx, width, ROWS)
    g = gradient(grad, offs, mask, mult, HAS_MULT)
    lr, beta1, one_minus_beta1 = hyper(h, 0), hyper(h, 1), hyper(h, 2)
    one_minus_beta2, eps, nesterov = hyper(h, 3), hyper(h, 4), hyper(h, 5)
    wd, beta1_power, beta2_power = hyper(h, 6), hyper(h, 7), hyper(h, 8)
    alpha = tl.div_rn(lr * tl.sqrt_rn(1.0 - beta2_power), 1.0 - beta1_power)
    x = tl.load(var + at, mask=mask)
    x = tl.where(wd != 0.0, x - x * wd, x)
    m0 = tl.load(m + at, mask=mask)
    v0 = tl.load(v + at, mask=mask)
    mi = m0 + (g - m0) * one_minus_beta1
    vi = v0 + (g * g - v0) * one_minus_beta2
    tl.store(m + at, mi, mask=mask)
    tl.store(v + at, vi, mask=mask)
    num = tl.where(nesterov != 0.0, g * one_minus_beta1 + mi * beta1, mi)
    put(var, half, at, x - tl.div_rn(num * alpha, tl.sqrt_rn(vi) + eps), mask, HALF)


def adam(lists, values, multiplier, found_inf, rows=None, half=None) -> None:
    lr, beta1, beta2, eps, nesterov, wd, beta1_power, beta2_power = values
    h = device_scalars([lr, beta1, complement(beta1), complement(beta2), eps, nesterov, wd,
                        beta1_power, beta2_power], lists[0][0].device)
    launch(_adam, lists, h, multiplier, found_inf, rows=rows, half=half)


RULES = {"adam": adam}
