"""``trainop train`` trains a RETURNN recipe at its own per-epoch rates (``learning_rates``,
then RETURNN's learning-rate control), epoch 1 at epoch 1's rate, shown in the summary; tested
in fresh interpreters (one for the runs of each environment), also where matplotlib,
TensorBoard and TensorFlow cannot be imported (the run writes the rest and says in one line how
to get each)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from cli_in_process import run_cli_batch

import trainop
from trainop.configs import Unresolved

SRC = Path(trainop.__file__).resolve().parents[1]

#: packages that cannot be imported, as after a plain `pip install trainop` without the extras:
#: a stub first on the path whose import raises ModuleNotFoundError (a meta-path finder that
#: raised would also break `importlib.util.find_spec`, which torch calls for these names)
BLOCKED = ("matplotlib", "tensorboard", "tensorflow")


def _blocking_site(site: Path) -> Path:
    for name in BLOCKED:
        (site / name).mkdir(parents=True, exist_ok=True)
        (site / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named {name!r}\", name={name!r})\n")
    return site


LITERAL = """#!rnn.py
# learning_rate unset: RETURNN's default 1.0 is not what epoch 1 trains at
learning_rates = [0.0003, 0.0006, 0.001]
optimizer = {"class": "adam"}
optimizer_epsilon = 1e-8
"""

LINSPACE = """#!rnn.py
import numpy
learning_rate = 0.001
learning_rates = list(numpy.linspace(0.0003, learning_rate, num=3))
optimizer = {"class": "adam"}
optimizer_epsilon = 1e-8
"""


#: name: (recipe file, its text, extra arguments). The runs of each environment share one fresh
#: interpreter (tests/cli_in_process.py's run_cli_batch), the literal one first: TensorFlow's
#: start-up lines, which it checks are not shown, come at TensorFlow's first import.
RUNS = {"literal": ("lrs.config", LITERAL, ()), "linspace": ("linspace.config", LINSPACE, ()),
        "compare_tf": ("lrs.config", LITERAL, ("--compare-tf",))}
ENVIRONMENTS = {False: ("literal", "linspace"), True: ("literal", "linspace", "compare_tf")}


def _train_all(folder: Path, blocked: bool) -> dict[str, tuple[subprocess.CompletedProcess,
                                                                Path]]:
    """Each run of ``ENVIRONMENTS[blocked]``: its output and its ``--out`` folder."""
    path = [str(_blocking_site(folder / "site"))] if blocked else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*path, str(SRC)]))
    argvs, outs = [], []
    for name in ENVIRONMENTS[blocked]:
        file, text, args = RUNS[name]
        (folder / name).mkdir()
        recipe = folder / name / file
        recipe.write_text(text)
        outs.append(folder / name / "run")
        argvs.append(["train", str(recipe), "--out", str(outs[-1]), "--no-progress", "--steps",
                      "6", "--steps-per-epoch", "2", *args])
    done = run_cli_batch(argvs, folder, env)
    return dict(zip(ENVIRONMENTS[blocked], zip(done, outs, strict=True), strict=True))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``trained(blocked)[name]``: the runs of one environment, made at the first ask."""
    made = {}

    def get(blocked: bool):
        if blocked not in made:
            made[blocked] = _train_all(tmp_path_factory.mktemp("epochs"), blocked)
        return made[blocked]
    return get


def _check_epoch_rates(out: subprocess.CompletedProcess, first: float) -> None:
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert "epochs of 2 micro-steps under RETURNN's learning-rate control" in out.stdout
    summary = out.stdout.strip().splitlines()[-1]
    assert f"learning rate {first:.4g} (step 1) -> 0.001 (step 6)" in summary
    assert "per epoch, RETURNN's learning-rate control: 1: 0.0003, 2: 0.00065, 3: 0.001" \
        in summary or "1: 0.0003, 2: 0.0006, 3: 0.001" in summary
    last = float(re.search(r"-> ([0-9.e+-]+) \(step 6\)", summary).group(1))
    assert last < 1.0  # trained at 3e-4..1e-3, not at RETURNN's default 1.0 (loss 50)


@pytest.mark.parametrize("blocked", [False, True], ids=["installed", "no-optional-packages"])
def test_literal_learning_rates_epoch_one_at_epoch_one_rate(trained, blocked):
    out, run = trained(blocked)["literal"]
    _check_epoch_rates(out, 0.0003)
    # the per-step record is written with or without the optional packages
    rows = (run / "history.csv").read_text().splitlines()
    assert rows[0].split(",")[:4] == ["step", "epoch", "loss", "learning_rate"]
    assert [r.split(",")[1] for r in rows[1:]] == ["1", "1", "2", "2", "3", "3"]
    assert [float(r.split(",")[3]) for r in rows[1:]] == pytest.approx(
        [0.0003, 0.0003, 0.0006, 0.0006, 0.001, 0.001], rel=1e-6)  # the float32 rates
    if blocked:
        assert "dashboard: not written: matplotlib is missing (pip install 'trainop[plot]')" \
            in out.stdout
        assert "TensorBoard event files: not written: the tensorboard package is missing " \
               "(pip install 'trainop[tensorboard]')" in out.stdout
        assert not (run / "dashboard.png").exists()
    else:
        assert (run / "dashboard.png").stat().st_size > 10_000
    # TensorFlow (imported by TensorBoard where installed) prints no start-up lines
    assert not re.search(r"^[IW]\d{4} |oneDNN|absl::InitializeLog", out.stderr, re.M)


def test_linspace_warmup_epoch_one_at_epoch_one_rate(tmp_path, trained):
    recipe = tmp_path / "linspace.config"
    recipe.write_text(LINSPACE)
    loaded = trainop.load_recipe(recipe)
    if "learning_rates" in loaded.unresolved or isinstance(
            loaded.options.get("learning_rates"), Unresolved):
        pytest.skip("numpy.linspace is not resolved by this evaluator yet (issue #24, the "
                    "evaluator's part)")
    for blocked in (False, True):
        _check_epoch_rates(trained(blocked)["linspace"][0], 0.0003)


def test_compare_tf_without_tensorflow_is_refused_before_training(trained):
    out, run = trained(True)["compare_tf"]
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == ("trainop train: --compare-tf needs TensorFlow, which cannot be "
                          "imported (No module named 'tensorflow'; pip install "
                          "'trainop[tensorflow]' installs it)\n")
    assert not run.exists()
