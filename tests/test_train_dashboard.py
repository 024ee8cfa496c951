"""``trainop train``'s dashboard can be read (no empty panel, integer counters from 0, the loss
scale labelled 2^k, notes off the curves), a second run into the same ``--out`` starts clean,
and the progress bar's package is a dependency (one line where it is missing)."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

from trainop.__main__ import main
from trainop.interfaces.train.loop import History

pytest.importorskip("matplotlib")

from trainop.interfaces.train.dashboard import dashboard_figure  # noqa: E402

N = 12


def _history(scale=None, skipped=None, accumulating=None, epochs=False) -> History:
    h = History(loss=[0.5 - 0.01 * k for k in range(N)],
                learning_rate=[0.01] * (N // 2) + [0.005] * (N // 2),
                global_norm=[1.0 + k for k in range(N)],
                loss_scale=scale or [math.nan] * N, skipped=skipped or [0] * N,
                accumulating=accumulating or [False] * N)
    if epochs:
        h.epoch_rates, h.steps_per_epoch = {1: 0.01, 2: 0.005}, N // 2
    return h


def _axes(history):
    fig = dashboard_figure(history, "t")
    fig.canvas.draw()
    return {ax.get_ylabel(): ax for ax in fig.axes}


def _visible_ticks(ax) -> list[float]:
    low, high = ax.get_ylim()
    return [t for t in ax.get_yticks() if low <= t <= high]


def test_a_float32_run_has_no_loss_scale_panel_and_skips_count_from_zero():
    axes = _axes(_history())
    assert list(axes) == ["loss", "learning rate", "global gradient norm",
                          "skipped updates (total)"]
    ticks = _visible_ticks(axes["skipped updates (total)"])
    assert min(ticks) == 0 and all(t == int(t) and t >= 0 for t in ticks)


def test_mixed_precision_counters_are_integers_and_the_scale_reads_as_powers_of_two():
    scale = [2.0 ** (24 - min(k, 9)) for k in range(N)]
    skipped = [min(k + 1, 9) for k in range(N)]
    axes = _axes(_history(scale=scale, skipped=skipped))
    assert len(axes) == 5
    ticks = _visible_ticks(axes["skipped updates (total)"])
    assert min(ticks) == 0 and max(ticks) >= 8 and all(t == int(t) for t in ticks)
    ax = axes["loss scale"]
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and all(re.fullmatch(r"\$2\^\{\d+\}\$", s) for s in labels)
    low, high = ax.get_ylim()
    assert low < 2.0 ** 15 and high > 2.0 ** 24  # the curve clear of the frame
    constant = _axes(_history(scale=[512.0] * N))["loss scale"]  # a static scale
    assert "$2^{9}$" in [t.get_text() for t in constant.get_yticklabels()]


def test_notes_are_titles_above_the_axes_never_text_on_the_curves():
    axes = _axes(_history(accumulating=[k % 2 == 0 for k in range(N)], epochs=True))
    assert all(not ax.texts for ax in axes.values())
    assert "6 of 12 micro-steps only accumulated" in axes["global gradient norm"].get_title(
        "right")
    assert "epochs" in axes["learning rate"].get_title("right")


RECIPE = ('base_params = {"max_steps": 4, "optimizer": "Momentum", "optimizer_params": '
          '{"momentum": 0.9}, "lr_policy": "fixed_lr", "lr_policy_params": '
          '{"learning_rate": 0.01}}\n')


def test_a_second_run_into_the_same_out_starts_clean(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    recipe, out = tmp_path / "r.py", tmp_path / "run"
    recipe.write_text(RECIPE)
    args = ["train", str(recipe), "--out", str(out), "--steps", "3", "--no-progress"]
    assert main(args) == 0
    first = (out / "history.csv").read_text()
    capsys.readouterr()
    assert main([*args[:-2], "4", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err == (f"trainop train: --out {out} held an earlier run: its files are now in "
                   f"{out / 'previous' / '1'}\n")
    assert (out / "previous" / "1" / "history.csv").read_text() == first
    assert len((out / "history.csv").read_text().splitlines()) == 5  # header + 4 steps
    assert len(list((out / "tensorboard").iterdir())) == 1  # one run's events
    assert len(list((out / "previous" / "1" / "tensorboard").iterdir())) == 1


def test_tqdm_is_a_dependency_and_its_absence_is_one_line(monkeypatch, capsys):
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    line = [x for x in pyproject.splitlines() if x.startswith("dependencies = ")][0]
    assert '"tqdm"' in line
    from trainop.interfaces.train.cli import _progress

    monkeypatch.setitem(sys.modules, "tqdm", None)
    assert _progress(3, True) == (None, None)
    assert capsys.readouterr().err == ("trainop train: no progress bar: the tqdm package is "
                                       "missing (pip install tqdm)\n")
