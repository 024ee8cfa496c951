"""``scripts/recipe_corpus.py``: ``--train`` (``trainop train`` in the worker, through the
command's entry point) and ``--replay-coverage`` (the replay plan of each built recipe), on the
project's own example recipes and small recipes written here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus():
    spec = importlib.util.spec_from_file_location("recipe_corpus",
                                                  ROOT / "scripts" / "recipe_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NOISY = """#!rnn.py
task = "train"
learning_rate = 0.01
optimizer = {"class": "adam"}
gradient_noise = 0.3
"""

# Loads (every option is data) but does not build in `trainop train`: an epoch of the command's
# 10 micro-steps holds no update of 16 accumulated micro-steps.
LONG_ITER = """import tensorflow as tf
from open_seq2seq.models import Speech2Text
base_model = Speech2Text
base_params = {"num_epochs": 3, "iter_size": 16, "optimizer": "Momentum",
               "optimizer_params": {"momentum": 0.9}, "lr_policy": tf.train.cosine_decay,
               "lr_policy_params": {"learning_rate": 0.01}, "dtype": tf.float32}
"""


@pytest.fixture(scope="module")
def results(corpus, tmp_path_factory):
    folder = tmp_path_factory.mktemp("recipes")
    (folder / "noisy.config").write_text(NOISY)
    (folder / "long_iter.py").write_text(LONG_ITER)
    out = folder / "results.json"
    files = [ROOT / "examples" / "returnn_lstm.config",
             ROOT / "examples" / "openseq2seq_transformer.py",
             ROOT / "tests" / "recipes" / "dynamic_lr.config", folder]
    assert corpus.main([*map(str, files), "--no-check-config", "--train", "--replay-coverage",
                        "--json", str(out)]) == 0
    return {Path(k).name: v for k, v in json.loads(out.read_text()).items()}


def test_train_runs_in_the_worker_on_every_resolved_recipe(results):
    statuses = {name: r["load"]["status"] for name, r in results.items()}
    assert statuses == {"returnn_lstm.config": "resolved", "long_iter.py": "resolved",
                        "openseq2seq_transformer.py": "resolved", "noisy.config": "resolved",
                        "dynamic_lr.config": "needs code"}
    assert "train" not in results["dynamic_lr.config"]
    for name in ("returnn_lstm.config", "openseq2seq_transformer.py", "noisy.config"):
        train = results[name]["train"]
        assert (train["status"], train["traceback"]) == (0, False), (name, train)
    # the recipe's error: one line, exit status 1, no traceback
    bad = results["long_iter.py"]["train"]
    assert (bad["status"], bad["traceback"]) == (1, False)
    assert "--steps-per-epoch >= iter_size 16" in bad["stderr"]


def test_replay_coverage_by_plan_and_reason(results):
    replay = {name: r.get("replay") for name, r in results.items()}
    assert replay["returnn_lstm.config"] == {"status": "replayable",
                                             "plan": "returnn AdamOptimizer"}
    assert replay["openseq2seq_transformer.py"]["status"] == "replayable"
    assert replay["noisy.config"]["status"] == "refused"
    assert "gradient_noise" in replay["noisy.config"]["reason"]
    assert replay["long_iter.py"]["status"] == "not built"
    assert "--steps-per-epoch >= iter_size 16" in replay["long_iter.py"]["reason"]
    assert replay["dynamic_lr.config"] is None  # needs code: not built, not counted


def test_table_reports_train_runs_and_coverage(corpus, results):
    table = corpus.tabulate(results)
    assert "train: 4 runs, exit status {0: 3, 1: 1}, tracebacks 0" in table
    assert ("replay coverage (--compare-tf) of the 4 resolved recipes: 2 of the 3 that build "
            "are replayable (67%), 1 refused, 1 not built, 0 crashes") in table
    assert "crashes and tracebacks" not in table


def test_in_process_exit_status_and_traceback(corpus, tmp_path, monkeypatch):
    # argparse's own exit (an unknown subcommand): SystemExit 2, no traceback
    assert corpus._in_process(["no-such-command"], str(tmp_path))["status"] == 2
    import trainop.__main__

    def broken(argv):
        raise RuntimeError("boom")

    monkeypatch.setattr(trainop.__main__, "main", broken)
    result = corpus._in_process(["train", "x"], str(tmp_path))
    assert (result["status"], result["traceback"]) == (1, True)
    assert result["stderr"] == "RuntimeError: boom"


def test_a_name_the_file_never_defines_counts_as_failing_upstream(corpus, tmp_path):
    """A config whose training option uses a name it never defines stops upstream with a
    NameError (Python runs the file for RETURNN): failing, not needing code; a config that
    needs code (a ``def dynamic_learning_rate``) still counts as needing code."""
    import trainop

    broken = tmp_path / "broken.config"
    broken.write_text('#!rnn.py\noptimizer = {"class": "adam"}\n'
                      'newbob_multi_num_epochs = train_epoch_split\n')
    got = corpus._load_one(trainop, str(broken))
    assert got["status"] == "failing" and got["error"] == "NameError"
    assert "undefined name 'train_epoch_split'" in got["message"]
    code = tmp_path / "code.config"
    code.write_text('#!rnn.py\noptimizer = {"class": "adam"}\nlearning_rate = 0.1\n'
                    'def dynamic_learning_rate(*, global_train_step, learning_rate, **_):\n'
                    '    return learning_rate / (1 + global_train_step)\n')
    assert corpus._load_one(trainop, str(code))["status"] == "needs code"
