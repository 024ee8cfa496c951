"""Values that are data (``__file__``, ``os.path``, ``"..." % name``, RETURNN's ``config.*``
lookups, ``--set``) and keys that are listed instead of dropped (misspellings, Theano-era
options, legacy flags). RETURNN's own ``Config`` (the installed ``returnn`` package) is the
oracle for the lookups; ``os.path`` and ``%`` are Python's own."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import trainop
from trainop.configs import Text
from trainop.configs.pyconfig import evaluate_python_config
from trainop.configs.returnn_lookups import lookup
from trainop.training.returnn.unknown_options import LegacyFlagWarning, RecipeWarning

SETUP = """#!rnn.py
import os
import numpy
setup_name = os.path.splitext(os.path.basename(__file__))[0]
use_horovod = config.bool("use_horovod", False)
newbob_multi_num_epochs = config.int("newbob_multi_num_epochs", 5)
learning_rate = config.float("lr", 0.0008)
learning_rates = list(numpy.linspace(0.0003, learning_rate, num=3))
optimizer = {"class": "adam"}
learning_rate_file = "data/exp-%s/train-scores.data" % setup_name
model = os.path.join("data", "exp-" + setup_name, "model")
if config.has("beam_size"):
    beam_size = config.int("beam_size", 0)
"""


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    from trainop.__main__ import main

    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_file_and_os_path_are_the_config_path(tmp_path):
    path = _write(tmp_path, "base2.conv2l.specaug.config", SETUP)
    recipe = trainop.load_recipe(path)
    name = os.path.splitext(os.path.basename(path))[0]  # Python's own functions
    assert name == "base2.conv2l.specaug"
    assert recipe.options["learning_rate_file"] == f"data/exp-{name}/train-scores.data"
    assert recipe.pending() == {}
    assert "model" not in recipe.unresolved and "beam_size" not in recipe.unresolved


def test_unset_lookups_give_the_default_and_set_ones_the_value(tmp_path):
    path = _write(tmp_path, "setup.config", SETUP)
    o = trainop.load_recipe(path).options
    assert (o["use_horovod"], o["newbob_multi_num_epochs"], o["learning_rate"]) == (
        False, 5, 0.0008)
    assert o["learning_rates"][0] == 0.0003 and o["learning_rates"][-1] == 0.0008
    typed = trainop.load_recipe(path, config_values={"lr": 0.002, "newbob_multi_num_epochs": 3})
    assert typed.options["learning_rate"] == 0.002 and typed.options["learning_rates"][-1] == 0.002
    assert typed.options["newbob_multi_num_epochs"] == 3
    text = trainop.load_recipe(path, config_values={"lr": Text("0.004"),
                                                    "newbob_multi_num_epochs": Text("4")})
    assert text.options["learning_rate"] == 0.004 and text.options["newbob_multi_num_epochs"] == 4


def _returnn_config(typed: dict, text: dict):
    from returnn.config import Config

    config = Config()
    config.update(typed)
    for key, value in text.items():
        config.add_line(key, value)
    return config


CASES = [("bool", ("x", False)), ("bool", ("t", False)), ("bool", ("yes", True)),
         ("bool", ("missing", True)), ("int", ("n", 0)), ("int", ("i", 1)),
         ("int", ("missing", 9)), ("float", ("f", 0.5)), ("float", ("inf", 0.5)),
         ("float", ("n", 0.5)), ("value", ("l", None)), ("value", ("s", "d")),
         ("value", ("missing", "d")), ("value", ("pair", None)), ("list", ("pair",)),
         ("list", ("l",)), ("list", ("n",)), ("list", ("missing",)), ("has", ("s",)),
         ("has", ("missing",)), ("typed_value", ("n", 3)), ("typed_value", ("t", 3)),
         ("typed_value", ("missing", 3))]


@pytest.mark.parametrize("method,args", CASES)
def test_lookups_answer_as_returnn_config_does(method, args):
    typed = {"x": 1, "n": 7, "f": 2.5, "l": [1, 2], "s": "abc", "none": None}
    text = {"t": "true", "yes": "0", "i": "12", "inf": "inf", "pair": "a,b"}
    expected = getattr(_returnn_config(typed, text), method)(*args)
    given = {**typed, **{k: Text(v) for k, v in text.items()}}
    assert lookup(method, given, list(args), {}) == expected


def test_a_lookup_of_the_wrong_type_stays_code():
    parsed = evaluate_python_config('x = "a"\ny = config.int("x", 0)\n', "c.config")
    assert parsed.values["x"] == "a" and "y" in parsed.unresolved  # RETURNN asserts


def test_set_reaches_lookups_from_the_command_line(tmp_path, capsys):
    path = _write(tmp_path, "setup.config", SETUP)
    status, out, err = _main(capsys, "check-config", path, "--no-plot", "--set", "lr=0.003",
                             "--set", "use_horovod=0")
    assert status == 0, err
    assert "learning_rates" in out and "0.003" in out  # the warm-up now ends at the set lr
    status, out, err = _main(capsys, "check-config", path, "--no-plot", "--set", "lr")
    assert status != 0 and "NAME=VALUE" in err


def test_train_runs_a_file_using_config_at_its_own_epoch_one_rate(tmp_path, capsys):
    path = _write(tmp_path, "setup.config", SETUP)
    status, out, err = _main(capsys, "train", path, "--steps", "2", "--no-progress", "--out",
                             str(tmp_path / "run"))
    assert status == 0, err
    assert "learning rate 0.0003 (step 1)" in out  # learning_rates[0]
    status, out, err = _main(capsys, "train", path, "--steps", "2", "--no-progress", "--out",
                             str(tmp_path / "run2"), "--set", "lr=0.002")
    assert status == 0, err
    assert "learning rate 0.0003 (step 1)" in out


def test_set_supplies_a_pending_option(tmp_path, capsys):
    path = _write(tmp_path, "code.config", "#!rnn.py\noptimizer = {'class': 'adam'}\n"
                  "learning_rates = make_rates()\n")
    status, _, err = _main(capsys, "check-config", path, "--no-plot")
    assert status == 1 and "learning_rates" in err
    assert err.rstrip().endswith("set them with --set learning_rates=VALUE")  # the CLI's way
    status, _, err = _main(capsys, "train", path, "--steps", "1", "--out",
                           str(tmp_path / "run"))
    assert status == 1 and "from the command line: --set learning_rates=VALUE" in err
    status, out, err = _main(capsys, "check-config", path, "--no-plot", "--set",
                             "learning_rates=[0.1, 0.05]")
    assert status == 0, err
    assert "0.05" in out


def test_config_values_only_for_python_configs(tmp_path):
    path = _write(tmp_path, "r.yaml", "format: trainop\noptimizer: {class: adam}\n")
    with pytest.raises(ValueError, match="config_values.*Python config"):
        trainop.load_recipe(path, config_values={"lr": 1})
    with pytest.raises(TypeError, match="config_values"):
        trainop.load_recipe(path, config_values={"not a name": 1})


def test_percent_format_is_bounded():
    # a %(key) ends at its balanced ')', as Python parses it: d's width is 999999999
    parsed = evaluate_python_config('a = "%s-%03d" % ("x", 7)\nb = "%099999d" % 1\n'
                                    'c = "%*d" % (5, 1)\n'
                                    'd = "%((x)s)0999999999d" % {"(x)s": 1}\n'
                                    'e = "%((x)s)05d" % {"(x)s": 1}\n', "c.config")
    assert parsed.values["a"] == "x-007" and parsed.values["e"] == "00001"
    assert set(parsed.unresolved) == {"b", "c", "d"}


def test_percent_format_measures_the_number_not_its_digits():
    # Python: "%.00005f" % 1.0 == '1.00000'; the bound MAX_FIELD = 1000 exactly and one past
    text = ('a = "%.00005f" % 1.0\nb = "%01000d" % 7\nc = "%0001000d" % 7\n'
            'd = "%01001d" % 7\ne = "%.0001001f" % 1.0\nf = "%' + "0" * 5000 + '3d" % 7\n')
    parsed = evaluate_python_config(text, "c.config")
    assert parsed.values["a"] == "1.00000" == "%.00005f" % 1.0  # noqa: UP031 - the oracle
    assert parsed.values["b"] == parsed.values["c"] == "0" * 999 + "7"
    assert parsed.values["f"] == "007"  # zeros before the width are flags
    assert set(parsed.unresolved) == {"d", "e"}


TYPO = "#!rnn.py\noptimizer = {'class': 'adam'}\nlearning_rate = 0.01\n"


@pytest.mark.parametrize("line,key,hint", [
    ("gradient_clip_globl_norm = 1.0", "gradient_clip_globl_norm", "gradient_clip_global_norm"),
    ("update_clip = 5.0", "update_clip", "Theano backend"),
    ("optimizer_epsiloon = 1e-8", "optimizer_epsiloon", "did you mean 'optimizer_epsilon'"),
])
def test_unknown_training_keys_are_listed_everywhere(tmp_path, capsys, line, key, hint):
    path = _write(tmp_path, "typo.config", TYPO + line + "\nnetwork = {}\nnum_epochs = 3\n")
    with pytest.warns(RecipeWarning, match=key):
        recipe = trainop.load_recipe(path)
    assert len(recipe.notes) == 1 and key in recipe.notes[0] and hint in recipe.notes[0]
    status, out, _ = _main(capsys, "check-config", path, "--no-plot")
    assert status == 0 and any(key in x and hint in x for x in out.splitlines()
                               if x.startswith("warning:"))
    status, out, err = _main(capsys, "train", path, "--steps", "1", "--no-progress", "--out",
                             str(tmp_path / "run"))
    assert status == 0 and f"warning: '{key}'" in err.replace("unknown key ", "")
    assert key not in out and out.splitlines()[-1].startswith("1 warning(s) about the recipe")


def test_other_keys_of_a_returnn_config_are_not_flagged(tmp_path):
    path = _write(tmp_path, "ok.config", TYPO + "network = {}\nnum_epochs = 3\n"
                  "batch_size = 5000\nmax_seqs = 20\ntask = 'train'\ntrain = {}\n"
                  "learning_rates = [0.1]\nlearning_rate_control = 'newbob'\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert trainop.load_recipe(path).notes == []


def test_upstream_honoured_option_is_refused(tmp_path):
    path = _write(tmp_path, "det.config", TYPO + "deterministic_train = True\n")
    with pytest.raises(ValueError, match="deterministic_train"):
        trainop.load_recipe(path)
    assert trainop.load_recipe(_write(tmp_path, "d2.config",
                                      TYPO + "deterministic_train = False\n")).notes == []


def test_legacy_flag_warns_visibly(tmp_path, capsys):
    path = _write(tmp_path, "legacy.config", "#!rnn.py\nlearning_rate = 0.01\nadam = True\n")
    assert not issubclass(LegacyFlagWarning, DeprecationWarning)
    run = subprocess.run([sys.executable, "-c", f"import trainop; trainop.load_recipe({path!r})"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": ""},
                         timeout=120)
    assert run.returncode == 0 and "DEPRECATION WARNING" in run.stderr  # default filters
    with pytest.warns(LegacyFlagWarning):
        recipe = trainop.load_recipe(path)
    assert any("adam = True" in n for n in recipe.notes)
    status, out, err = _main(capsys, "train", path, "--steps", "1", "--no-progress", "--out",
                             str(tmp_path / "run"))
    assert status == 0 and "warning: legacy optimizer flag(s) adam = True" in err
    assert (out + err).count("legacy optimizer flag") == 1  # once a run


def test_config_from_globals_and_a_learning_rate_file_of_code(tmp_path):
    path = _write(tmp_path, "hvd.config", TYPO + 'config = globals()["config"]\n'
                  'use_horovod = config.bool("use_horovod", False)\n'
                  "from returnn.util.basic import get_login_username\n"
                  'learning_rate_file = "/tmp/%s/lr" % get_login_username()\n')
    recipe = trainop.load_recipe(path)
    assert recipe.options["use_horovod"] is False
    assert "learning_rate_file" in recipe.unresolved  # the login name is not data
    assert recipe.pending() == {}  # trainop neither reads nor writes the file
    assert trainop.load_recipe(path, config_values={"use_horovod": True}).options[
        "use_horovod"] is True


def test_set_text_ends_in_the_type_of_the_files_own_value():
    # RETURNN re-reads command-line text in the type of the file's value: a str stays text
    parsed = evaluate_python_config('setup = "base"\nn = 3\n', "c.config", config_values={
        "setup": Text("5"), "n": Text("5"), "m": Text("[1, 2]"), "k": Text("x y")})
    assert parsed.values["setup"] == "5" and parsed.values["n"] == 5
    assert parsed.values["m"] == [1, 2] and parsed.values["k"] == "x y"


def test_config_value_prints_what_returnn_prints():
    # RETURNN's Config.value: str() of a typed value, a list joined with list_join_str
    parsed = evaluate_python_config(
        'a = [[1, 2]]\nb = 5\nc = [1, "x"]\n'
        'x = config.value("a", None, 0)\ny = config.value("b", None)\n'
        'z = config.value("c", None, None, "+")\n', "c.config")
    assert (parsed.values["x"], parsed.values["y"], parsed.values["z"]) == ("[1, 2]", "5", "1+x")
