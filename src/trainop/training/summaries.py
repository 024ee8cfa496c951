"""Training summaries as TensorBoard event files, read from the device only when written.

OpenSeq2Seq's ``OPTIMIZER_SUMMARIES`` and tag names (spec: ``learning_rate``,
``global_gradient_norm``, ``global_clipped_gradient_norm``, ``gradients/<name>``,
``gradient_norm/<name>``, ``variables/<name>``, ``variable_norm/<name>``,
``larc_clip_on/<name>``, ``larc_grad_update/<name>``, ``larc_final_lr/<name>``,
``loss_scale``), plus ``train_loss``. ``SummaryLog`` collects values as device tensors for one
summary step and writes them in one go (``torch.utils.tensorboard``; the ``tensorboard``
package is an optional extra).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from trainop.contract.validation import describe

__all__ = ["DEFAULT_SUMMARIES", "OPTIMIZER_SUMMARIES", "SummaryLog", "check_summaries",
           "open_writer"]

OPTIMIZER_SUMMARIES = ["learning_rate", "gradients", "gradient_norm", "global_gradient_norm",
                       "variables", "variable_norm", "larc_summaries", "loss_scale"]
"""The summaries ``optimize_loss(summaries=...)`` can write (OpenSeq2Seq's names)."""
DEFAULT_SUMMARIES = ["learning_rate", "global_gradient_norm", "loss_scale"]
"""OpenSeq2Seq's default summaries (``summaries=None``)."""


def check_summaries(summaries: Any) -> list[str]:
    """``None`` -> OpenSeq2Seq's default list; any name outside ``OPTIMIZER_SUMMARIES`` raises."""
    if summaries is None:
        return list(DEFAULT_SUMMARIES)
    if isinstance(summaries, str) or not isinstance(summaries, list | tuple):
        raise TypeError(f"Expected `summaries` to be a list of names from "
                        f"{OPTIMIZER_SUMMARIES} or None, got {describe(summaries)}")
    for i, name in enumerate(summaries):
        if name not in OPTIMIZER_SUMMARIES:
            raise ValueError(f"Expected `summaries[{i}]` to be one of {OPTIMIZER_SUMMARIES}, got "
                             f"{name!r}")
    return list(summaries)


def open_writer(summary_writer: Any):
    """A ``SummaryWriter`` from a writer (returned as is), a log directory, or ``None``."""
    if summary_writer is None or hasattr(summary_writer, "add_scalar"):
        return summary_writer
    if isinstance(summary_writer, str | os.PathLike):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # tensorboard missing
            raise ValueError(f"Expected the `tensorboard` package for `summary_writer` "
                             f"(pip install 'trainop[tensorboard]'), got {exc}") from None
        return SummaryWriter(os.fspath(summary_writer))
    raise TypeError(f"Expected `summary_writer` to be a SummaryWriter, a log directory or None, "
                    f"got {describe(summary_writer)}")


class SummaryLog:
    """Scalars and histograms of one summary step, kept on the device until ``write``."""

    def __init__(self) -> None:
        self.scalars: list[tuple[str, torch.Tensor | float]] = []
        self.histograms: list[tuple[str, torch.Tensor]] = []

    def scalar(self, tag: str, value: torch.Tensor | float | None) -> None:
        if value is not None:
            self.scalars.append((tag, value.detach() if isinstance(value, torch.Tensor)
                                 else value))

    def histogram(self, tag: str, values: torch.Tensor) -> None:
        self.histograms.append((tag, values.detach()))

    def write(self, writer, step: int) -> None:
        """Read every value (the only host reads of a summary step) and write them."""
        for tag, value in self.scalars:
            writer.add_scalar(tag, float(value), step)
        for tag, values in self.histograms:
            writer.add_histogram(tag, values.to(torch.float32).cpu(), step)
        writer.flush()
