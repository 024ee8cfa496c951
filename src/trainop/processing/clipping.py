"""The clipping processors: by value, by norm (per tensor), by average norm, by global norm.

The norm-based ones fold: they read the per-tensor norms the batch measured once and multiply
the pending factors (one scalar for the global norm, one per tensor otherwise), so no gradient
is rewritten. ``ClipByValue`` must see real values and rewrites the gradients (new tensors).

Numbers are those of the TF functions in ``trainop.processing.clip_ops`` (to float32 rounding:
a folded factor is applied as ``g * (c / max(n, c))`` where TF computes ``g * c / max(n, c)``).
"""

from __future__ import annotations

from typing import Any

import torch

from trainop.contract.validation import check_choice, check_real
from trainop.processing._base import Processor
from trainop.processing._batch import Gradients
from trainop.processing._checks import POSITIVE, check_scalar, show_scalar
from trainop.processing.clip_ops import clip_by_value

__all__ = ["ClipByAverageNorm", "ClipByGlobalNorm", "ClipByNorm", "ClipByValue", "ClipToZero"]

_F32 = torch.float32


def _scalar(value: Any, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(value, dtype=_F32).to(device)


class ClipByGlobalNorm(Processor):
    """Stage ``clip_by_global_norm``: TF's ``clip_by_global_norm`` folded into the multiplier.

    ``N`` is the global norm of the effective (unscaled) gradients, from the per-tensor norms in
    float32 (OpenSeq2Seq clips in float32); every gradient is multiplied by
    ``c * min(1/N, 1/c) + (N - N)``: unchanged for ``N = 0``, NaN for a non-finite ``N``.
    Records ``global_norm`` and ``clipped_global_norm`` (``N`` times the coefficient).

    Args:
        clip_norm: real number > 0 or a 0-dim floating tensor (OpenSeq2Seq ``max_grad_norm``,
            RETURNN ``gradient_clip_global_norm``).
        use_norm: ``"stage"`` (default): ``N`` is measured here; ``"given"``: ``N`` is the
            batch's ``given_global_norm``, a norm the caller measured elsewhere (TF's
            ``clip_by_global_norm(..., use_norm=)``; RETURNN's TF updater clips the accumulated
            gradients by the norm of the micro-step's raw gradients).

    Example:
        >>> import torch
        >>> from trainop.processing import ClipByGlobalNorm
        >>> w = torch.zeros(2)
        >>> ClipByGlobalNorm(1.0)([(torch.tensor([3.0, 4.0]), w)])[0][0]
        tensor([0.6000, 0.8000])
    """

    stage = "clip_by_global_norm"

    def __init__(self, clip_norm: Any, *, use_norm: str = "stage") -> None:
        self.clip_norm = check_scalar("clip_norm", clip_norm, POSITIVE)
        self.use_norm = check_choice("use_norm", use_norm, ("stage", "given"))

    def process(self, batch: Gradients) -> Gradients:
        norm = given_norm(batch) if self.use_norm == "given" else batch.global_norm()
        batch.stats.setdefault("global_norm", norm)
        c = _scalar(self.clip_norm, batch.device)
        scale = c * torch.minimum(torch.reciprocal(norm), 1.0 / c)
        scale = scale + (norm - norm)
        batch.scale(scale)
        batch.stats["clipped_global_norm"] = norm * scale
        return batch

    def _args(self) -> str:
        text = show_scalar("clip_norm", self.clip_norm)
        return text if self.use_norm == "stage" else f"{text}, use_norm='given'"


def given_norm(batch: Gradients) -> torch.Tensor:
    """The batch's ``given_global_norm`` (set by the caller), as float32 on its device."""
    norm = getattr(batch, "given_global_norm", None)
    if norm is None:
        raise ValueError("Expected the batch to carry `given_global_norm` (use_norm='given'), got "
                         "none: pass given_global_norm= to the pipeline's step/apply_gradients")
    return norm.to(device=batch.device, dtype=_F32)


class ClipToZero(Processor):
    """Stage ``clip_to_zero``: RETURNN's ``grad_norm_to_clip_to_zero``: every gradient becomes 0
    when the global norm ``N`` is NaN, infinite or above ``threshold`` (new tensors, with
    ``torch.where``, so a NaN gradient becomes 0 too). The update still runs (momentum moves).

    Args:
        threshold: real number > 0 or a 0-dim floating tensor.
        use_norm: ``"stage"``: ``N`` measured here; ``"given"`` (RETURNN's TF updater: the norm
            of the micro-step's raw gradients): the batch's ``given_global_norm``.
    """

    stage = "clip_to_zero"

    def __init__(self, threshold: Any, *, use_norm: str = "stage") -> None:
        self.threshold = check_scalar("threshold", threshold, POSITIVE)
        self.use_norm = check_choice("use_norm", use_norm, ("stage", "given"))

    def process(self, batch: Gradients) -> Gradients:
        norm = given_norm(batch) if self.use_norm == "given" else batch.global_norm()
        zero = ~torch.isfinite(norm) | (norm > _scalar(self.threshold, batch.device))
        batch.stats["clipped_to_zero"] = zero
        batch.map_present(lambda g, v: torch.where(zero.to(g.device), torch.zeros_like(g), g)
                          if not g.is_sparse else _sparse_where(zero, g))
        return batch

    def _args(self) -> str:
        text = show_scalar("threshold", self.threshold)
        return text if self.use_norm == "stage" else f"{text}, use_norm='given'"


def _sparse_where(zero: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    g = g.coalesce()
    values = g.values()
    values = torch.where(zero.to(values.device), torch.zeros_like(values), values)
    return torch.sparse_coo_tensor(g.indices(), values, g.shape)


class ClipByNorm(Processor):
    """Stage ``clip_by_norm``: per tensor, ``g * c / max(||g||, c)`` (TF ``clip_by_norm`` over
    the whole tensor; RETURNN ``gradient_clip_norm``), folded as one factor per tensor.

    Args:
        clip_norm: real number > 0 or a 0-dim floating tensor.

    Example:
        >>> import torch
        >>> from trainop.processing import ClipByNorm
        >>> w = torch.zeros(2)
        >>> ClipByNorm(1.0)([(torch.tensor([3.0, 4.0]), w)])[0][0]
        tensor([0.6000, 0.8000])
    """

    stage = "clip_by_norm"

    def __init__(self, clip_norm: Any) -> None:
        self.clip_norm = check_scalar("clip_norm", clip_norm, POSITIVE)

    def process(self, batch: Gradients) -> Gradients:
        if batch.present:
            c = _scalar(self.clip_norm, batch.device)
            batch.scale_each(c / torch.maximum(batch.norms(), c))
        return batch

    def _args(self) -> str:
        return show_scalar("clip_norm", self.clip_norm)


class ClipByAverageNorm(Processor):
    """Stage ``clip_by_average_norm``: per tensor, TF's ``clip_by_average_norm``
    (``g * c * min(numel / ||g||, 1/c)``; RETURNN ``gradient_clip_avg_norm``), folded.

    ``numel`` is the dense number of elements (a sparse gradient's full shape).

    Args:
        clip_norm: real number > 0 or a 0-dim floating tensor.
    """

    stage = "clip_by_average_norm"

    def __init__(self, clip_norm: Any) -> None:
        self.clip_norm = check_scalar("clip_norm", clip_norm, POSITIVE)

    def process(self, batch: Gradients) -> Gradients:
        if batch.present:
            c = _scalar(self.clip_norm, batch.device)
            numel = torch.tensor([float(v.numel()) for v in batch.present_vars()], dtype=_F32,
                                 device=batch.device)
            norms = batch.norms()
            batch.scale_each(c * torch.minimum(torch.rsqrt(norms * norms) * numel, 1.0 / c))
        return batch

    def _args(self) -> str:
        return show_scalar("clip_norm", self.clip_norm)


class ClipByValue(Processor):
    """Stage ``clip_by_value``: ``clip(g, clip_value_min, clip_value_max)`` elementwise (TF
    ``clip_by_value``; RETURNN ``gradient_clip=c`` is ``ClipByValue(-c, c)``).

    Rewrites the gradients (new tensors, pending factors applied first). ±inf become the bounds,
    so a later finite check only sees NaN (as RETURNN notes); NaN stays NaN.

    Args:
        clip_value_min (float): the lower bound.
        clip_value_max (float): the upper bound, ``>= clip_value_min``.

    Example:
        >>> import torch
        >>> from trainop.processing import ClipByValue
        >>> w = torch.zeros(3)
        >>> ClipByValue(-1.0, 1.0)([(torch.tensor([-5.0, 0.5, 5.0]), w)])[0][0]
        tensor([-1.0000,  0.5000,  1.0000])
    """

    stage = "clip_by_value"

    def __init__(self, clip_value_min: float, clip_value_max: float) -> None:
        self.clip_value_min = check_real("clip_value_min", clip_value_min)
        self.clip_value_max = check_real("clip_value_max", clip_value_max)
        if self.clip_value_min > self.clip_value_max:
            raise ValueError(f"Expected `clip_value_min` <= `clip_value_max`, got "
                             f"{self.clip_value_min!r} > {self.clip_value_max!r}")

    def process(self, batch: Gradients) -> Gradients:
        low, high = self.clip_value_min, self.clip_value_max
        batch.map_present(lambda g, v: clip_by_value(g, low, high))
        return batch

    def _args(self) -> str:
        return f"clip_value_min={self.clip_value_min!r}, clip_value_max={self.clip_value_max!r}"
