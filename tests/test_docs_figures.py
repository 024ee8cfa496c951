"""The site's benchmark charts (scripts/docs/figures.py), drawn from BENCHMARKS.md's tables:
labels broken between words only, the legend clear of every bar, trainop in one colour in
every chart."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "docs"))
pytest.importorskip("matplotlib")
import figures  # noqa: E402

TEXT = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
CHARTS = {"headline": figures.headline_chart(TEXT), "train step": figures.train_step_chart(TEXT)}


@pytest.mark.parametrize("chart", list(CHARTS))
def test_labels_break_between_words_only(chart):
    _, labels, *_ = CHARTS[chart]
    fig = figures.bar_figure(*CHARTS[chart])
    shown = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(shown) == len(labels)
    for label, text in zip(labels, shown, strict=True):
        assert text.split() == label.split(), (label, text)  # every word whole, none cut


@pytest.mark.parametrize("chart", list(CHARTS))
def test_the_legend_covers_no_bar(chart):
    fig = figures.bar_figure(*CHARTS[chart])
    renderer = fig.canvas.get_renderer()
    legend = fig.axes[0].get_legend().get_window_extent(renderer)
    for bar in fig.axes[0].patches:
        assert not legend.overlaps(bar.get_window_extent(renderer)), chart
    assert legend.y1 <= fig.axes[0].get_window_extent(renderer).y0  # under the plot


def test_trainop_has_one_colour_in_every_chart():
    colours = {}
    for args in CHARTS.values():
        ax = figures.bar_figure(*args).axes[0]
        for container in ax.containers:
            label = container.get_label()
            key = "trainop" if label.startswith("trainop") else "peer"
            colours.setdefault(key, set()).update(
                tuple(round(c, 3) for c in bar.get_facecolor()) for bar in container)
    assert len(colours["trainop"]) == 1 and len(colours["peer"]) == 1
    assert colours["trainop"] != colours["peer"]
