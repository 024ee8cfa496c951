"""NovoGrad on Triton, both second-moment modes (``csrc/rules.h``'s ``novograd``): per tensor,
n2 = |float32(g)|^2 (the norm squared in float64, rounded once), then::

    persistent: ema = n2 if ema == 0 else ema*beta2 + n2*(1-beta2); denominator = sqrt(ema) + eps
    per step:   denominator = sqrt(n2 + eps)
    d = g/denominator (+ var*wd) (* (1-beta1)); m = m*beta1 + d; var -= m*lr

Three launches per tensor: the partial sums, the moment (one program), the update.
hyper: lr, beta1, beta2, epsilon, weight_decay, grad_averaging, persistent.

``squares`` (sharded tensors, e.g. FSDP2's local shards): per tensor the float64 sum of the
squares of the WHOLE tensor's ``float32(g * mult)`` (the ranks' partial sums added by one
``all_reduce``), read by the moment in place of the local gradient's partial sums.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import hyper, prologue, put, total
from trainop.kernels.triton.launch import BLOCK, OPTIONS, complement, device_scalars
from trainop.kernels.triton.norms import square_partials

__all__ = ["RULES"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


@triton.jit
def _moment(partials, count, ema, den, h, inf, HAS_INF: tl.constexpr, BLOCK: tl.constexpr):
    acc = tl.full((BLOCK,), 0.0, tl.float64)
    for start in range(0, count, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(partials + offs, mask=offs < count, other=0.0)
    norm = tl.sqrt(total(acc)).to(tl.float32)  # float64 sqrt: correctly rounded
    n2 = norm * norm
    beta2, one_minus_beta2, eps, persistent = hyper(h, 3), hyper(h, 4), hyper(h, 5), hyper(h, 8)
    old = tl.load(ema)
    v = tl.where(old == 0.0, n2, old * beta2 + n2 * one_minus_beta2)
    keep = tl.where(persistent != 0.0, 1.0, 0.0)
    if HAS_INF:
        keep = keep * tl.where(tl.load(inf).to(tl.float32) == 0.0, 1.0, 0.0)
    tl.store(ema, v, mask=keep != 0.0)
    tl.store(den, tl.where(persistent != 0.0, tl.sqrt_rn(v) + eps, tl.sqrt_rn(n2 + eps)))


@triton.jit
def _update(var, grad, mom, den, half, h, mult, inf, n, idx, width, HAS_MULT: tl.constexpr,
            HAS_INF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr):
    mask, at, g = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS)
    lr, beta1, one_minus_beta1 = hyper(h, 0), hyper(h, 1), hyper(h, 2)
    wd, averaging = hyper(h, 6), hyper(h, 7)
    x = tl.load(var + at, mask=mask)
    d = tl.div_rn(g, tl.load(den))
    d = tl.where(wd > 0.0, d + x * wd, d)
    d = tl.where(averaging != 0.0, d * one_minus_beta1, d)
    mi = tl.load(mom + at, mask=mask) * beta1 + d
    tl.store(mom + at, mi, mask=mask)
    put(var, half, at, x - mi * lr, mask, HALF)


def novograd(lists, values, multiplier, found_inf, half=None, squares=None) -> None:
    lr, beta1, beta2, eps, wd, averaging, persistent = values
    variables, grads, moms, emas = lists
    device = variables[0].device
    h = device_scalars([lr, beta1, complement(beta1), beta2, complement(beta2), eps, wd,
                        averaging, persistent], device)
    mult = h if multiplier is None else multiplier
    inf = h if found_inf is None else found_inf
    halves = variables if half is None else half
    for t, (var, grad, mom, ema, copy) in enumerate(zip(variables, grads, moms, emas, halves,
                                                        strict=True)):
        partials = (square_partials(grad, multiplier) if squares is None
                    else squares[t:t + 1])
        den = torch.empty(1, dtype=torch.float32, device=device)
        _moment[(1,)](partials, partials.numel(), ema, den, h, inf,
                      HAS_INF=found_inf is not None, BLOCK=BLOCK, **OPTIONS)
        n = var.numel()
        if n:
            _update[((n + BLOCK - 1) // BLOCK,)](
                var.reshape(-1), grad.reshape(-1), mom.reshape(-1), den, copy.reshape(-1), h,
                mult, inf, n, h, 1, HAS_MULT=multiplier is not None,
                HAS_INF=found_inf is not None, BLOCK=BLOCK, ROWS=False, HALF=half is not None,
                **OPTIONS)


RULES = {"novograd": novograd}
