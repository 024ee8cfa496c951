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
from pathlib import Path
from typing import Any

import torch

from trainop.interfaces.train.files import write_whole
from trainop.processing._base import SKIP_ACCUMULATING
from trainop.training.optimize_loss import TrainOp
from trainop.training.returnn.updater import Updater

__all__ = ["History", "train_model"]


@dataclass
class History:
    """What ``train_model`` recorded, one entry per micro-step (``global_norm`` is NaN on a
    micro-step that only accumulated: no update, no norm measured; ``accumulating`` marks
    them), and ``epoch_rates``: epoch -> the rate RETURNN's learning-rate control gave it."""

    loss: list[float] = field(default_factory=list)
    learning_rate: list[float] = field(default_factory=list)
    global_norm: list[float] = field(default_factory=list)
    loss_scale: list[float] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    accumulating: list[bool] = field(default_factory=list)
    epoch_rates: dict[int, float] = field(default_factory=dict)
    steps_per_epoch: int = 0
    seconds: float = 0.0

    def write_csv(self, path: Path) -> Path:
        """One row per micro-step (``step`` from 1, ``epoch`` from 1 when the run has epochs,
        else empty), the columns ``loss``, ``learning_rate``, ``global_norm`` (empty on a
        micro-step that only accumulated), ``loss_scale``, ``skipped`` (updates skipped so
        far) and ``accumulating``: the run's record that needs no optional package."""
        rows = ["step,epoch,loss,learning_rate,global_norm,loss_scale,skipped,accumulating"]
        for k in range(len(self.loss)):
            epoch = k // self.steps_per_epoch + 1 if self.steps_per_epoch else ""
            norm = "" if self.accumulating[k] else repr(self.global_norm[k])
            rows.append(f"{k + 1},{epoch},{self.loss[k]!r},{self.learning_rate[k]!r},{norm},"
                        f"{self.loss_scale[k]!r},{self.skipped[k]},{int(self.accumulating[k])}")
        text = "\n".join(rows) + "\n"
        return write_whole(path, lambda partial: partial.write_text(text))

    def summary(self) -> str:
        """One paragraph: steps, the loss of the first and the last step (and the means of the
        first and last five when there are ten or more), the learning rate of the first and
        the last step (and per epoch under RETURNN's control, when the epochs' rates differ),
        skips, loss scale, time."""
        n = len(self.loss)
        if not n:
            return "No steps were run."
        finite = [v for v in self.loss if math.isfinite(v)]
        text = (f"{n} steps in {self.seconds:.1f} s: loss {self.loss[0]:.6g} (step 1) -> "
                f"{self.loss[-1]:.6g} (step {n})")
        if n >= 10:
            head, tail = sum(self.loss[:5]) / 5, sum(self.loss[-5:]) / 5
            text += f", means of the first and last five steps {head:.6g} -> {tail:.6g}"
        if len(finite) < n:
            text += f" ({n - len(finite)} non-finite)"
        lr = self.learning_rate
        text += f"; learning rate {lr[0]:.4g} (step 1) -> {lr[-1]:.4g} (step {n})"
        low, high = min(lr), max(lr)
        if (low, high) != tuple(sorted((lr[0], lr[-1]))):
            text += f", between {low:.4g} and {high:.4g}"
        if len(set(self.epoch_rates.values())) > 1:
            shown = list(self.epoch_rates.items())
            rates = ", ".join(f"{e}: {r:.4g}" for e, r in shown[:6])
            if len(shown) > 6:
                rates += f", ... {shown[-1][0]}: {shown[-1][1]:.4g}"
            text += f" (per epoch, RETURNN's learning-rate control: {rates})"
        accumulated = sum(self.accumulating)
        if accumulated:
            text += f"; {accumulated} micro-step(s) only accumulated"
        text += f"; {self.skipped[-1]} update(s) skipped"
        scales = [s for s in self.loss_scale if not math.isnan(s)]
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
                writer: Any = None, progress: Callable[[int, History], None] | None = None,
                control: Any = None, steps_per_epoch: int | None = None) -> History:
    """One micro-step per batch. ``built``: a ``TrainOp`` whose loss is
    ``lambda x, y: loss_fn(model(x), y)`` or an ``Updater`` of ``model``'s parameters.
    ``writer``: a ``SummaryWriter`` (tags ``train/loss``, ``train/learning_rate``,
    ``train/global_gradient_norm``, ``train/loss_scale``, ``train/skipped_updates``).
    ``control``: with an ``Updater``, RETURNN's ``LearningRateControl``: the run is cut into
    epochs of ``steps_per_epoch`` micro-steps; before epoch ``e`` the Updater gets its rate
    (``control.apply(built, e)``, as RETURNN's engine does), after it the control gets the
    epoch's mean loss as ``train_score`` (what newbob reads when there is no dev score)."""
    if control is not None and (not isinstance(built, Updater) or not steps_per_epoch):
        raise ValueError("Expected `control` with an Updater and `steps_per_epoch` >= 1")
    history = History(steps_per_epoch=steps_per_epoch if control is not None else 0)
    start = time.perf_counter()
    epoch_losses: list[float] = []
    for k, (x, y) in enumerate(batches):
        if control is not None and k % steps_per_epoch == 0:
            epoch = k // steps_per_epoch + 1
            if epoch > 1:
                control.set_epoch_error(epoch - 1, {"train_score": _mean(epoch_losses)})
            history.epoch_rates[epoch] = control.apply(built, epoch)
            epoch_losses = []
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
        accumulating = bool(int(result.skip_reason) & SKIP_ACCUMULATING)
        values = {"loss": _float(loss), "learning_rate": _float(lr),
                  "global_norm": float("nan") if accumulating else _float(result.global_norm),
                  "loss_scale": _float(result.loss_scale)}
        epoch_losses.append(values["loss"])
        for key, value in values.items():
            getattr(history, key).append(value)
        history.skipped.append(int(result.skipped_steps))
        history.accumulating.append(accumulating)
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


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
