"""What ``--set`` says it did (``recipe.settings``) and why it refuses, on the inputs the
first tests did not vary: YAML and JSON recipes (any case of the extension), dotted settings
alone, values shown whole or cut at 80 characters, classes by name, a file that cannot be
evaluated without the settings, refusals with no close name, several, or only names of
statements. The expected lines are written out from the documented forms (docs/recipes.md)."""

from __future__ import annotations

import pytest
from test_set_evaluations import _counting

from trainop.configs import pyconfig
from trainop.interfaces.recipes.settings import load_with_settings, parse_settings

RETURNN = "#!rnn.py\noptimizer = {'class': 'adam'}\nlearning_rate = 0.01\n"
TRAINOP_YAML = "format: trainop\noptimizer: {class: adam}\nlearning_rate: 0.005\n"
TRAINOP_JSON = '{"format": "trainop", "optimizer": {"class": "adam"}, "learning_rate": 0.005}'


def _load(tmp_path, name, text, *items):
    path = tmp_path / name
    path.write_text(text)
    return load_with_settings(str(path), parse_settings(list(items)))


def _refusal(tmp_path, name, text, *items) -> str:
    with pytest.raises(ValueError) as caught:
        _load(tmp_path, name, text, *items)
    return str(caught.value)


@pytest.mark.parametrize(("name", "text"), [("r.yaml", TRAINOP_YAML), ("r.YML", TRAINOP_YAML),
                                            ("r.yml", TRAINOP_YAML), ("r.json", TRAINOP_JSON),
                                            ("r.Json", TRAINOP_JSON)])
def test_a_structured_recipe_takes_names_and_dotted_options_as_overrides(tmp_path, name, text):
    recipe = _load(tmp_path, name, text, "learning_rate=0.1", "optimizer.beta1=0.8")
    assert recipe.options["learning_rate"] == 0.1
    assert recipe.options["optimizer"]["beta1"] == 0.8
    assert recipe.settings == ["--set learning_rate=0.1: learning_rate = 0.1",
                               "--set optimizer.beta1=0.8: optimizer.beta1 = 0.8"]


def test_dotted_settings_alone_evaluate_a_returnn_file_once(tmp_path, monkeypatch):
    # nothing to find out about names: no second evaluation (the check) is made
    path = tmp_path / "r.config"
    path.write_text(RETURNN)
    calls = _counting(monkeypatch, path)
    recipe = load_with_settings(str(path), parse_settings(["optimizer.beta1=0.8"]))
    assert recipe.settings == ["--set optimizer.beta1=0.8: optimizer.beta1 = 0.8"]
    assert len(calls) == 1
    calls.clear()
    path.write_text(RETURNN + "lr = config.float('lr', 0.01)\nlearning_rate = lr\n")
    load_with_settings(str(path), parse_settings(["optimizer.beta1=0.8", "lr=0.5"]))
    assert len(calls) == 2  # a name: the load with the settings and the check without


def test_a_training_option_set_whole_is_shown_as_its_value(tmp_path):
    recipe = _load(tmp_path, "r.config", RETURNN, "optimizer={'class': 'sgd'}")
    line, = recipe.settings
    assert line.startswith("--set optimizer={'class': 'sgd'}: the training option optimizer = "
                           "{'class': <class 'trainop.optimizers.gradient_descent.")


def test_an_option_set_to_a_class_is_shown_by_its_name(tmp_path):
    recipe = _load(tmp_path, "r.config", RETURNN, "optimizer.class=sgd")
    assert recipe.settings == ["--set optimizer.class=sgd: optimizer.class = "
                               "GradientDescentOptimizer"]


@pytest.mark.parametrize(("x", "shown"), [
    ("0.125", "[0.125" + ", 0.25" * 12 + "]"),  # 79 characters
    ("0.1251", "[0.1251" + ", 0.25" * 12 + "]"),  # 80: whole
    ("0.12512", ("[0.12512" + ", 0.25" * 12)[:77] + "..."),  # 81: 77 and "..."
    ("0.125123", ("[0.125123" + ", 0.25" * 12)[:77] + "..."),
])
def test_a_value_is_shown_whole_up_to_80_characters(tmp_path, x, shown):
    text = RETURNN + "learning_rates = [config.float('x', 0.5)] + [0.25] * 12\n"
    recipe = _load(tmp_path, "r.config", text, f"x={x}")
    assert len(shown) == min(len(repr([float(x)] + [0.25] * 12)), 80)
    assert recipe.settings == [f"--set x={x}: changes learning_rates = {shown}"]


BEYOND_A_BOUND = RETURNN + "n = config.int('n', 10**9)\nlearning_rates = [0.1] * n\n"


def test_a_setting_that_brings_the_file_within_its_bounds_supplies_what_it_needs(tmp_path):
    recipe = _load(tmp_path, "r.config", BEYOND_A_BOUND, "n=2")
    assert recipe.settings == ["--set n=2: supplies what the file needs"]
    assert recipe.options["learning_rates"] == [0.1, 0.1]


