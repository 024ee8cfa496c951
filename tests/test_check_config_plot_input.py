"""``check-config --plot`` never writes over its input (#47 L3: ``--plot r.config`` wrote the
PNG over the recipe and exited 0): the recipe, by any spelling or link, is refused in one line
and left as it was."""

from __future__ import annotations

import os

import pytest

from trainop.__main__ import main

RETURNN = "#!rnn.py\noptimizer = {'class': 'adam'}\nlearning_rate = 0.01\n" \
          "learning_rates = [0.01, 0.005]\n"

# how the plot's path names the recipe (relative to the folder; "{r}" is the recipe's name)
SPELLINGS = ["{r}", "./{r}", "sub/../{r}", "{abs}", "link", "hard"]


@pytest.mark.parametrize("name", ["r.config", "recipe.py", "x.lr.png"])
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_plot_over_the_recipe_is_refused(tmp_path, capsys, monkeypatch, name, spelling):
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / name
    recipe.write_text(RETURNN)
    (tmp_path / "sub").mkdir()
    os.symlink(recipe, tmp_path / "link")
    os.link(recipe, tmp_path / "hard")
    plot = spelling.format(r=name, abs=str(recipe))
    status = main(["check-config", name, "--plot", plot])
    out, err = capsys.readouterr()
    assert (status, out) == (1, "")
    assert err == (f"trainop check-config: the plot would overwrite the recipe {name} "
                   f"(--plot {plot}); nothing written, give the plot another name\n")
    assert recipe.read_text() == RETURNN


def test_a_plot_elsewhere_is_written(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.config").write_text(RETURNN)
    assert main(["check-config", "r.config", "--plot", "r.png"]) == 0
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "r.config").read_text() == RETURNN
