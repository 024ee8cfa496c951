"""Pins of recipe values and ``--set`` (issue #40, round-5 audit): every form of command-line
text RETURNN's own ``Config`` accepts (empty, leading and trailing commas, ``=`` in the value)
answered as ``Config.add_line`` and its lookups answer it; dotted ``--set`` options of an
OpenSeq2Seq recipe, given as data or computed with code, with the numbers of OpenSeq2Seq's
``exp_decay`` (``lr * decay_rate ** ((step - begin_decay_at) / decay_steps)``)."""

from __future__ import annotations

import re

import pytest
import torch
from admitted import admitted

import trainop
from trainop.configs import Text
from trainop.configs.returnn_lookups import LookupError_, lookup
from trainop.interfaces.recipes.settings import load_with_settings, parse_settings

TEXTS = ["", ",a", "a,", ",", "a,,b", "1,2", ",1", "true,0", "a=b", "0"]
CALLS = [("value", ("k", "d")), ("value", ("k", "d", 0)), ("value", ("k", "d", None, "+")),
         ("list", ("k",)), ("has", ("k",)), ("typed_value", ("k", 3)), ("int", ("k", 5)),
         ("bool", ("k", True)), ("float", ("k", 0.5))]


def _returnn(method, text, args):
    from returnn.config import Config

    config = Config()
    config.add_line("k", text)
    try:
        return "value", getattr(config, method)(*args)
    except Exception as error:  # noqa: BLE001 - RETURNN's own failure: not data
        return "fails", type(error).__name__


def _plain(value):
    """The value with its type (``Text`` is a ``str``), lists element by element."""
    if isinstance(value, list | tuple):
        return type(value).__name__, [_plain(v) for v in value]
    return ("str", str(value)) if isinstance(value, str) else (type(value).__name__, value)


def _ours(method, text, args):
    try:
        return "value", lookup(method, {"k": Text(text)}, list(args), {})
    except LookupError_ as error:
        return "fails", str(error)


@pytest.mark.parametrize("method, args", CALLS, ids=[f"{m}{len(a)}" for m, a in CALLS])
@pytest.mark.parametrize("text", TEXTS, ids=repr)
def test_command_line_text_is_read_as_returnns_config_reads_it(method, args, text):
    pytest.importorskip("returnn.config")
    theirs, ours = _returnn(method, text, args), _ours(method, text, args)
    assert ours[0] == theirs[0], (ours, theirs)
    if theirs[0] == "value":
        assert _plain(ours[1]) == _plain(theirs[1])


def test_set_splits_name_and_value_at_the_first_equals_sign(tmp_path):
    assert admitted(parse_settings, ["tag=a=b", "x=={'k': 1}"]) == {"tag": "a=b", "x": "={'k': 1}"}
    path = tmp_path / "r.config"
    path.write_text('#!rnn.py\noptimizer = {"class": "adam"}\n'
                    'learning_rate_file = "lr-%s.txt" % config.value("tag", "none")\n')
    recipe = admitted(load_with_settings, str(path), admitted(parse_settings, ["tag=a=b"]))
    assert recipe.options["learning_rate_file"] == "lr-a=b.txt"


OS2S = """
from open_seq2seq.optimizers.lr_policies import exp_decay
base_params = {{
    "max_steps": 10,
    "optimizer": "Adam",
    "optimizer_params": {{"beta1": 0.7, "beta2": 0.99, "epsilon": 1e-06}},
    "lr_policy": exp_decay,
    "lr_policy_params": {{"learning_rate": 0.01, "decay_steps": {steps}, "decay_rate": 0.5,
                         "begin_decay_at": 0, "use_staircase_decay": False}},
}}
"""


