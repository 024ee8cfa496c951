"""contrib's ``MultitaskOptimizerWrapper`` and ``clip_gradients_by_global_norm``.

A variable whose whole gradient is zero (every element exactly 0; for a sparse gradient, its
coalesced rows) is left alone: the variable and its slots keep their values. Everything else
happens as for any apply, as in TF: slots are created for it, ``_finish`` runs (Adam's beta
powers advance), and ``global_step`` and the optimizer's step counter advance. A NaN is not zero,
so a NaN gradient is applied. An all-zero gradient adds nothing to the global norm.

Choices (the upstream TF1 spec, "Upstream quirks and the choices trainop must make" §7):

- Q10: the wrapper does NOT modify the wrapped optimizer (TF patches the instance's hooks).
  Calling the wrapped optimizer directly still applies every gradient; the wrapper's own
  ``apply_gradients``/``minimize``/``step`` filter. Other attributes are forwarded.
- Q11: sparse gradients are supported, in the wrapper and in ``clip_gradients_by_global_norm``
  (their stored values count in the norm and are scaled).

How the filter stays free of host reads: the all-zero test is ``max |g| == 0`` per tensor, a
device flag; the variables and slots are copied before the update and copied back where the flag
is set (``torch.where``). That costs a copy of the params and slots per step (TF needs a host
decision per variable instead).
"""

from __future__ import annotations

from typing import Any

import torch

from trainop.contract.optimizer import Optimizer
from trainop.contract.validation import describe
from trainop.processing._base import Processor
from trainop.processing._batch import Gradients
from trainop.processing.clip_ops import clip_by_global_norm, global_norm
from trainop.processing.pipeline import GradientPipeline, PipelineFrontend

__all__ = ["FilterZeroGradients", "MultitaskOptimizerWrapper", "clip_gradients_by_global_norm"]


class FilterZeroGradients(Processor):
    """Stage ``zero_filter``: mark variables whose effective gradient is all zero; the pipeline
    then leaves each of them, and its slots, exactly as they were.

    Sets ``batch.keep`` (1-D bool) and records ``num_zero_filtered``. Reads ``max |g|`` per tensor
    (one more read of the gradients, exact even for tiny values).

    Alone, ``FilterZeroGradients()(pairs)`` returns the pairs with each all-zero gradient replaced
    by ``None`` (this reads the flags on the host).

    Example:
        >>> import torch
        >>> from trainop.processing import FilterZeroGradients
        >>> a, b = torch.zeros(2), torch.zeros(2)
        >>> pairs = FilterZeroGradients()([(torch.zeros(2), a), (torch.ones(2), b)])
        >>> pairs[0][0] is None, pairs[1][0]
        (True, tensor([1., 1.]))
    """

    stage = "zero_filter"

    def _statistics(self) -> frozenset[str]:
        return frozenset({"amax"})

    def process(self, batch: Gradients) -> Gradients:
        if not batch.present:
            return batch
        keep = batch.amax() != 0
        batch.keep = keep if batch.keep is None else batch.keep & keep
        batch.stats["num_zero_filtered"] = (~batch.keep).sum()
        return batch

    def __call__(self, grads_and_vars: Any) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
        batch = self.transform(grads_and_vars)
        pairs = list(batch)
        if batch.keep is None:
            return pairs
        for k, i in enumerate(batch.present):
            if not bool(batch.keep[k]):
                pairs[i] = (None, pairs[i][1])
        return pairs


class MultitaskOptimizerWrapper(PipelineFrontend):
    """contrib's ``MultitaskOptimizerWrapper(opt)``: skip variables whose gradient is all zero.

    Args:
        opt: a ``trainop.Optimizer`` (anything else raises ``TypeError``, as TF).

    ``apply_gradients``, ``minimize`` and ``step`` return a ``StepResult`` (its
    ``num_zero_filtered`` counts the skipped variables); every other attribute (``get_slot``,
    ``get_slot_names``, ``compute_gradients``, ``variables``, ...) is the wrapped optimizer's.

    Example (contrib's ``multitask_optimizer_wrapper_test.py`` ``testWrapper``):
        >>> import torch, trainop
        >>> from trainop.processing import MultitaskOptimizerWrapper
        >>> v0 = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> v1 = torch.tensor([3.0, 4.0], requires_grad=True)
        >>> opt = MultitaskOptimizerWrapper(trainop.MomentumOptimizer(2.0, 0.9))
        >>> _ = opt.apply_gradients([(torch.tensor([0.1, 0.1]), v0),
        ...                          (torch.tensor([0.01, 0.01]), v1)])
        >>> _ = opt.apply_gradients([(torch.zeros(2), v0), (torch.tensor([0.01, 0.01]), v1)])
        >>> opt.get_slot(v0, "momentum"), opt.get_slot(v1, "momentum")
        (tensor([0.1000, 0.1000]), tensor([0.0190, 0.0190]))
    """

    def __init__(self, opt: Any) -> None:
        if not isinstance(opt, Optimizer):
            raise TypeError("Supplied optimizer must be an instance of trainop.Optimizer: "
                            f"expected `opt` to be a trainop.Optimizer, got {describe(opt)}")
        self._opt = opt
        self._filter = FilterZeroGradients()
        self._pipeline = GradientPipeline(self)

    def _pipeline_parts(self):
        return self._opt, [self._filter], None

    @property
    def optimizer(self) -> Optimizer:
        """The wrapped optimizer (unchanged by the wrapper)."""
        return self._opt

    @property
    def pipeline(self) -> GradientPipeline:
        return self._pipeline


    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_opt", "_filter", "_pipeline"):
            raise AttributeError(name)
        return getattr(self._opt, name)

    def __repr__(self) -> str:
        return f"MultitaskOptimizerWrapper({type(self._opt).__name__} {self._opt.get_name()!r})"


def clip_gradients_by_global_norm(gradients_variables: Any, clip_norm: Any = 20.0
                                  ) -> tuple[list[tuple[torch.Tensor | None, torch.Tensor]],
                                             torch.Tensor]:
    """contrib's ``clip_gradients_by_global_norm``: clip ``(gradient, variable)`` pairs by the
    global norm of their gradients, all-zero gradients not counted (which is numerically the
    same as counting them); ``None`` stays ``None``; sparse gradients are supported (Q11).

    Returns:
        ``(list of (clipped gradient, variable), global_norm)``.

    Example (contrib's ``multitask_optimizer_wrapper_test.py`` ``testGradientClipping``):
        >>> import torch
        >>> from trainop.processing import clip_gradients_by_global_norm
        >>> vs = [torch.zeros(2) for _ in range(4)]
        >>> gs = [torch.tensor([10.0, 15.0]), torch.tensor([0.0, 5.0]), torch.zeros(2), None]
        >>> pairs, norm = clip_gradients_by_global_norm(list(zip(gs, vs)), clip_norm=1.0)
        >>> round(float(norm), 4), pairs[3][0]
        (18.7083, None)
    """
    pairs = Gradients(gradients_variables).raw_pairs()
    grads = [g for g, _ in pairs]
    fixed_norm = global_norm([g for g in grads if g is not None])
    clipped, _ = clip_by_global_norm(grads, clip_norm, use_norm=fixed_norm)
    return [(g, v) for g, (_, v) in zip(clipped, pairs, strict=True)], fixed_norm