def test_a_refused_setting_is_named_where_the_file_is_beyond_a_bound_without_them(tmp_path):
    # the file cannot be evaluated without --set n: the refusal of the other setting names it,
    # the file, and the closest training options (not the bound the file meets without n)
    path = tmp_path / "r.config"
    for other, hints in (("learning_ratez=1", "; did you mean 'learning_rate', "
                                              "'learning_rates', 'min_learning_rate'?"),
                         ("qqzzxx=3", "")):
        message = _refusal(tmp_path, "r.config", BEYOND_A_BOUND, "n=2", other)
        assert message == (f"--set {other} changes no training option (without the settings "
                           f"{path} is beyond the evaluator's bounds, so what it reads is not "
                           f"known){hints}")


NEEDS_LR = RETURNN + "learning_rate = config.float('lr', -1.0)\n"  # refused without --set lr


def test_a_setting_beside_one_the_file_needs_is_refused_with_its_reason(tmp_path):
    # the file cannot load without --set lr; the other setting changes nothing
    message = _refusal(tmp_path, "r.config", NEEDS_LR, "lr=0.1", "zzqqxx=1")
    assert message == ("--set zzqqxx=1: the config neither sets nor reads 'zzqqxx', and it is "
                       "no training option")
    recipe = _load(tmp_path, "r.config", NEEDS_LR, "lr=0.1")
    assert recipe.settings == ["--set lr=0.1: supplies what the file needs"]


def test_statements_without_a_name_are_never_offered_as_names(tmp_path):
    text = RETURNN + "foo(1)\n"  # line 4: an unresolved statement, known as '<line 4>'
    parsed = pyconfig.evaluate_python_config(text, partial=True)
    assert "<line 4>" in parsed.unresolved
    message = _refusal(tmp_path, "r.config", text, "line4=1")
    assert message == ("--set line4=1: the config neither sets nor reads 'line4', and it is no "
                       "training option")


def test_a_setting_that_leaves_a_value_holding_a_nan_as_it_was_changes_nothing(tmp_path):
    # [nan, 0.5] != [nan, 0.5] in Python (two NaN objects), yet the two loads give the same
    # learning rates: the setting changes no training option
    text = RETURNN + "learning_rates = [float('nan'), config.float('x', 0.5)]\n"
    assert _refusal(tmp_path, "r.config", text, "x=0.5") == (
        "--set x=0.5 changes no training option: the file reads 'x' only for what trainop "
        "does not train (the network, the data)")
    recipe = _load(tmp_path, "r.config", text, "x=0.25")  # and a real change is one
    assert recipe.settings == ["--set x=0.25: changes learning_rates = [nan, 0.25]"]


def test_every_name_a_training_option_is_read_from_is_a_training_source():
    # what lets a file that cannot load without its settings skip the comparison of options:
    # a setting no training source reads is read by no training option
    from trainop.interfaces.recipes import settings

    for key, sources in settings._SOURCES.items():
        assert set(sources) <= set(settings._TRAINING_SOURCES), key


# RETURNN reads an unset newbob_learning_rate_decay as 0.5 and a None as no change of the rate
# (config_none: opt_typed_value keeps the None), so a setting that takes the None away, or
# brings it, changes training: the line says so, and how the option now reads.
NEWBOB = "#!rnn.py\noptimizer = {'class': 'adam'}\noptimizer_epsilon = 1e-8\n" \
         "learning_rate = 0.1\nlearning_rate_control = 'newbob'\n"


def test_a_setting_that_unsets_a_none_option_changes_it(tmp_path):
    text = NEWBOB + "if not config.bool('decay', False):\n    newbob_learning_rate_decay = None\n"
    recipe = _load(tmp_path, "r.config", text, "decay=True")
    assert "newbob_learning_rate_decay" not in recipe.options
    assert recipe.settings == ["--set decay=True: changes newbob_learning_rate_decay = "
                               "(unset: its default)"]


def test_a_setting_that_brings_a_none_option_changes_it(tmp_path):
    text = NEWBOB + "if config.bool('hold', False):\n    newbob_learning_rate_decay = None\n"
    recipe = _load(tmp_path, "r.config", text, "hold=True")
    assert recipe.options["newbob_learning_rate_decay"] is None
    assert recipe.settings == ["--set hold=True: changes newbob_learning_rate_decay = None"]


def test_a_none_and_an_unset_decay_train_differently():
    """What the two lines above rest on, through trainop's learning-rate control."""
    import trainop

    rates = {}
    for name, extra in (("unset", {}), ("none", {"newbob_learning_rate_decay": None})):
        control = trainop.LearningRateControl({"learning_rate": 0.1,
                                               "learning_rate_control": "newbob", **extra})
        control.set_epoch_error(1, {"train_score": 1.0})
        control.set_epoch_error(2, {"train_score": 2.0})  # worse: newbob decays (or not)
        rates[name] = control.get_learning_rate_for_epoch(3)
    assert rates == {"unset": pytest.approx(0.05), "none": pytest.approx(0.1)}
