"""The PNG dashboard of ``trainop train``: loss, learning rate, global gradient norm, loss scale
and skipped updates over the micro-steps, one panel each (matplotlib, Agg backend).

The gradient norm is drawn on the micro-steps that update only: a micro-step that only
accumulates (``iter_size``, ``accum_grad_multiple_step``) measures no norm, and the panel says
how many there were instead of drawing them as 0. Under RETURNN's learning-rate control the
epochs' boundaries are marked on the learning-rate panel."""

from __future__ import annotations

import math
from pathlib import Path

from trainop.interfaces.train.loop import History

__all__ = ["write_dashboard"]

PANELS = (("loss", "loss", True), ("learning_rate", "learning rate", False),
          ("global_norm", "global gradient norm", True), ("loss_scale", "loss scale", True),
          ("skipped", "skipped updates (total)", False))


def write_dashboard(history: History, path: str | Path, title: str) -> Path:
    """Write the dashboard to ``path`` (PNG); panels without a value (no loss scale) say so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(PANELS), 1, figsize=(7, 2.1 * len(PANELS)), sharex=True)
    for ax, (key, label, log) in zip(axes, PANELS, strict=True):
        values = getattr(history, key)
        points = [(k, v) for k, v in enumerate(values)
                  if not (isinstance(v, float) and math.isnan(v))]
        shown = [v for _, v in points]
        if not shown:
            ax.text(0.5, 0.5, f"no {label} in this recipe", ha="center", va="center",
                    transform=ax.transAxes)
        else:
            ax.plot([k for k, _ in points], shown, linewidth=1.2,
                    marker="." if len(points) < len(values) else None)
            if log and all(v > 0 for v in shown):
                ax.set_yscale("log")
        accumulated = sum(history.accumulating)
        if key == "global_norm" and accumulated:
            ax.text(0.99, 0.95, f"updates only: {accumulated} of {len(values)} micro-steps "
                    f"only accumulated (no norm)", ha="right", va="top", fontsize=7,
                    transform=ax.transAxes)
        if key == "learning_rate" and len(history.epoch_rates) > 1:
            for epoch in list(history.epoch_rates)[1:]:
                ax.axvline((epoch - 1) * history.steps_per_epoch - 0.5, color="grey", alpha=0.4,
                           linewidth=0.8)
            ax.text(0.99, 0.95, "epochs (RETURNN's learning-rate control)", ha="right",
                    va="top", fontsize=7, transform=ax.transAxes)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("micro-step")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
