"""The processor protocol and the fixed order of stages.

A processor is a small object with one signature, ``process(batch) -> batch``, run at its
stage; processors that decide whether the step is applied (the loss scaler's overflow check,
``SkipNonFinite``) also have ``check(batch)``, run at the final ``check`` stage in stage order,
when the gradients are final. State (counters, the loss scale) is held in 0-dim tensors and
returned by ``state_dict()``.

Alone, a processor is a plain function on a list of pairs: ``ClipByGlobalNorm(1.0)(pairs)``
returns the processed pairs (``transform`` returns the ``Gradients`` batch instead, with the
skip flag and the statistics).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from trainop.processing._batch import Gradients
from trainop.processing._checks import load_state

__all__ = ["SKIP_REASONS", "STAGES", "Processor"]

#: The stages, in the order a pipeline runs them. OpenSeq2Seq's order (unscale, clip, LARC,
#: overflow check) with RETURNN's steps in RETURNN's order (noise before the clips, the NaN/Inf
#: filter after global clipping) and TF's multitask filter at apply time.
STAGES: tuple[str, ...] = (
    "unscale",
    "noise",
    "clip_by_value",
    "clip_by_norm",
    "clip_by_average_norm",
    "clip_by_global_norm",
    "nan_inf_filter",
    "clip_to_zero",
    "larc",
    "zero_filter",
    "check",
)

#: Bits of ``StepResult.skip_reason``.
SKIP_OVERFLOW = 1
SKIP_NONFINITE = 2
SKIP_NO_GRADIENTS = 4
SKIP_ACCUMULATING = 8
SKIP_HYPERPARAMETER = 16
#: Why a step was skipped: each bit of ``StepResult.skip_reason`` and what it means.
SKIP_REASONS: dict[int, str] = {
    SKIP_OVERFLOW: "loss-scale overflow (non-finite gradients with an automatic loss scale)",
    SKIP_NONFINITE: "non-finite gradients (SkipNonFinite)",
    SKIP_NO_GRADIENTS: "no gradients",
    SKIP_ACCUMULATING: "accumulating (a micro-step without an update)",
    SKIP_HYPERPARAMETER: "a tensor hyperparameter out of its range (e.g. a NaN learning rate; "
                         "see Optimizer.invalid_hyperparameters)",
}


class Processor:
    """Base class of the gradient processors (see the module docstring)."""

    #: The stage this processor runs at (one of ``STAGES``).
    stage: ClassVar[str] = ""

    def process(self, batch: Gradients) -> Gradients:
        """Run this processor's stage on ``batch`` and return it."""
        return batch

    def check(self, batch: Gradients) -> None:
        """At the ``check`` stage: look at the final gradients, possibly set the skip flag."""

    def _statistics(self) -> frozenset[str]:
        """The per-tensor statistics besides the gradient norms that this processor reads
        (``"amax"``, ``"variable_norms"``): under FSDP2 a ``GradientPipeline`` measures them
        with the norms in one ``all_reduce`` per step."""
        return frozenset()

    def state_dict(self) -> dict[str, Any]:
        """This processor's state (0-dim tensors), cloned."""
        return {k: v.clone() for k, v in self._state().items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a ``state_dict``; the keys must be exactly this processor's."""
        load_state(self._state(), state_dict)

    def _state(self) -> dict[str, torch.Tensor]:
        return {}

    def _batch(self, grads_and_vars: Any) -> Gradients:
        return Gradients.of(grads_and_vars)

    def transform(self, grads_and_vars: Any) -> Gradients:
        """Alone: run this processor (``process`` then ``check``) on pairs; return the batch."""
        batch = self._batch(grads_and_vars)
        batch = self.process(batch)
        self.check(batch)
        return batch

    def __call__(self, grads_and_vars: Any) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
        """Alone, as a plain function: the processed ``(gradient, variable)`` pairs."""
        return list(self.transform(grads_and_vars))

    def _args(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._args()})"
