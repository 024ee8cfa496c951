"""NovoGrad on Triton, both second-moment modes (``csrc/rules.h``'s ``novograd``): per tensor,
n2 = |float32(g)|^2 (the norm squared in float64, rounded once), then::

    persistent: ema = n2 if ema == 0 else ema*beta2 + n2*(1-beta2); denominator = sqrt(ema) + eps
    per step:   denominator = sqrt(n2 + eps)
    d = g/denominator (+ var*wd) (* (1-beta1)); m = m*beta1 + d; var -= m*lr

Over a whole bucket: the partial sums of squares (one launch over every block of every
gradient, ``norms.run_sums``, and one over the runs of partial sums: the parallel second level),
the moment (one program per tensor adding its runs' sums in one vector load), the
update (one launch over every block, ``launch``).
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
from trainop.kernels.triton._common import hyper, prologue, put, tensor
from trainop.kernels.triton.launch import OPTIONS, complement, launch
from trainop.kernels.triton.norms import run_sums, runs_total, runs_width

__all__ = ["RULES"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


@triton.jit
def _moment(sums, first, emas, idx, count, den, h, inf, HAS_INF: tl.constexpr,
            TABLE: tl.constexpr, RUNS: tl.constexpr):
    """Tensor ``t``: its norm from its runs' float64 sums of squares (``runs_total``), its
    second moment (``emas``, list 3) and the denominator of its update (``den[t]``)."""
    t = tl.program_id(0)
    lo = tl.load(first + t)
    hi = tl.load(first + t + 1)
    acc = runs_total(sums, lo, hi, RUNS)
    norm = tl.sqrt(acc).to(tl.float32)  # float64 sqrt: correctly rounded
    n2 = norm * norm
    ema = tensor(emas, 3, t, idx, count, TABLE, False)
    beta2, one_minus_beta2, eps, persistent = hyper(h, 3), hyper(h, 4), hyper(h, 5), hyper(h, 8)
    old = tl.load(ema)
    v = tl.where(old == 0.0, n2, old * beta2 + n2 * one_minus_beta2)
    keep = tl.where(persistent != 0.0, 1.0, 0.0)
    if HAS_INF:
        keep = keep * tl.where(tl.load(inf).to(tl.float32) == 0.0, 1.0, 0.0)
    tl.store(ema, v, mask=keep != 0.0)
    tl.store(den + t, tl.where(persistent != 0.0, tl.sqrt_rn(v) + eps, tl.sqrt_rn(n2 + eps)))


@triton.jit
def _update(var, grad, mom, den, half, h, mult, inf, n, idx, width, HAS_MULT: tl.constexpr,
            HAS_INF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, HALF: tl.constexpr,
            TABLE: tl.constexpr, ALIGNED: tl.constexpr):
    """The update; ``den``: every tensor's denominator (``_moment``), read at the tensor's
    index (in place of the second moments' list)."""
    mask, at, g, t = prologue(grad, mult, n, inf, idx, width, HAS_MULT, HAS_INF, BLOCK, ROWS,
                              TABLE, ALIGNED)
    var = tensor(var, 0, t, idx, n, TABLE, ALIGNED)
    mom = tensor(mom, 2, t, idx, n, TABLE, ALIGNED)
    half = tensor(half, 4, t, idx, n, TABLE, ALIGNED)
    lr, beta1, one_minus_beta1 = hyper(h, 0), hyper(h, 1), hyper(h, 2)
    wd, averaging = hyper(h, 6), hyper(h, 7)
    x = tl.load(var + at, mask=mask)
    d = tl.div_rn(g, tl.load(den + t))
    d = tl.where(wd > 0.0, d + x * wd, d)
    d = tl.where(averaging != 0.0, d * one_minus_beta1, d)
    mi = tl.load(mom + at, mask=mask) * beta1 + d
    tl.store(mom + at, mi, mask=mask)
    put(var, half, at, x - mi * lr, mask, HALF)


def novograd(lists, values, multiplier, found_inf, layout, half=None, squares=None) -> None:
    lr, beta1, beta2, eps, wd, averaging, persistent = values
    variables, grads, moms, emas = lists
    count = len(variables)
    h = layout.scalars([lr, beta1, complement(beta1), beta2, complement(beta2), eps, wd,
                        averaging, persistent])
    layout.build()
    den = torch.empty(count, dtype=torch.float32, device=variables[0].device)
    if squares is None:
        sums, first = run_sums(layout, grads[0], 1, multiplier), layout.run_first
        most = layout.most_runs
    else:
        sums, first, most = squares, layout.identity(), 1
    _moment[(count,)](sums, first, emas[0], layout.table, count, den, h,
                      h if found_inf is None else found_inf, HAS_INF=found_inf is not None,
                      TABLE=count > 1, RUNS=runs_width(most), **OPTIONS)
    # den stands in the second moments' place (read per tensor, not streamed)
    launch(_update, [variables, grads, moms, [den] * count], layout, h, multiplier, found_inf,
           half=half)


RULES = {"novograd": novograd}
