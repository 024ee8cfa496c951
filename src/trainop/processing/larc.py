"""LARC / LARS: OpenSeq2Seq's layer-wise adaptive rate control, folded as per-tensor factors.

For every ``(g, v)``, with float32 L2 norms over whole tensors::

    clip:  t = min(max(eta * ||v|| / (lr * (||g|| + epsilon)), min_update), 1)
    scale: t = max(eta * ||v|| / (||g|| + epsilon), min_update)
    g <- t * g          (t saturate-cast to the variable's dtype first)

``lr`` is the optimizer's learning rate for that variable at its current step. ``||g||`` is the
norm of the gradient as it reaches LARC (after unscaling and clipping); for a sparse gradient,
of its dense equivalent. A zero variable gets ``t = min_update``.

Reference: OpenSeq2Seq ``open_seq2seq/optimizers/optimizers.py`` (``post_process_gradients``).
"""

from __future__ import annotations

from typing import Any

import torch

from trainop.contract.hyper import evaluate_hyper
from trainop.contract.validation import check_choice, check_real, describe
from trainop.processing._base import Processor
from trainop.processing._batch import Gradients, float32_norms
from trainop.processing._checks import NON_NEGATIVE, POSITIVE, check_keys, check_scalar

__all__ = ["LARC", "larc", "learning_rate_for"]

_F32 = torch.float32
_MODES = ("clip", "scale")
_LARC_KEYS = ("larc_eta", "larc_mode", "min_update", "epsilon")


def learning_rate_for(optimizer: Any, var: torch.Tensor) -> float | torch.Tensor:
    """The learning rate ``optimizer`` uses for ``var`` at its group's current step (the
    TF-style group, or the defaults at step 0, for a variable it has not seen yet)."""
    groups = optimizer.param_groups
    group = next((g for g in groups if any(p is var for p in g["params"])), None)
    if group is None:
        tf_group = getattr(optimizer, "_tf_group", None)
        group = tf_group if tf_group is not None and any(tf_group is g for g in groups) else None
    if group is None:
        return evaluate_hyper("learning_rate", optimizer.defaults["lr"],
                              torch.zeros((), dtype=torch.int64))
    return evaluate_hyper("learning_rate", group["lr"], group["non_slot"]["step"])


