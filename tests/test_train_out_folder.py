"""``trainop train``'s ``--out``: a refused run (a missing config, a bad ``--set``, a bad
``--tolerance``) moves nothing of the earlier run; a run interrupted while it writes its
dashboard leaves no truncated PNG and no temporary."""

from __future__ import annotations

import pytest

from trainop.__main__ import main

RECIPE = "format: trainop\noptimizer: {class: adam}\nlearning_rate: 0.01\n"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _earlier_run(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "history.csv").write_text("earlier\n")
    return out


@pytest.mark.parametrize("argv,reason", [
    (["missing.yaml"], "No such file"),
    (["r.config", "--set", "learning_rate=="], "invalid recipe"),
    (["r.yaml", "--compare-tf", "--tolerance", "nan"],
     "expected --tolerance to be a finite number > 0, got nan"),
    (["r.yaml", "--compare-tf", "--tolerance", "0"],
     "expected --tolerance to be a finite number > 0, got 0.0"),
    (["r.yaml", "--compare-tf", "--tolerance=-inf"], "finite number > 0, got -inf"),
])
def test_a_refused_run_moves_nothing(tmp_path, capsys, argv, reason):
    out = _earlier_run(tmp_path)
    (tmp_path / "r.yaml").write_text(RECIPE)
    (tmp_path / "r.config").write_text("#!rnn.py\noptimizer = {'class': 'adam'}\n"
                                       "learning_rate = config.float('learning_rate', 0.1)\n")
    argv = [str(tmp_path / argv[0]), *argv[1:]]
    status, stdout, err = _run(capsys, "train", *argv, "--out", str(out), "--steps", "1",
                               "--no-progress")
    assert status == 1 and reason in err and err.count("\n") == 1, err
    assert sorted(p.name for p in out.iterdir()) == ["history.csv"]
    assert (out / "history.csv").read_text() == "earlier\n"


def test_an_interrupted_dashboard_leaves_no_partial_png(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def interrupted(self, path, **kwargs):  # Ctrl-C half way through the PNG
        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)
    out = _earlier_run(tmp_path)
    (tmp_path / "r.yaml").write_text(RECIPE)
    with pytest.raises(KeyboardInterrupt):
        main(["train", str(tmp_path / "r.yaml"), "--out", str(out), "--steps", "2",
              "--no-progress"])
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == ["history.csv", "previous", "tensorboard"] \
        or sorted(p.name for p in out.iterdir()) == ["history.csv", "previous"]
    assert (out / "history.csv").read_text().startswith("step,epoch,loss")
    assert (out / "previous" / "1" / "history.csv").read_text() == "earlier\n"
