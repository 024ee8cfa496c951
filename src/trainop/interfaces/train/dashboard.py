"""The PNG dashboard of ``trainop train``: loss, learning rate, global gradient norm, loss scale
and skipped updates over the micro-steps, one panel each (matplotlib, Agg backend).

Made to be read:

- a panel with no value at all (the loss scale of a float32 run) is left out;
- the skipped-updates counter has integer ticks from 0;
- the loss scale is on a base-2 log axis labelled ``2^k`` (a constant scale still gets a
  readable axis around its value);
- what a panel needs said (micro-steps that only accumulated and measured no norm; RETURNN's
  epoch boundaries on the learning-rate panel) is the panel's title, above the axes, so it
  covers no curve.
"""

from __future__ import annotations

import math
from pathlib import Path

from trainop.interfaces.train.files import write_whole
from trainop.interfaces.train.loop import History

__all__ = ["PANELS", "dashboard_figure", "panels_with_data", "write_dashboard"]

#: (History field, label, kind): kind ``"log"`` (log axis where every value is > 0),
#: ``"linear"``, ``"log2"`` (the loss scale) or ``"count"`` (an integer counter).
PANELS = (("loss", "loss", "log"), ("learning_rate", "learning rate", "linear"),
          ("global_norm", "global gradient norm", "log"), ("loss_scale", "loss scale", "log2"),
          ("skipped", "skipped updates (total)", "count"))


def _points(values: list) -> list[tuple[int, float]]:
    return [(k, v) for k, v in enumerate(values)
            if not (isinstance(v, float) and math.isnan(v))]


def panels_with_data(history: History) -> list[tuple[str, str, str]]:
    """The ``PANELS`` entries this run has a value for (a float32 run has no loss scale)."""
    return [panel for panel in PANELS if _points(getattr(history, panel[0]))]


def _note(history: History, key: str) -> str | None:
    accumulated = sum(history.accumulating)
    if key == "global_norm" and accumulated:
        return (f"on updates only: {accumulated} of {len(history.accumulating)} micro-steps "
                f"only accumulated (no norm)")
    if key == "learning_rate" and len(history.epoch_rates) > 1:
        return "grey lines: epochs (RETURNN's learning-rate control)"
    return None


def _power_of_two(value: float, _position=None) -> str:
    if value <= 0:
        return ""
    k = math.log2(value)
    return f"$2^{{{round(k)}}}$" if abs(k - round(k)) < 1e-9 else ""


def _log2_axis(ax, shown: list[float]) -> None:
    """Base-2 log axis with ``2^k`` labels at integer exponents spanning the values."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    low = math.floor(math.log2(min(shown))) - (1 if min(shown) == max(shown) else 0)
    high = math.ceil(math.log2(max(shown))) + (1 if min(shown) == max(shown) else 0)
    ax.set_yscale("log", base=2)
    ax.set_ylim(2.0 ** (low - 0.4), 2.0 ** (high + 0.4))  # the curve clear of the frame
    stride = max(1, math.ceil((high - low) / 6))
    ax.yaxis.set_major_locator(FixedLocator([2.0 ** k for k in range(low, high + 1, stride)]))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(_power_of_two))


def dashboard_figure(history: History, title: str):
    """The dashboard as a matplotlib ``Figure`` (see the module doc)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    panels = panels_with_data(history)
    fig = Figure(figsize=(7, 0.6 + 1.9 * max(len(panels), 1)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(len(panels), 1), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (key, label, kind) in zip(axes, panels, strict=False):
        values = getattr(history, key)
        points = _points(values)
        shown = [v for _, v in points]
        ax.plot([k + 1 for k, _ in points], shown, linewidth=1.2,
                marker="." if len(points) < len(values) else None)
        if kind == "log" and all(v > 0 for v in shown):
            ax.set_yscale("log")
        elif kind == "log2" and all(v > 0 for v in shown):
            _log2_axis(ax, shown)
        elif kind == "count":
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            top = max(1, max(shown))
            ax.set_ylim(-0.04 * top, 1.08 * top)  # ticks from 0; a line at 0 stays visible
        note = _note(history, key)
        if note:
            ax.set_title(note, fontsize=7, loc="right")
        if key == "learning_rate" and len(history.epoch_rates) > 1:
            for epoch in list(history.epoch_rates)[1:]:
                ax.axvline((epoch - 1) * history.steps_per_epoch + 0.5, color="grey",
                           alpha=0.4, linewidth=0.8)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("micro-step")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def write_dashboard(history: History, path: str | Path, title: str) -> Path:
    """Write the dashboard to ``path`` (PNG), whole or not at all (``files.write_whole``)."""
    figure = dashboard_figure(history, title)
    return write_whole(path, lambda partial: figure.savefig(partial, dpi=90, format="png"))
