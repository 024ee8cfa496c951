"""``GradientPipeline``: processors in their fixed order, folded into one optimizer update.

A step costs one read pass over the gradients (the per-tensor norms) plus the optimizer's one
update pass: the processors fold a scalar multiplier (loss-scale inverse times the global clip
coefficient), per-tensor factors (per-tensor clipping, LARC) and a skip flag, and the optimizer
applies them through ``apply_gradients(..., grad_multiplier=, found_inf=)``. Nothing is read on
the host inside a step (except ``SkipNonFinite(max_consecutive_skips=N)``, which must read its
counter to raise); stages that must see real values (noise, clip by value, the NaN/Inf filter)
write new gradient tensors.

Order (``STAGES``): unscale, noise, clip_by_value, clip_by_norm, clip_by_average_norm,
clip_by_global_norm, nan_inf_filter, larc, zero_filter, check; then the update.

Example:
    >>> import torch, trainop
    >>> from trainop.processing import (GradientPipeline, LossScale, BackoffLossScaler,
    ...                                 ClipByGlobalNorm)
    >>> w = torch.nn.Parameter(torch.ones(3))
    >>> pipe = GradientPipeline(trainop.AdamOptimizer(0.1, params=[w]),
    ...                         [ClipByGlobalNorm(1.0), LossScale(BackoffLossScaler())])
    >>> pipe.order
    ('unscale', 'clip_by_global_norm')
    >>> pipe.scale_loss((w * w).sum()).backward()
    >>> result = pipe.step()
    >>> bool(result.applied), round(float(result.global_norm), 4)
    (True, 3.4641)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

import torch

from trainop.contract.arguments import check_global_step, check_loss
from trainop.contract.optimizer import Optimizer
from trainop.contract.validation import check_bool, check_callable_or_none, check_name, describe
from trainop.processing._base import (
    SKIP_HYPERPARAMETER,
    SKIP_NO_GRADIENTS,
    SKIP_REASONS,
    STAGES,
    Processor,
)
from trainop.processing._batch import Gradients
from trainop.processing._checkpoint import validate_pipeline_state
from trainop.processing._checks import check_state_keys
from trainop.processing.folded import foldable, run_folded

__all__ = ["GradientPipeline", "StepResult"]

_CLIP_INDEX = STAGES.index("clip_by_global_norm")
_I64 = torch.int64


@dataclass(frozen=True)
class StepResult:
    """What one step did. Every field is a tensor on the gradients' device (no host read).

    - ``applied``: 0-dim bool; False when the update was skipped (nothing moved).
    - ``skip_reason``: 0-dim int64 bit mask, 0 when applied (see ``SKIP_REASONS``).
    - ``global_norm``: float32 global norm of the gradients before clipping (after unscaling).
    - ``clipped_global_norm``: after ``ClipByGlobalNorm`` (None without one).
    - ``loss_scale``: the scale this step's gradients were unscaled by (None without one);
      ``next_loss_scale``: the scale after the scaler's update.
    - ``num_zero_filtered``: int64 count of variables left alone as all-zero.
    - ``skipped_steps``, ``consecutive_skips``: int64 counters of the pipeline.
    - ``stats``: every statistic the stages recorded (e.g. ``larc_trust``).
    - ``loss``: what ``step(closure)``'s closure returned, else None.
    """

    applied: torch.Tensor
    skip_reason: torch.Tensor
    global_norm: torch.Tensor
    clipped_global_norm: torch.Tensor | None
    loss_scale: torch.Tensor | None
    next_loss_scale: torch.Tensor | None
    num_zero_filtered: torch.Tensor
    skipped_steps: torch.Tensor
    consecutive_skips: torch.Tensor
    stats: dict[str, torch.Tensor] = field(default_factory=dict)
    loss: Any = None

    def why(self) -> str:
        """``"applied"`` or ``"skipped: <reasons>"`` (reads ``skip_reason`` on the host)."""
        bits = int(self.skip_reason)
        if not bits:
            return "applied"
        return "skipped: " + "; ".join(text for bit, text in SKIP_REASONS.items() if bits & bit)


def _unwrap(optimizer: Any) -> tuple[Optimizer, list[Processor], Any]:
    parts = getattr(optimizer, "_pipeline_parts", None)
    if parts is not None and callable(parts):
        return parts()
    if isinstance(optimizer, Optimizer):
        return optimizer, [], None
    raise TypeError(f"Expected `optimizer` to be a trainop.Optimizer, a "
                    f"MultitaskOptimizerWrapper or a MixedPrecisionOptimizerWrapper, got "
                    f"{describe(optimizer)}")


def _check_processors(processors: Any) -> list[Processor]:
    if isinstance(processors, Processor):
        return [processors]
    if isinstance(processors, str | bytes) or not isinstance(processors, Iterable):
        raise TypeError(f"Expected `processors` to be an iterable of trainop.processing "
                        f"processors, got {describe(processors)}")
    out = list(processors)
    for i, p in enumerate(out):
        if not isinstance(p, Processor):
            raise TypeError(f"Expected processors[{i}] to be a trainop.processing processor "
                            f"(e.g. ClipByGlobalNorm), got {describe(p)}")
    return out


class GradientPipeline:
    """Gradient processors composed in the fixed order of ``STAGES``, fused into one update.

    Args:
        optimizer: a ``trainop.Optimizer``, a ``MultitaskOptimizerWrapper`` (adds the zero filter)
            or a ``MixedPrecisionOptimizerWrapper`` (adds its loss scale and updates float32
            master copies).
        processors: processors, in any order; they run in stage order. At most one per stage;
            ``ClipByGlobalNorm`` and ``LARC`` together raise ``ValueError`` (as OpenSeq2Seq).

    Entry points return a ``StepResult``: ``apply_gradients`` (TF: pairs of gradients of the
    *unscaled* loss), ``minimize``, and torch style ``step()`` (reads ``.grad``, which holds
    gradients of ``scale_loss(loss)``). ``compute_gradients`` returns a ``Gradients`` batch whose
    pairs read as unscaled gradients while the unscale stays pending.
    """

    def __init__(self, optimizer: Any, processors: Any = ()) -> None:
        target, implied, hooks = _unwrap(optimizer)
        given = _check_processors(processors)
        by_stage: dict[str, Processor] = {}
        for proc in [*implied, *given]:
            if proc.stage in by_stage:
                raise ValueError(f"Expected at most one processor per stage, got "
                                 f"{by_stage[proc.stage]!r} and {proc!r} for stage "
                                 f"{proc.stage!r}")
            by_stage[proc.stage] = proc
        if "clip_by_global_norm" in by_stage and "larc" in by_stage:
            raise ValueError("Expected global-norm clipping (clip_gradients / ClipByGlobalNorm) "
                             "and LARC (larc_params) not to be used together, got both")
        self._wrapped = optimizer
        self._optimizer = target
        self._hooks = hooks
        self._stages = [(stage, by_stage[stage]) for stage in STAGES if stage in by_stage]
        self.skipped_steps = torch.zeros((), dtype=_I64)
        self.consecutive_skips = torch.zeros((), dtype=_I64)

    # ------------------------------------------------------------------ inspection
    @property
    def optimizer(self) -> Optimizer:
        """The trainop optimizer that applies the update."""
        return self._optimizer

    @property
    def order(self) -> tuple[str, ...]:
        """The stages this pipeline runs, in order."""
        return tuple(stage for stage, _ in self._stages)

    @property
    def processors(self) -> tuple[Processor, ...]:
        """The processors, in the order they run."""
        return tuple(proc for _, proc in self._stages)

    @property
    def loss_scaler(self) -> Any:
        """The loss scaler of the ``unscale`` stage, or None."""
        proc = dict(self._stages).get("unscale")
        return None if proc is None else proc.scaler

    def describe(self) -> str:
        """The order, one stage per line, then the update."""
        opt = self._optimizer
        lines = [f"GradientPipeline over {type(self._wrapped).__name__} "
                 f"({type(opt).__name__} {opt.get_name()!r})"]
        width = max([len(s) for s, _ in self._stages], default=0)
        for k, (stage, proc) in enumerate(self._stages, 1):
            lines.append(f"  {k}. {stage:<{width}}  {proc!r}")
        lines.append(f"  then: {type(opt).__name__}.apply_gradients(grad_multiplier=..., "
                     f"found_inf=...)" + (" on float32 master copies, copied back"
                                          if self._hooks is not None else ""))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.describe()

    def state_dict(self) -> dict[str, Any]:
        """Counters and every stage's state (0-dim tensors, cloned)."""
        return {"skipped_steps": self.skipped_steps.clone(),
                "consecutive_skips": self.consecutive_skips.clone(),
                "stages": {stage: proc.state_dict() for stage, proc in self._stages}}

    def validate_state_dict(self, state_dict: Any) -> None:
        """Raise ``ValueError``/``TypeError`` if ``load_state_dict(state_dict)`` would not load
        (keys, stages, counters, every stage's state); reads only."""
        check_state_keys(state_dict, ("skipped_steps", "consecutive_skips", "stages"))
        stages = state_dict["stages"]
        if not isinstance(stages, dict) or set(stages) != set(self.order):
            raise ValueError(f"Expected state for the stages {list(self.order)}, got "
                             f"{describe(stages)}")
        validate_pipeline_state(self._stages, state_dict)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a ``state_dict`` of a pipeline with the same stages (validated whole first:
        a rejected one changes nothing)."""
        self.validate_state_dict(state_dict)
        stages = state_dict["stages"]
        for stage, proc in self._stages:
            proc.load_state_dict(stages[stage])
        self.skipped_steps.copy_(torch.as_tensor(state_dict["skipped_steps"]))
        self.consecutive_skips.copy_(torch.as_tensor(state_dict["consecutive_skips"]))

    # ------------------------------------------------------------------ entry points
    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * S`` (``loss`` itself without a loss scale); backpropagate this for ``step``."""
        check_loss(loss, "loss")
        scaler = self.loss_scaler
        if scaler is None:
            return loss
        return loss * scaler.loss_scale.to(loss.device)

    def compute_gradients(self, loss: Any, var_list: Any = None,
                          gate_gradients: int = Optimizer.GATE_OP,
                          aggregation_method: int | None = None,
                          colocate_gradients_with_ops: bool = False,
                          grad_loss: torch.Tensor | None = None) -> Gradients:
        """Gradients of ``loss`` (scaled by the loss scale for the backward pass) as a batch
        whose pairs read as the unscaled gradients; the unscale stays pending."""
        if self._hooks is not None:
            return self._hooks._compute_gradients(
                loss, var_list=var_list, gate_gradients=gate_gradients,
                aggregation_method=aggregation_method,
                colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        scaler = self.loss_scaler
        if scaler is not None:
            loss = _evaluate_loss(loss)
            scale = scaler.loss_scale.to(loss.device)
            loss = loss * scale
        pairs = self._optimizer.compute_gradients(
            loss, var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        batch = Gradients(pairs, loss_scale=None if scaler is None else scale)
        batch.fold_loss_scale()
        return batch

    def apply_gradients(self, grads_and_vars: Any, global_step: torch.Tensor | None = None,
                        name: str | None = None, *,
                        given_global_norm: torch.Tensor | None = None) -> StepResult:
        """Process ``grads_and_vars`` (gradients of the unscaled loss, or a batch from
        ``compute_gradients``) and apply them; ``global_step`` advances only if applied.
        ``given_global_norm``: the norm for stages with ``use_norm="given"``."""
        if name is not None:
            check_name(name)
        check_global_step(global_step)
        batch = Gradients.of(grads_and_vars)
        _give_norm(batch, given_global_norm)
        self._optimizer._validate_pairs(batch.stored_pairs(), widen=batch.narrowed)
        if self._hooks is not None:
            self._hooks._prepare_batch(batch)
        return self._run(batch, global_step, fast=False)

    def minimize(self, loss: Any, global_step: torch.Tensor | None = None, var_list: Any = None,
                 gate_gradients: int = Optimizer.GATE_OP,
                 aggregation_method: int | None = None,
                 colocate_gradients_with_ops: bool = False, name: str | None = None,
                 grad_loss: torch.Tensor | None = None) -> StepResult:
        """``compute_gradients`` then ``apply_gradients``."""
        batch = self.compute_gradients(
            loss, var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        if not batch.present:
            raise ValueError("No gradients provided for any variable, check your graph for ops "
                             "that do not support gradients.")
        return self.apply_gradients(batch, global_step=global_step, name=name)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None, *,
             given_global_norm: torch.Tensor | None = None) -> StepResult:
        """torch style: process and apply the ``.grad`` of every parameter (gradients of
        ``scale_loss(loss)``). Without any gradient nothing happens (``applied`` is False).
        ``given_global_norm``: the norm for stages with ``use_norm="given"``."""
        check_callable_or_none("closure", closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        batch = self.batch_from_grads()
        _give_norm(batch, given_global_norm)
        if not batch.present:
            return self._empty_result(batch, loss)
        result = self._run(batch, None, fast=self._hooks is None)
        return result if loss is None else _with_loss(result, loss)

    def batch_from_grads(self) -> Gradients:
        """The parameters' ``.grad`` (gradients of ``scale_loss(loss)``) as the batch ``step``
        processes: with mixed precision, the half gradients paired with the masters, read as
        their float32 widening (``Gradients.widen_on_use``; the regularization gradient
        ``S * dR/dv32`` added in float32); ``pending_loss_scale`` is the scale they still
        carry."""
        if self._hooks is not None:
            return self._hooks._batch_from_grads()
        params = list(chain.from_iterable(g["params"] for g in self._optimizer.param_groups))
        scaler = self.loss_scaler
        return Gradients.from_grads(params,
                                    loss_scale=None if scaler is None else scaler.loss_scale)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of the parameters (of the model, with mixed precision)."""
        check_bool("set_to_none", set_to_none)
        if self._hooks is not None:
            self._hooks._zero_grad(set_to_none)
        else:
            self._optimizer.zero_grad(set_to_none=set_to_none)

    def process(self, grads_and_vars: Any) -> Gradients:
        """Run every stage and check on ``grads_and_vars`` WITHOUT applying (for inspection;
        the scaler and counters of checks still update)."""
        batch = Gradients.of(grads_and_vars)
        with torch.no_grad():
            batch.optimizer = self._optimizer
            self._run_stages(batch)
        return batch

    # ------------------------------------------------------------------ the step
    def _place(self, device: torch.device) -> None:
        if self.skipped_steps.device != device:
            self.skipped_steps = self.skipped_steps.to(device)
            self.consecutive_skips = self.consecutive_skips.to(device)

    def _run_stages(self, batch: Gradients) -> None:
        if batch.is_sharded():  # FSDP2: every statistic the stages read, one all_reduce
            needs = frozenset().union(*(proc._statistics() for _, proc in self._stages))
            batch.prefetch_sharded(amax="amax" in needs,
                                   variable_norms="variable_norms" in needs)
        for stage, proc in self._stages:
            if STAGES.index(stage) >= _CLIP_INDEX and "global_norm" not in batch.stats:
                batch.stats["global_norm"] = batch.global_norm()
            batch = proc.process(batch)
        if "global_norm" not in batch.stats:
            batch.stats["global_norm"] = batch.global_norm()
        for _, proc in self._stages:
            proc.check(batch)

    @torch.no_grad()
    def _run(self, batch: Gradients, global_step: torch.Tensor | None, fast: bool) -> StepResult:
        if "zero_filter" in self.order:
            ids = [id(v) for v in batch.present_vars()]
            if len(set(ids)) != len(ids):
                raise ValueError("Expected each variable at most once with FilterZeroGradients "
                                 "(MultitaskOptimizerWrapper), got a variable listed twice")
        batch.optimizer = self._optimizer
        self._place(batch.device)
        if fast and foldable(self._stages, batch):  # the Triton path's common step
            return run_folded(self, batch)
        self._run_stages(batch)
        opt = self._optimizer
        multiplier, found_inf = batch.multiplier, batch.found_inf
        if fast and batch.original and batch.factors is None and batch.keep is None:
            opt.step(grad_multiplier=multiplier, found_inf=found_inf)
            saved = None
        else:
            pairs = batch.pairs_for_apply()  # a master's half gradient as it is (widen on use)
            widen = batch.narrowed
            saved = (self._snapshot(pairs, batch.device, widen) if batch.keep is not None
                     else None)
            opt.apply_gradients(pairs, global_step, grad_multiplier=multiplier,
                                found_inf=found_inf, widen_gradients=widen)
        if saved is not None:
            for keep, entries in zip(batch.keep, saved, strict=True):
                for tensor, copy in entries:
                    tensor.copy_(torch.where(keep, tensor, copy))
        applied = None if found_inf is None else found_inf == 0
        # a tensor hyperparameter out of range: skipped by the optimizer itself (no host read)
        invalid = getattr(opt, "invalid_hyperparameters", None)
        if invalid is not None:
            batch.skip_if(invalid, SKIP_HYPERPARAMETER)
            valid = ~invalid.to(batch.device)
            applied = valid if applied is None else applied & valid.to(applied.device)
        if self._hooks is not None:
            self._hooks._after_apply(batch, applied)
        return self._result(batch, applied)

    def _snapshot(self, pairs, device, widen: bool
                  ) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        """Copies of each variable and its slots, so that zero-filtered ones can be restored
        (slots are created first, with a skipped apply, for variables seen for the first time)."""
        opt = self._optimizer
        new = [(g, v) for g, v in pairs if v not in opt.state]
        if new:
            opt.apply_gradients(new, found_inf=torch.ones((), device=device),
                                widen_gradients=widen)
        saved = []
        for _, v in pairs:
            tensors = [v, *(t for t in opt.state[v].values() if isinstance(t, torch.Tensor))]
            saved.append([(t, t.clone()) for t in tensors])
        return saved

    def _result(self, batch: Gradients, applied: torch.Tensor | None) -> StepResult:
        device = batch.device
        if applied is None:
            applied = torch.ones((), dtype=torch.bool, device=device)
        skipped = ~applied
        self.skipped_steps.add_(skipped.to(_I64))
        self.consecutive_skips.copy_(torch.where(skipped, self.consecutive_skips + 1, 0))
        reason = (torch.zeros((), dtype=_I64, device=device) if batch.skip_reason is None
                  else batch.skip_reason)
        zero = (torch.zeros((), dtype=_I64, device=device) if batch.keep is None
                else (~batch.keep).sum())
        stats = dict(batch.stats)
        return StepResult(
            applied=applied, skip_reason=reason, global_norm=stats["global_norm"],
            clipped_global_norm=stats.get("clipped_global_norm"),
            loss_scale=stats.get("loss_scale"), next_loss_scale=stats.get("next_loss_scale"),
            num_zero_filtered=zero, skipped_steps=self.skipped_steps.clone(),
            consecutive_skips=self.consecutive_skips.clone(), stats=stats)

    def _empty_result(self, batch: Gradients, loss: Any) -> StepResult:
        device = batch.device
        no = torch.zeros((), dtype=torch.bool, device=device)
        return StepResult(
            applied=no, skip_reason=torch.tensor(SKIP_NO_GRADIENTS, dtype=_I64, device=device),
            global_norm=torch.zeros((), device=device), clipped_global_norm=None,
            loss_scale=None, next_loss_scale=None,
            num_zero_filtered=torch.zeros((), dtype=_I64, device=device),
            skipped_steps=self.skipped_steps.clone(),
            consecutive_skips=self.consecutive_skips.clone(), loss=loss)


def _give_norm(batch: Gradients, norm: torch.Tensor | None) -> None:
    if norm is None:
        return
    if not isinstance(norm, torch.Tensor) or norm.dim() != 0 or not norm.is_floating_point():
        raise TypeError(f"Expected `given_global_norm` to be a 0-dim floating tensor or None, "
                        f"got {describe(norm)}")
    batch.given_global_norm = norm


def _with_loss(result: StepResult, loss: Any) -> StepResult:
    return replace(result, loss=loss)


def _evaluate_loss(loss: Any) -> torch.Tensor:
    if callable(loss) and not isinstance(loss, torch.Tensor):
        with torch.enable_grad():
            loss = loss()
    check_loss(loss, "loss")
    return loss


class PipelineFrontend:
    """TF's update contract of a wrapper, delegated to its ``GradientPipeline`` (``_pipeline``).

    ``apply_gradients`` and ``minimize`` take TF's arguments, ``step`` torch's; each returns the
    pipeline's ``StepResult``.
    """

    _pipeline: GradientPipeline

    def apply_gradients(self, grads_and_vars: Any, global_step: torch.Tensor | None = None,
                        name: str | None = None) -> StepResult:
        """Process and apply ``(gradient, variable)`` pairs (see ``GradientPipeline``)."""
        return self._pipeline.apply_gradients(grads_and_vars, global_step=global_step,
                                              name=name)

    def minimize(self, loss: Any, global_step: torch.Tensor | None = None, var_list: Any = None,
                 gate_gradients: int = Optimizer.GATE_OP,
                 aggregation_method: int | None = None,
                 colocate_gradients_with_ops: bool = False, name: str | None = None,
                 grad_loss: torch.Tensor | None = None) -> StepResult:
        """``compute_gradients`` then this wrapper's ``apply_gradients``."""
        return self._pipeline.minimize(
            loss, global_step=global_step, var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, name=name,
            grad_loss=grad_loss)

    def step(self, closure: Any = None) -> StepResult:
        """torch style: process and apply the parameters' ``.grad``."""
        return self._pipeline.step(closure)
