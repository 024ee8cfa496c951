"""The PNG dashboard of ``trainop train``: loss, learning rate, global gradient norm, loss scale
and skipped updates over the micro-steps, one panel each (matplotlib, Agg backend)."""

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
    steps = range(len(history.loss))
    for ax, (key, label, log) in zip(axes, PANELS, strict=True):
        values = getattr(history, key)
        shown = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
        if not shown:
            ax.text(0.5, 0.5, f"no {label} in this recipe", ha="center", va="center",
                    transform=ax.transAxes)
        else:
            ax.plot(steps, values, linewidth=1.2)
            if log and all(v > 0 for v in shown):
                ax.set_yscale("log")
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("micro-step")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
