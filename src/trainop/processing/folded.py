"""The common post-backward step folded on the Triton path: ``GradientPipeline.step()`` with
at most a loss scale (static or ``BackoffLossScaler``) and ``ClipByGlobalNorm`` (the norm
measured here), over an optimizer asked for ``implementation="triton"``.

The stages' scalar arithmetic (the loss-scale inverse, the global norm, the clip coefficient,
the finite check, the scaler's update, the skip flag and reason, the pipeline's counters) is
one Triton program (``kernels.triton.gate``) between the read pass and the update, instead of
some forty small torch operations, each a launch on a GPU: a step issues fewer device
operations than torch's ``GradScaler`` + ``clip_grad_norm_`` + fused Adam (issue #44;
``trainop bench --host`` counts both). Every number is the general path's, in its order
(tested side by side), except the global norm's sum of squares, added in float64 rather than
in torch's float32 order (within 1 ulp of it). Anything else (other stages or scalers, a
given norm, hooks, sharded or mixed gradients, another implementation) takes the general
path.
"""

from __future__ import annotations

from typing import Any

import torch

from trainop.processing._base import SKIP_HYPERPARAMETER, SKIP_OVERFLOW
from trainop.processing._batch import Gradients
from trainop.processing._sharded import sharded
from trainop.processing.clipping import ClipByGlobalNorm
from trainop.processing.loss_scale import BackoffLossScaler, LossScale, StaticLossScaler

__all__ = ["foldable", "run_folded"]

_F32, _I64 = torch.float32, torch.int64
_STAGES = frozenset({"unscale", "clip_by_global_norm"})


def foldable(stages: list[tuple[str, Any]], batch: Gradients) -> bool:
    """Whether this step's stages and batch take the folded path (see the module doc)."""
    if not _STAGES.issuperset(stage for stage, _ in stages):
        return False
    for stage, proc in stages:
        if stage == "unscale" and not (type(proc) is LossScale and type(proc.scaler) in (
                StaticLossScaler, BackoffLossScaler)):
            return False
        if stage == "clip_by_global_norm" and not (type(proc) is ClipByGlobalNorm
                                                   and proc.use_norm == "stage"):
            return False
    if not (batch.original and batch._uniform and batch.factors is None and batch.keep is None
            and batch.multiplier is None and batch.found_inf is None and not batch.narrowed
            and batch._norm_implementation() == "triton"):
        return False
    from trainop.kernels import triton as tk

    return tk.supports(_F32, batch.device) and not sharded(batch.present_grads()[:1])


def run_folded(pipeline: Any, batch: Gradients) -> Any:
    """The step (``foldable``): the read pass, the gate program, the update, the result."""
    from trainop.kernels import triton as tk
    from trainop.kernels.triton import tables
    from trainop.kernels.triton.device import guard, order

    stages = dict(pipeline._stages)
    unscale, clip = stages.get("unscale"), stages.get("clip_by_global_norm")
    scaler = None if unscale is None else unscale.scaler.to(batch.device)
    backoff = type(scaler) is BackoffLossScaler
    device = batch.device
    holder = pipeline.__dict__.get("_folded_scalars")
    if holder is None or holder.device != device:
        holder = pipeline.__dict__["_folded_scalars"] = tables.Scalars(device)
    order(holder, device, (holder.h,))
    h = holder([scaler.step_factor if backoff else 1.0, scaler.scale_min if backoff else 1.0,
                scaler.scale_max if backoff else 1.0, 1.0 if clip is None else clip.clip_norm,
                1.0])
    norms = batch._raw_l2()  # the read pass
    out_f = torch.empty(6, dtype=_F32, device=device)
    out_i = torch.empty(4, dtype=_I64, device=device)
    applied = torch.empty((), dtype=torch.bool, device=device)
    with guard(device), tk._family("gate") as module:
        module.RULES["decide"](norms, h, None if scaler is None else scaler.loss_scale,
                      scaler.iteration if backoff else None,
                      scaler.last_overflow_iteration if backoff else None,
                      pipeline.skipped_steps, pipeline.consecutive_skips, out_f, out_i, applied,
                      window=scaler.step_window if backoff else 1, skip_bit=SKIP_OVERFLOW,
                      backoff=backoff, clip=clip is not None)
    loss_scale, multiplier, found_inf, norm, clipped, next_scale = out_f.unbind()
    reason, skipped_steps, consecutive, zero = out_i.unbind()
    if scaler is not None or clip is not None:
        batch.multiplier = multiplier
    if backoff:
        batch.found_inf, batch.skip_reason = found_inf, reason
    stats = batch.stats
    if scaler is not None:
        stats["loss_scale"] = loss_scale
    stats["global_norm"] = norm
    if clip is not None:
        stats["clipped_global_norm"] = clipped
    if scaler is not None:
        stats["next_loss_scale"] = next_scale if backoff else loss_scale
    batch.pending_loss_scale = None
    opt = pipeline._optimizer
    opt.step(grad_multiplier=batch.multiplier, found_inf=batch.found_inf)
    invalid = getattr(opt, "invalid_hyperparameters", None)
    if invalid is not None:  # a tensor hyperparameter out of range: the general result
        batch.skip_if(invalid, SKIP_HYPERPARAMETER)
        valid = ~invalid.to(device)
        return pipeline._result(batch, valid if not backoff else applied & valid)
    torch._foreach_copy_([pipeline.skipped_steps, pipeline.consecutive_skips],
                         [skipped_steps, consecutive])
    from trainop.processing.pipeline import StepResult

    return StepResult(
        applied=applied, skip_reason=reason, global_norm=norm,
        clipped_global_norm=None if clip is None else clipped,
        loss_scale=stats.get("loss_scale"), next_loss_scale=stats.get("next_loss_scale"),
        num_zero_filtered=zero, skipped_steps=skipped_steps, consecutive_skips=consecutive,
        stats=dict(stats))
