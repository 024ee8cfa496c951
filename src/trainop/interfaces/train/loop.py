"""``train_model``: run a built training object (an OpenSeq2Seq ``TrainOp`` or a RETURNN
``Updater``) over batches and record, per micro-step, the loss, the learning rate, the global
gradient norm, the loss scale and the skipped updates; TensorBoard event files as it goes.

Each value is read on the host once per step for the record (this is a driver, not the
library's step: the step itself reads nothing).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trainop.training.optimize_loss import TrainOp
from trainop.training.returnn.updater import Updater

__all__ = ["History", "train_model"]


@dataclass
class History:
    """What ``train_model`` recorded, one entry per micro-step."""

    loss: list[float] = field(default_factory=list)
    learning_rate: list[float] = field(default_factory=list)
    global_norm: list[float] = field(default_factory=list)
    loss_scale: list[float] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        """One paragraph: steps, loss from first to last, learning-rate range, skips, time."""
        n = len(self.loss)
        if not n:
            return "No steps were run."
        finite = [v for v in self.loss if math.isfinite(v)]
        head = sum(self.loss[:5]) / min(5, n)
        tail = sum(self.loss[-5:]) / min(5, n)
        scales = [s for s in self.loss_scale if not math.isnan(s)]
        text = (f"{n} steps in {self.seconds:.1f} s: loss {head:.4g} -> {tail:.4g} (mean of the "
                f"first and last five steps; {n - len(finite)} non-finite), learning rate "
                f"{min(self.learning_rate):.3g} to {max(self.learning_rate):.3g}, "
                f"{self.skipped[-1]} update(s) skipped")
        if scales:
            text += f", loss scale {scales[0]:.4g} -> {scales[-1]:.4g}"
        return text + "."


def _float(value: Any) -> float:
    if value is None:
        return float("nan")
    return float(value.detach()) if isinstance(value, torch.Tensor) else float(value)


def train_model(built: TrainOp | Updater, model: torch.nn.Module,
                batches: Sequence[tuple[torch.Tensor, torch.Tensor]], *,
                loss_fn: Callable[..., torch.Tensor] = torch.nn.functional.mse_loss,
                writer: Any = None, progress: Callable[[int, History], None] | None = None
                ) -> History:
    """One micro-step per batch. ``built``: a ``TrainOp`` whose loss is
    ``lambda x, y: loss_fn(model(x), y)`` or an ``Updater`` of ``model``'s parameters.
    ``writer``: a ``SummaryWriter`` (tags ``train/loss``, ``train/learning_rate``,
    ``train/global_gradient_norm``, ``train/loss_scale``, ``train/skipped_updates``)."""
    history = History()
    start = time.perf_counter()
    for k, (x, y) in enumerate(batches):
        if isinstance(built, Updater):
            lr = built.get_current_step_learning_rate()
            loss = loss_fn(model(x), y)
            result = built.step(loss)
        elif isinstance(built, TrainOp):
            lr = built.current_learning_rate()
            loss = built(x, y)
            result = built.last_result
        else:
            raise TypeError(f"Expected a TrainOp or an Updater, got {type(built).__name__}")
        values = {"loss": _float(loss), "learning_rate": _float(lr),
                  "global_norm": _float(result.global_norm),
                  "loss_scale": _float(result.loss_scale)}
        for key, value in values.items():
            getattr(history, key).append(value)
        history.skipped.append(int(result.skipped_steps))
        if writer is not None:
            for key, value in values.items():
                if not math.isnan(value):
                    tag = "global_gradient_norm" if key == "global_norm" else key
                    writer.add_scalar(f"train/{tag}", value, k)
            writer.add_scalar("train/skipped_updates", history.skipped[-1], k)
        if progress is not None:
            progress(k, history)
    history.seconds = time.perf_counter() - start
    if writer is not None:
        writer.flush()
    return history