def _check_config(tmp_path, capsys, text, *sets):
    from trainop.__main__ import main

    path = tmp_path / "recipe.py"
    path.write_text(text)
    status = main(["check-config", str(path), "--no-plot",
                   *[x for s in sets for x in ("--set", s)]])
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.mark.parametrize("steps", ["compute_steps()", "40"], ids=["code", "data"])
def test_dotted_set_of_an_openseq2seq_recipe(tmp_path, capsys, steps):
    status, out, err = _check_config(tmp_path, capsys, OS2S.format(steps=steps),
                                     "lr_policy_params.decay_steps=4", "optimizer_params.beta1=0.8")
    assert status == 0, out + err
    # the set beta1 beside the file's other optimizer_params
    assert "beta1=0.8, beta2=0.99, epsilon=1e-06" in out
    # exp_decay with decay_steps 4: step 4 is one halving, step 8 two
    rates = {int(s): float(r) for s, r in re.findall(r"^\s+(\d+)\s+([0-9.e-]+)$", out, re.M)}
    assert rates[4] == pytest.approx(0.01 * 0.5 ** (4 / 4), rel=1e-6)
    assert rates[8] == pytest.approx(0.01 * 0.5 ** (8 / 4), rel=1e-6)


def test_dotted_overrides_of_build_keep_the_rest_of_the_option(tmp_path):
    path = tmp_path / "recipe.py"
    path.write_text(OS2S.format(steps="40"))
    recipe = trainop.load_recipe(str(path))
    options = admitted(recipe._with, {"optimizer_params.beta1": 0.8})
    assert options["optimizer_params"] == {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-06}
    with pytest.raises(ValueError, match=r"Unknown option 'optimizer_parms.beta1'"):
        recipe._with({"optimizer_parms.beta1": 0.8})


@pytest.mark.parametrize("value", [0, -5, 2.5, True])
def test_openseq2seq_run_lengths_must_be_positive_ints(tmp_path, capsys, value):
    # OpenSeq2Seq's Model.check_params: max_steps, num_epochs, save_summaries_steps are ints
    text = OS2S.format(steps="40").replace('"max_steps": 10,',
                                           f'"max_steps": 10, "save_summaries_steps": {value!r},')
    status, out, err = _check_config(tmp_path, capsys, text)
    assert status != 0 and "save_summaries_steps" in err, out + err
    ok = OS2S.format(steps="40").replace('"max_steps": 10,',
                                         '"max_steps": 10, "save_summaries_steps": 50,')
    assert _check_config(tmp_path, capsys, ok)[0] == 0


def test_set_supplies_a_whole_option_the_file_computes_with_code(tmp_path, capsys):
    text = "#!rnn.py\nlearning_rate = 0.01\noptimizer = make_optimizer()\n"
    status, _, err = _check_config(tmp_path, capsys, text)
    assert status != 0 and "optimizer" in err
    status, out, err = _check_config(tmp_path, capsys, text,
                                     "optimizer={'class': 'adam', 'epsilon': 0.5}")
    assert status == 0, out + err
    assert "epsilon=0.5" in out


def test_build_overrides_supply_a_whole_option_the_file_computes_with_code(tmp_path):
    # the documented Python way (build(overrides=...)) to give what `optimizer = f()` needs:
    # a dict for the whole option is the option's value, nothing of it stays pending
    path = tmp_path / "r.config"
    path.write_text("#!rnn.py\nlearning_rate = 0.5\noptimizer = make_optimizer()\n")
    recipe = trainop.load_recipe(str(path))
    assert set(recipe.pending()) == {"optimizer"}
    supplied = {"optimizer": {"class": "adam", "epsilon": 0.5}}
    assert recipe.pending(supplied) == {}
    w = torch.nn.Parameter(torch.tensor([1.0]))
    updater = admitted(recipe.build, torch.nn.ParameterList([w]), overrides=supplied)
    w.grad = torch.tensor([2.0])
    updater.step()
    # TF1 Adam's first step (epsilon outside the bias correction): lr sqrt(1 - b2) / (1 - b1)
    # * m / (sqrt(v) + eps) with m = (1 - b1) g, v = (1 - b2) g^2, b1 = 0.9, b2 = 0.999
    root = (1 - 0.999) ** 0.5 * 2.0
    assert float(w) == pytest.approx(1.0 - 0.5 * root / (root + 0.5), rel=1e-6)


