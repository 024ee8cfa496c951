"""``check-config`` refuses what ``train`` refuses, with the same message (#47 C2: OpenSeq2Seq
counts beyond the int64 step counter, from the file or ``--set``), and a dotted ``--set`` of an
option that is not a dict names the option and why (#47 C3: ``backend.x=1`` raised
"unhashable type: 'dict'", other options took the dict silently)."""

from __future__ import annotations

import pytest

from trainop.__main__ import main

OS2S = """from open_seq2seq.models import Speech2Text
base_params = {"optimizer": "Adam", "optimizer_params": {"beta1": 0.9},
               "lr_policy": "poly_decay", "lr_policy_params": {"learning_rate": 0.01,
               "power": 2.0}, "max_steps": 100, "batch_size_per_gpu": 32, "num_gpus": 1,
               "use_horovod": False, "logdir": "x", "data_layer_params": {}%s}
"""
RETURNN = "#!rnn.py\noptimizer = {'class': 'adam', 'epsilon': 1e-8}\nlearning_rate = 0.01\n"
COUNTS = ["iter_size", "max_steps", "num_epochs", "save_summaries_steps"]
TOO_LARGE = [2**63, 2**63 + 1, 10**30, 2**100]


def _run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _config(tmp_path, key=None, value=None):
    path = tmp_path / "o.py"
    extra = "" if key is None else f', "{key}": {value}'
    path.write_text(OS2S.replace('"max_steps": 100, ', "") % extra if key == "max_steps"
                    else OS2S % extra)
    return path


def _both_refuse(tmp_path, capsys, path, given, wanted):
    """``check-config`` and ``train`` both refuse ``path`` with ``given`` (``--set`` items):
    exit 1, nothing on stdout, one line on stderr naming the recipe and ending in ``wanted``,
    no run folder written."""
    for command in ("check-config", "train"):
        extra = ["--out", str(tmp_path / "run"), "--steps", "1", "--no-progress"] \
            if command == "train" else []
        status, out, err = _run(capsys, command, str(path), *given, *extra)
        assert (status, out) == (1, ""), (command, err)
        assert err.startswith(f"trainop {command}: invalid recipe {path}: ")
        assert err.endswith(wanted) and err.count("\n") == 1, (command, err)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", TOO_LARGE, ids=["2**63", "2**63+1", "10**30", "2**100"])
@pytest.mark.parametrize("key", COUNTS)
@pytest.mark.parametrize("source", ["file", "set"])
def test_counts_beyond_int64_are_refused_by_both(tmp_path, capsys, key, value, source):
    path = _config(tmp_path, key, value) if source == "file" else _config(tmp_path)
    given = ["--set", f"{key}={value}"] if source == "set" else []
    _both_refuse(tmp_path, capsys, path, given,
                 f"Expected `{key}` in [1, 2**63 - 1], got {value}\n")


@pytest.mark.parametrize("key", COUNTS)
def test_the_largest_count_is_taken_by_check_config(tmp_path, capsys, key):
    """2**63 - 1 is inside the bound: the schedule table spans it (its rows in integers)."""
    status, out, err = _run(capsys, "check-config", str(_config(tmp_path)), "--set",
                            f"{key}={2**63 - 1}")
    assert status == 0, err
    if key == "max_steps":
        assert f"  {2**63 - 1:>8d}  " in out  # the last row of the table


def test_the_largest_iter_size_is_taken_by_train(tmp_path, capsys):
    status, _, err = _run(capsys, "train", str(_config(tmp_path)), "--set",
                          f"iter_size={2**63 - 1}", "--out", str(tmp_path / "run"), "--steps",
                          "1", "--no-progress")
    assert status == 0, err


# options that are not dicts, unset in the file: a dotted --set of one is refused
RETURNN_SCALARS = ["backend", "debug_grad_summaries", "use_horovod", "nadam", "rmsprop",
                   "gradient_nan_inf_filter", "learning_rate_decay", "min_learning_rate",
                   "horovod_reduce_type", "optimizer_epsilon"]
OS2S_SCALARS = ["loss_scaling", "max_grad_norm", "dtype", "freeze_variables_regex",
                "regularizer", "summaries"]


@pytest.mark.parametrize(("file", "key"), [("r.config", k) for k in RETURNN_SCALARS]
                         + [("o.py", k) for k in OS2S_SCALARS])
@pytest.mark.parametrize("sub", ["x", "class"])
def test_a_dotted_set_of_an_option_that_is_not_a_dict(tmp_path, capsys, file, key, sub):
    (tmp_path / "r.config").write_text(RETURNN)
    _config(tmp_path)
    _both_refuse(tmp_path, capsys, tmp_path / file, ["--set", f"{key}.{sub}=1"],
                 f"Expected `{key}` to be a dict to override '{key}.{sub}', got an option that "
                 f"is not a dict (unset here); set it whole: {key}=VALUE\n")


# options the file sets to a value that is not a dict: the refusal names the value it found
SET_SCALARS = [("r.config", "learning_rate", "0.01 (float)"),
               ("o.py", "lr_policy", "'poly_decay' (str)"),
               ("o.py", "max_steps", "100 (int)"),
               ("o.py", "optimizer", "'Adam' (str)")]


@pytest.mark.parametrize(("file", "key", "shown"), SET_SCALARS)
def test_a_dotted_set_of_an_option_set_to_a_non_dict(tmp_path, capsys, file, key, shown):
    (tmp_path / "r.config").write_text(RETURNN)
    _config(tmp_path)
    _both_refuse(tmp_path, capsys, tmp_path / file, ["--set", f"{key}.x=1"],
                 f"Expected `{key}` to be a dict to override '{key}.x', got {shown}\n")


@pytest.mark.parametrize(("file", "setting", "shown"), [
    ("o.py", "larc_params.larc_eta=0.002", "larc_params.larc_eta = 0.002"),
    ("o.py", "optimizer_params.beta2=0.99", "optimizer_params.beta2 = 0.99"),
    ("r.config", "optimizer.epsilon=0.001", "optimizer.epsilon = 0.001"),
])
def test_a_dotted_set_of_a_dict_option_still_starts_or_changes_it(tmp_path, capsys, file,
                                                                  setting, shown):
    (tmp_path / "r.config").write_text(RETURNN)
    _config(tmp_path)
    status, out, err = _run(capsys, "check-config", str(tmp_path / file), "--set", setting)
    assert status == 0, err
    assert f"  --set {setting}: {shown}" in out.splitlines()
