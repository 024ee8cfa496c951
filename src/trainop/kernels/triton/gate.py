"""The gradient pipeline's per-step scalar arithmetic in one Triton program: from the read
pass's per-tensor norms to the gate the update kernel reads (multiplier, skip flag), the loss
scaler's update and the step's statistics, instead of some forty small torch operations.

With ``n`` the raw norms, ``S`` the loss scale, ``c`` the clip norm (all float32), in the
order of ``processing`` (``Gradients.fold_loss_scale``, ``ClipByGlobalNorm``,
``LossScale.check``, ``BackoffLossScaler._update``, ``GradientPipeline._result``)::

    m = 1/S                          (1 without a loss scale)
    N = sqrt(sum((n * |m|)^2))       (the squares in float32, summed in float64, rounded)
    coef = c * min(1/N, 1/c) + (N - N);  M = m * coef;  clipped = N * coef   (with a clip)
    overflow = some n * |M| not finite                                      (BACKOFF)
    grow = !overflow and (i - last) mod window == 0
    S' = clamp(overflow ? S / f : grow ? S * f : S, lo, hi);  last' = overflow ? i : last
    i' = i + 1;  found_inf = overflow;  reason = overflow ? SKIP : 0
    skipped' = skipped + (found_inf != 0);  consecutive' = found_inf != 0 ? consecutive + 1 : 0

Outputs, fresh each step (a ``StepResult`` keeps them): ``out_f`` float32 ``[S, M, found_inf,
N, clipped, S']``, ``out_i`` int64 ``[reason, skipped', consecutive', 0]``, ``out_b`` the
applied flag. The scaler's state (``S``, ``i``, ``last``) is written in place; the pipeline's
counters are not (the pipeline commits ``skipped'`` and ``consecutive'`` after the update,
which may add a reason to skip). ``h``: ``[f, lo, hi, c, 1]`` (float32, ``tables.Scalars``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import total
from trainop.kernels.triton.launch import OPTIONS

__all__ = ["RULES", "decide"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()
_BLOCK = 256


@triton.jit
def _isfinite(x):
    return (x - x) == 0.0  # inf - inf and NaN - NaN are NaN


@triton.jit
def _decide(norms, count, h, scale, iteration, last, skipped, consecutive, out_f, out_i,
            out_b, window, skip_bit, HAS_SCALE: tl.constexpr, BACKOFF: tl.constexpr,
            HAS_CLIP: tl.constexpr, BLOCK: tl.constexpr):
    if HAS_SCALE:
        s = tl.load(scale)
        tl.store(out_f, s)
    else:
        s = tl.load(h + 4)  # 1.0
    m = tl.div_rn(1.0, s)
    am = tl.abs(m)
    acc = tl.full((BLOCK,), 0.0, tl.float64)
    for start in range(0, count, BLOCK):
        k = start + tl.arange(0, BLOCK)
        e = tl.load(norms + k, mask=k < count, other=0.0) * am
        sq = e * e
        acc += sq.to(tl.float64)
    norm = tl.sqrt_rn(total(acc).to(tl.float32))
    tl.store(out_f + 3, norm)
    big_m = m
    if HAS_CLIP:
        c = tl.load(h + 3)
        r = tl.div_rn(1.0, norm)
        q = tl.div_rn(1.0, c)
        coef = c * tl.where(r < q, r, q) + (norm - norm)
        big_m = m * coef
        tl.store(out_f + 4, norm * coef)
    tl.store(out_f + 1, big_m)
    skip = m * 0.0  # (a float32 scalar: 0, or 1 on overflow)
    reason = tl.load(skipped) * 0
    if BACKOFF:
        bad = tl.full((BLOCK,), 0, tl.int32)
        am = tl.abs(big_m)
        for start in range(0, count, BLOCK):
            k = start + tl.arange(0, BLOCK)
            e = tl.load(norms + k, mask=k < count, other=0.0) * am
            bad += tl.where(_isfinite(e), 0, 1)
        overflow = total(bad) > 0
        i = tl.load(iteration)
        at = tl.load(last)
        f, lo, hi = tl.load(h), tl.load(h + 1), tl.load(h + 2)
        rem = (i - at) % window
        rem = tl.where(rem < 0, rem + window, rem)  # Python's (and torch's) remainder
        grow = (total(bad) == 0) & (rem == 0)
        new = tl.where(overflow, tl.div_rn(s, f), tl.where(grow, s * f, s))
        new = tl.where(new < lo, lo, tl.where(new > hi, hi, new))  # NaN kept, as clamp
        tl.store(scale, new)
        tl.store(last, tl.where(overflow, i, at))
        tl.store(iteration, i + 1)
        skip = tl.where(overflow, 1.0, 0.0)
        reason = tl.where(overflow, skip_bit, 0).to(tl.int64)
    if HAS_SCALE:
        tl.store(out_f + 5, tl.load(scale))
    tl.store(out_f + 2, skip)
    tl.store(out_i, reason)
    skipped_now = skip != 0.0
    tl.store(out_i + 1, tl.load(skipped) + tl.where(skipped_now, 1, 0).to(tl.int64))
    tl.store(out_i + 2, tl.where(skipped_now, tl.load(consecutive) + 1, 0).to(tl.int64))
    tl.store(out_i + 3, reason * 0)
    tl.store(out_b, skip == 0.0)


def decide(norms, h, scale, iteration, last, skipped, consecutive, out_f, out_i, out_b, *,
           window: int, skip_bit: int, backoff: bool, clip: bool) -> None:
    """One launch of ``_decide`` (see the module doc). ``scale`` is ``None`` without a loss
    scale; ``iteration`` and ``last`` (the Backoff scaler's counters) are read only with
    ``backoff``; ``h`` holds ``[step_factor, scale_min, scale_max, clip_norm, 1.0]``."""
    stand_in = out_i  # (a pointer argument a constexpr branch never reads)
    _decide[(1,)](norms, norms.numel(), h, out_f if scale is None else scale,
                  iteration if backoff else stand_in, last if backoff else stand_in, skipped,
                  consecutive, out_f, out_i, out_b, window, skip_bit,
                  HAS_SCALE=scale is not None, BACKOFF=backoff, HAS_CLIP=clip,
                  BLOCK=_BLOCK, **OPTIONS)


#: What ``processing.folded`` calls (by name, as the update families' rules are called).
RULES = {"decide": decide}