class LARC(Processor):
    """Stage ``larc``: OpenSeq2Seq's LARC (``larc_mode='clip'``) or LARS (``'scale'``).

    Cannot be combined with ``ClipByGlobalNorm`` in one pipeline (OpenSeq2Seq raises too).
    Records ``larc_trust`` (the per-tensor factors) and, in clip mode, ``larc_clip_on``
    (``t < 1`` before the ``min(., 1)``), as OpenSeq2Seq's ``larc_summaries``.

    Args:
        larc_eta: real > 0 (trust coefficient; configs use 1e-3).
        larc_mode: ``'clip'`` (default) or ``'scale'``.
        min_update: real >= 0, default 1e-7 (lower bound of ``t``).
        epsilon: real >= 0, default 1e-7 (added to ``||g||``).
        learning_rate: ``None`` (read from the pipeline's optimizer) or a real >= 0 / 0-dim
            tensor; required when LARC runs alone.

    Example (OpenSeq2Seq's reference: ``t = 0.1``):
        >>> import torch
        >>> from trainop.processing import LARC
        >>> w = torch.tensor([3.0, 4.0])
        >>> LARC(0.002, learning_rate=0.1)([(torch.tensor([0.6, 0.8]), w)])[0][0]
        tensor([0.0600, 0.0800])
    """

    stage = "larc"

    def _statistics(self) -> frozenset[str]:
        return frozenset({"variable_norms"})

    def __init__(self, larc_eta: float, larc_mode: str = "clip", min_update: float = 1e-7,
                 epsilon: float = 1e-7, *, learning_rate: Any = None) -> None:
        self.larc_eta = check_real("larc_eta", larc_eta, POSITIVE)
        self.larc_mode = check_choice("larc_mode", larc_mode, _MODES)
        self.min_update = check_real("min_update", min_update, NON_NEGATIVE)
        self.epsilon = check_real("epsilon", epsilon, NON_NEGATIVE)
        self.learning_rate = (None if learning_rate is None
                              else check_scalar("learning_rate", learning_rate, NON_NEGATIVE))

    @classmethod
    def from_params(cls, larc_params: dict[str, Any], *, learning_rate: Any = None) -> LARC:
        """From OpenSeq2Seq's ``larc_params`` dict (``larc_eta`` required; unknown keys raise)."""
        params = check_keys("larc_params", larc_params, _LARC_KEYS)
        if "larc_eta" not in params:
            raise ValueError(f"Expected `larc_params` to contain 'larc_eta', got keys "
                             f"{sorted(params)}")
        return cls(**params, learning_rate=learning_rate)

    def _learning_rates(self, batch: Gradients) -> torch.Tensor:
        variables = batch.present_vars()
        if self.learning_rate is not None:
            rates = [self.learning_rate] * len(variables)
        elif batch.optimizer is not None:
            rates = [learning_rate_for(batch.optimizer, v) for v in variables]
        else:
            raise ValueError("LARC needs the learning rate: pass `learning_rate=` or run it "
                             "inside a GradientPipeline (got learning_rate=None and no optimizer)")
        return torch.stack([torch.as_tensor(r, dtype=_F32).to(batch.device) for r in rates])

    def _grad_norms(self, batch: Gradients) -> torch.Tensor:
        norms = batch.norms()
        grads = batch.present_grads()
        sparse = [k for k, g in enumerate(grads) if g.is_sparse]
        if sparse:
            scales = batch._effective(torch.ones(len(grads), dtype=_F32, device=batch.device))
            dense_equiv = float32_norms([grads[k].coalesce().values() for k in sparse],
                                        batch.device)
            norms = norms.clone()
            norms[sparse] = dense_equiv * scales[sparse]
        return norms

    def process(self, batch: Gradients) -> Gradients:
        if not batch.present:
            return batch
        variables = batch.present_vars()
        g_norm = self._grad_norms(batch)
        v_norm = batch.variable_norms()
        lr = self._learning_rates(batch)
        if self.larc_mode == "clip":
            t = torch.clamp_min(self.larc_eta * v_norm / (lr * (g_norm + self.epsilon)),
                                self.min_update)
            batch.stats["larc_clip_on"] = t < 1
            t = torch.clamp_max(t, 1.0)
        else:
            t = torch.clamp_min(self.larc_eta * v_norm / (g_norm + self.epsilon), self.min_update)
        for dtype in {v.dtype for v in variables} & {torch.float16, torch.bfloat16}:
            mask = torch.tensor([v.dtype == dtype for v in variables], device=batch.device)
            top = torch.finfo(dtype).max
            t = torch.where(mask, t.clamp(-top, top).to(dtype).to(_F32), t)
        batch.stats["larc_trust"] = t
        batch.scale_each(t)
        return batch

    def _args(self) -> str:
        lr = "" if self.learning_rate is None else (
            f", learning_rate={self.learning_rate!r}" if isinstance(self.learning_rate, float)
            else ", learning_rate=<tensor>")
        return (f"larc_eta={self.larc_eta:g}, larc_mode={self.larc_mode!r}, "
                f"min_update={self.min_update:g}, epsilon={self.epsilon:g}{lr}")


def larc(grads_and_vars: Any, learning_rate: Any, larc_eta: float, larc_mode: str = "clip",
         min_update: float = 1e-7, epsilon: float = 1e-7
         ) -> list[tuple[torch.Tensor | None, torch.Tensor]]:
    """LARC as a plain function on ``(gradient, variable)`` pairs (see ``LARC``)."""
    if learning_rate is None:
        raise TypeError(f"Expected `learning_rate` to be a real number or a 0-dim tensor, got "
                        f"{describe(learning_rate)}")
    return LARC(larc_eta, larc_mode, min_update, epsilon,
                learning_rate=learning_rate)(grads_and_vars)
