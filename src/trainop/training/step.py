"""``TrainingStep``: the training-step core that ``optimize_loss`` and the ``Updater`` share.

One micro-step: the loss is backpropagated scaled by the pipeline's loss scale; on a micro-step
without an update the gradients are added to the accumulators (unscaled, as the front end
weights them); on an update the gradients (the accumulators if anything was accumulated) are
averaged over torch.distributed's default group (once per update, when asked), processed by
the ``GradientPipeline`` in its fixed order and applied in one fused pass; ``global_step``
advances on the device only if the update was applied; the accumulators are zeroed after every
update attempt, applied or skipped (OpenSeq2Seq). Nothing is read on the host.

The front ends supply the pipeline (their processors, their order), the accumulation rule
(OpenSeq2Seq: mean over ``iter_size``; RETURNN: sum over ``accum_grad_multiple_step``) and when
to update; the core counts micro-steps and update attempts and saves all of it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from trainop.contract.validation import describe
from trainop.processing import GradientPipeline, StepResult
from trainop.processing._base import SKIP_ACCUMULATING
from trainop.training.accumulate import Accumulator, check_step_state
from trainop.training.distributed import average_gradients, reduce_grads_in_place

__all__ = ["TrainingStep"]

_I64 = torch.int64


class TrainingStep:
    """Backward, accumulation, one distributed average per update, the pipeline, counters.

    Args:
        pipeline: the ``GradientPipeline`` that processes and applies an update.
        divisor: accumulation weighting: ``iter_size`` (each micro-step's gradient divided by
            it, OpenSeq2Seq) or ``None`` (summed, RETURNN).
        accumulate: whether updates go through the accumulators even when nothing was
            accumulated before (OpenSeq2Seq with ``iter_size > 1``: ``acc += g/iter_size`` runs
            on the update micro-step too).
        average_over_ranks: average the gradients over the default process group once per
            update (OpenSeq2Seq ``on_horovod``, RETURNN ``use_horovod``).

    Attributes:
        global_step: 0-dim int64 tensor, updates applied.
        micro_steps: micro-steps run (host int).
        update_steps: update attempts, applied or skipped (host int).
        last_result: the ``StepResult`` of the last micro-step.
    """

    def __init__(self, pipeline: GradientPipeline, *, divisor: int | None, accumulate: bool,
                 average_over_ranks: bool) -> None:
        if not isinstance(pipeline, GradientPipeline):
            raise TypeError(f"Expected `pipeline` to be a GradientPipeline, got "
                            f"{describe(pipeline)}")
        self.pipeline = pipeline
        variables = [p for g in pipeline.optimizer.param_groups for p in g["params"]]
        self._accumulator = Accumulator(variables, divisor)
        self._accumulate = accumulate
        self._average = average_over_ranks
        self.global_step = torch.zeros((), dtype=_I64)
        self.micro_steps = 0
        self.update_steps = 0
        self.last_result: StepResult | None = None

    @property
    def accumulated_micro_steps(self) -> int:
        """Micro-steps whose gradients wait in the accumulators."""
        return self._accumulator.micro_steps

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate ``loss`` times the loss scale into the parameters' ``.grad``."""
        self.pipeline.scale_loss(loss).backward()

    def _take_grads(self) -> None:
        """Move the parameters' gradients into the accumulators (unscaled) and clear them."""
        batch = self.pipeline.batch_from_grads()
        scale = batch.pending_loss_scale
        inverse = None if scale is None else torch.reciprocal(scale.to(torch.float32))
        self._accumulator.add(batch.raw_pairs(), inverse)
        self.pipeline.zero_grad(set_to_none=True)

    def accumulate(self) -> StepResult:
        """A micro-step without an update: the gradients join the accumulators."""
        self._take_grads()
        self.micro_steps += 1
        self.last_result = self._accumulating_result()
        return self.last_result

    def update(self, given_global_norm: torch.Tensor | None = None,
               observe: Any = None) -> StepResult:
        """A micro-step with an update (see the module doc). ``given_global_norm``: the norm
        for pipeline stages with ``use_norm="given"`` (RETURNN's raw micro-step norm).
        ``observe``: ``None`` or ``fn(pairs, pending_loss_scale)``, called with the
        ``(gradient, variable)`` pairs the pipeline is about to process (accumulated and
        averaged; ``pending_loss_scale``: the scale they still carry, or ``None``), e.g. for
        gradient summaries; it must not change them."""
        if self._accumulate or self._accumulator.pending:
            self._take_grads()
            pairs = self._accumulator.pairs()
            if self._average:
                reduced = average_gradients([g for g, _ in pairs])
                pairs = [(g, v) for g, (_, v) in zip(reduced, pairs, strict=True)]
            if observe is not None:
                observe(pairs, None)
            try:
                result = self.pipeline.apply_gradients(pairs, global_step=self.global_step,
                                                       given_global_norm=given_global_norm)
            finally:
                self._accumulator.reset()
        else:
            if self._average:
                reduce_grads_in_place(self._model_params())
            if observe is not None:
                batch = self.pipeline.batch_from_grads()
                observe(batch.raw_pairs(), batch.pending_loss_scale)
            result = self.pipeline.step(given_global_norm=given_global_norm)
            self.global_step.add_(result.applied.to(self.global_step.device, _I64))
            self.pipeline.zero_grad(set_to_none=True)
        self.micro_steps += 1
        self.update_steps += 1
        self.last_result = result
        return result

    def _model_params(self) -> list[torch.Tensor]:
        hooks = self.pipeline._hooks
        if hooks is not None:
            return list(hooks._model_params)
        return [p for g in self.pipeline.optimizer.param_groups for p in g["params"]]

    def _accumulating_result(self) -> StepResult:
        device = self.global_step.device
        zero = torch.zeros((), dtype=_I64, device=device)
        template = self.last_result
        base = StepResult(
            applied=torch.zeros((), dtype=torch.bool, device=device),
            skip_reason=torch.full((), SKIP_ACCUMULATING, dtype=_I64, device=device),
            global_norm=torch.zeros((), device=device), clipped_global_norm=None,
            loss_scale=None, next_loss_scale=None, num_zero_filtered=zero,
            skipped_steps=self.pipeline.skipped_steps.clone(),
            consecutive_skips=self.pipeline.consecutive_skips.clone())
        if template is not None and template.loss_scale is not None:
            base = replace(base, loss_scale=template.next_loss_scale,
                           next_loss_scale=template.next_loss_scale)
        return base

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self, *, pending: bool = True) -> dict[str, Any]:
        """Counters, accumulators and the pipeline's state (the optimizer's is the front
        end's to save: it may be a wrapper; ``pending``: see ``Accumulator.state_dict``)."""
        return {"global_step": self.global_step.clone(), "micro_steps": self.micro_steps,
                "update_steps": self.update_steps,
                "accumulator": self._accumulator.state_dict(pending=pending),
                "pipeline": self.pipeline.state_dict()}

    def check_state_dict(self, state: Any) -> Accumulator:
        """Validate ``state`` without changing anything; returns the loaded accumulators (to
        be installed by ``load_state_dict``)."""
        accumulator = check_step_state(state, {"global_step", "micro_steps", "update_steps",
                                               "accumulator", "pipeline"}, self._accumulator)
        self.pipeline.validate_state_dict(state["pipeline"])
        return accumulator

    def load_state_dict(self, state: dict[str, Any],
                        accumulator: Accumulator | None = None) -> None:
        """Load ``state`` (``accumulator``: what ``check_state_dict`` returned for it)."""
        if accumulator is None:
            accumulator = self.check_state_dict(state)
        self.pipeline.load_state_dict(state["pipeline"])
        self._accumulator = accumulator
        self.global_step = state["global_step"].clone()
        self.micro_steps = state["micro_steps"]
        self.update_steps = state["update_steps"]