def test_set_of_a_name_the_file_cannot_load_without_supplies_what_it_needs(tmp_path):
    from returnn.config import Config

    path = tmp_path / "r.config"
    path.write_text("#!rnn.py\nlearning_rate = config.float('lr', -1.0)\n"
                    "optimizer = {'class': 'adam'}\n")
    with pytest.raises(ValueError, match=r"`learning_rate` in \[0, inf\), got -1.0"):
        trainop.load_recipe(str(path))
    recipe = load_with_settings(str(path), parse_settings(["lr=0.1"]))
    assert recipe.settings == ["--set lr=0.1: supplies what the file needs"]
    config = Config()  # RETURNN's ++lr 0.1
    config.add_line("lr", "0.1")
    assert recipe.options["learning_rate"] == config.float("lr", -1.0) == 0.1


@pytest.mark.parametrize("item", ["optimizer_params.=1", "a..b=1", "x.=1", ".x=1", "x y=1"])
def test_set_names_with_an_empty_or_invalid_dotted_part_are_refused_naming_the_item(item):
    with pytest.raises(ValueError, match=re.escape(f"got {item!r}")):
        parse_settings([item])
    assert admitted(parse_settings, ["optimizer_params.beta1=0.8"]) == {
        "optimizer_params.beta1": "0.8"}


def test_a_repeated_set_name_takes_its_last_value():
    from returnn.config import Config

    config = Config()  # RETURNN's command line: a repeated ++name overwrites the earlier one
    config.parse_cmd_args(["++lr", "1", "++beta", "x", "++lr", "2"])
    assert parse_settings(["lr=1", "beta=x", "lr=2"]) == {
        "lr": config.value("lr", None), "beta": config.value("beta", None)} == {
        "lr": "2", "beta": "x"}


def test_a_dotted_override_of_an_option_the_recipe_does_not_give_starts_its_dict(tmp_path):
    path = tmp_path / "recipe.py"
    path.write_text(OS2S.format(steps="40").replace(
        '    "optimizer_params": {"beta1": 0.7, "beta2": 0.99, "epsilon": 1e-06},\n', ""))
    recipe = admitted(trainop.load_recipe, str(path),
                      overrides={"optimizer_params.beta1": 0.8})
    assert recipe.options["optimizer_params"] == {"beta1": 0.8}


def test_a_str_override_from_python_is_read_as_the_same_value_in_the_file(tmp_path):
    # "a bad value is refused exactly as the same value in the file would be" (recipes.md):
    # only --set text (Text) is read as a literal, a Python str is taken as given; a str
    # learning rate is read as RETURNN's Config.float reads it (float()), in both places
    path = tmp_path / "r.config"
    path.write_text("#!rnn.py\nlearning_rate = 0.1\noptimizer = {'class': 'adam'}\n")
    in_file = tmp_path / "s.config"
    in_file.write_text("#!rnn.py\nlearning_rate = '1e-3'\noptimizer = {'class': 'adam'}\n")
    assert trainop.load_recipe(str(in_file)).options["learning_rate"] == 1e-3
    assert trainop.load_recipe(str(path), overrides={"learning_rate": "1e-3"}).options[
        "learning_rate"] == 1e-3
    assert trainop.load_recipe(str(path), overrides={"learning_rate": Text("1e-3")}).options[
        "learning_rate"] == 1e-3
    refused = r"Expected `learning_rate` to be a number, or a str that float\(\) reads"
    with pytest.raises(ValueError, match=refused):
        trainop.load_recipe(str(path), overrides={"learning_rate": "fast"})
    in_file.write_text("#!rnn.py\nlearning_rate = 'fast'\noptimizer = {'class': 'adam'}\n")
    with pytest.raises(ValueError, match=refused):
        trainop.load_recipe(str(in_file))
