"""Issue #24's evaluator points on the project's own example recipes (``tests/recipes/``, written
in the shapes the upstream corpus uses; ``scripts/recipe_corpus.py``): pure expressions are
computed with numpy's own values, what needs code is listed and never half-resolved, and
``build(overrides=...)`` supplies it."""

from __future__ import annotations

import os

import numpy
import pytest
import torch

import trainop
from trainop.configs import Unresolved, evaluate_python_config

HERE = os.path.join(os.path.dirname(__file__), "recipes")


def _path(name: str) -> str:
    return os.path.join(HERE, name)


def _no_unresolved_inside(value) -> bool:
    if isinstance(value, Unresolved):
        return False
    if isinstance(value, dict):
        return all(_no_unresolved_inside(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_no_unresolved_inside(v) for v in value)
    return True


def test_numpy_warm_up_resolves_to_numpys_values():
    recipe = trainop.load_recipe(_path("warmup_newbob.config"))
    rates = recipe.options["learning_rates"]
    expected = list(numpy.linspace(0.0003, 0.0008, num=10))
    assert rates == expected and all(type(r) is float for r in rates)
    assert recipe.options["min_learning_rate"] == 0.0008 / 50.
    assert recipe.unresolved == {} and recipe.pending() == {}
    control = recipe.learning_rate_control()
    assert control.get_learning_rate_for_epoch(1) == expected[0]
    assert control.get_learning_rate_for_epoch(10) == expected[9]
    updater = recipe.build(torch.nn.Linear(2, 1))
    assert isinstance(updater.optimizer, trainop.AdamOptimizer)
    direct = trainop.Updater(_path("warmup_newbob.config"), torch.nn.Linear(2, 1))
    assert type(direct.optimizer) is type(updater.optimizer)


def test_constant_then_ramp_comprehensions_and_if():
    recipe = trainop.load_recipe(_path("warmup_constant_then_ramp.config"))
    o = recipe.options
    assert o["learning_rates"] == [0.0001] * 3 + list(numpy.linspace(0.0001, 0.001, num=4))
    assert o["gradient_clip_global_norm"] == 1.0  # max(1.0, min([512, 1024]) / 1024)
    assert recipe.optimizer_class is trainop.NadamOptimizer
    assert set(recipe.unresolved) == {"model"}  # num_layers came from the `if` on data
    assert "calls os.getcwd(...)" in recipe.unresolved["model"].reason  # os.path.join is pure
    assert recipe.pending() == {} and _no_unresolved_inside(o)


def test_the_evaluator_computes_what_real_configs_write():
    config = evaluate_python_config("""
import numpy
import numpy as np
from numpy import linspace
lr = 0.001
a = list(numpy.linspace(0.0003, lr, num=15))
b = list(np.geomspace(1e-5, 1e-3, num=5))
c = list(np.logspace(-5, -3, num=3, base=10.0))
d = list(numpy.arange(0.1, 1.0, 0.2))
e = list(numpy.concatenate([numpy.linspace(0, 1, 3), [2.0, 3.0]]))
f = list(linspace(0, lr, 4) * 2)
g = [x * 2 for x in range(4) if x != 2]
h = {k: v for k, v in zip(["a", "b"], [1, 2])}
i = min(a) + max(b) - sum([1, 2]) / len(g)
j, k = divmod_free = (1, 2)
m = list(range(1, 10, 3))[::-1]
n = [lr] * 2 + [lr / 10.]
p = f"{lr}"
q = 2 ** 10 * 3 // 7 % 5
r = sorted({3, 1, 2})
s = -np.linspace(0, 1, 3)[1]
""")
    v = config.values
    assert config.unresolved == {}
    assert v["a"] == list(numpy.linspace(0.0003, 0.001, num=15))
    assert v["b"] == list(numpy.geomspace(1e-5, 1e-3, num=5))
    assert v["c"] == list(numpy.logspace(-5, -3, num=3, base=10.0))
    assert v["d"] == list(numpy.arange(0.1, 1.0, 0.2))
    assert v["e"] == [0.0, 0.5, 1.0, 2.0, 3.0]
    assert v["f"] == list(numpy.linspace(0, 0.001, 4) * 2)
    assert v["g"] == [0, 2, 6] and v["h"] == {"a": 1, "b": 2}
    assert v["i"] == min(v["a"]) + max(v["b"]) - 3 / 3
    assert (v["j"], v["k"], v["m"], v["n"]) == (1, 2, [7, 4, 1], [0.001, 0.001, 0.0001])
    assert (v["p"], v["q"], v["r"], v["s"]) == ("0.001", 2 ** 10 * 3 // 7 % 5, [1, 2, 3], -0.5)


def test_what_needs_code_is_listed_never_half_resolved(capsys):
    path = _path("dynamic_lr.config")
    recipe = trainop.load_recipe(path)  # loading succeeds
    assert "dynamic_learning_rate" not in recipe.options
    assert "learning_rates" not in recipe.options
    assert _no_unresolved_inside(recipe.options)
    where = recipe.unresolved["dynamic_learning_rate"]
    assert (where.filename, where.line) == (path, 8)
    assert "function 'dynamic_learning_rate' defined in the config" in where.reason
    assert recipe.unresolved["learning_rates"].line == 13
    assert "calls sorted_rates(...)" in recipe.unresolved["learning_rates"].reason
    assert set(recipe.pending()) == {"dynamic_learning_rate", "learning_rates"}
    model = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match=r"dynamic_learning_rate at .*dynamic_lr.config:8.*"
                                         r"learning_rates at .*dynamic_lr.config:13.*overrides="):
        recipe.build(model)

    def warm_up(*, global_train_step, learning_rate, **kwargs):
        return learning_rate * 0.5

    updater = recipe.build(model, overrides={"dynamic_learning_rate": warm_up,
                                             "learning_rates": [0.001, 0.002]})
    assert float(updater.get_current_step_learning_rate()) == pytest.approx(0.0005)
    assert "dynamic_learning_rate" not in recipe.options  # the recipe itself is unchanged
    assert recipe.pending(overrides={"dynamic_learning_rate": warm_up}).keys() == {
        "learning_rates"}

    from trainop.__main__ import main

    status = main(["check-config", path, "--no-plot"])
    err = capsys.readouterr().err
    assert status == 1 and err.count("\n") == 1
    assert "dynamic_learning_rate at " + path + ":8" in err and "learning_rates at" in err


def test_calls_that_would_cost_without_bound_stay_unresolved():
    """``sum`` of lists is quadratic and ``round(5, -10**9)`` computes ``10**10**9``: not run."""
    config = evaluate_python_config("a = sum([[0]] * 10, [])\nb = round(5, -10**9)\n"
                                    "c = sum([1, 2.5])\nd = round(1.2345, 2)\n", "s.config")
    assert config.unresolved["a"].reason == (
        "calls sum(...) with arguments that are not data: sum() of other than numbers")
    assert config.unresolved["b"].reason == (
        "calls round(...) with arguments that are not data: round() to more than 400 digits")
    assert (config.values["c"], config.values["d"]) == (3.5, 1.23)


def test_a_key_function_never_calls_a_resolved_value():
    """``sorted``/``min``/``max`` with ``key=`` would call a class or function the caller
    resolved (a config never runs code): listed, the value never called."""
    calls = []

    def spy(*args):
        calls.append(args)
        return 0

    config = evaluate_python_config("a = sorted([3, 1], key=f)\nb = min(3, 1, key=f)\n"
                                    "c = max([3, 1], key=f)\nd = sorted([3, 1])\n", "k.config",
                                    {"f": spy})
    assert calls == []
    assert config.unresolved["a"].reason == (
        "calls sorted(...) with arguments that are not data: sorted() with a key function")
    assert config.unresolved["b"].reason.endswith("min() with a key function")
    assert config.unresolved["c"].reason.endswith("max() with a key function")
    assert config.values["d"] == [1, 3]


def test_numpy_arrays_of_big_ints_are_not_built():
    """``numpy.array([10**1000])`` would be an object array, whose ``** 10**1000`` runs Python's
    unbounded integer power: refused when built (int64/uint64/float64 arrays only)."""
    config = evaluate_python_config(
        "import numpy\na = numpy.array([10**1000])\nb = a ** 10**1000\n"
        "c = numpy.concatenate([[10**1000], [1]])\nd = numpy.array([2**63])\n", "big.config")
    assert config.unresolved["a"].reason == (
        "calls numpy.array(...) with arguments that are not data: an array of integers beyond "
        "64 bits")
    assert config.unresolved["b"].reason.startswith("uses 'a', which could not be evaluated")
    assert config.unresolved["c"].reason.endswith("an array of integers beyond 64 bits")
    assert config.values["d"] == [2**63]


def test_an_if_test_that_fails_on_data_is_listed_not_raised():
    """``if 1 / 0:`` is arithmetic on data that fails: the statement and the names it assigns
    are listed, as a failing assignment is, and the file still loads."""
    config = evaluate_python_config("if 1 / 0:\n    a = 1\nelse:\n    a = 2\n"
                                    "if {}['k']:\n    b = 1\nc = 3\n", "if.config")
    assert config.unresolved["a"].reason == (
        "assigned in an `if` statement at line 1 whose test is not data (ZeroDivisionError: "
        "division by zero)")
    assert config.unresolved["b"].reason.endswith("(KeyError: 'k')")
    assert config.values["c"] == 3


def test_a_star_import_is_listed():
    config = evaluate_python_config("from returnn.common import *\nlearning_rate = 0.1\n",
                                    "s.config")
    assert config.values == {"learning_rate": 0.1}
    assert str(config.unresolved["<line 1>"]) == (
        "s.config:1: from returnn.common import *: the names it binds are not known (modules "
        "are never imported)")


def test_overrides_name_real_options():
    recipe = trainop.load_recipe(_path("dynamic_lr.config"))
    with pytest.raises(ValueError, match=r"Unknown option 'dynamic_learning_rat' in "
                                         r"`overrides` \(options of a Updater recipe\); did you "
                                         r"mean 'dynamic_learning_rate'"):
        recipe.build(torch.nn.Linear(2, 1), overrides={"dynamic_learning_rat": None})


def test_computed_openseq2seq_options_train():
    recipe = trainop.load_recipe(_path("computed_os2s.py"))
    o = recipe.options
    assert o["max_steps"] == 100 and o["max_grad_norm"] == 4.0
    assert o["lr_policy_params"] == {"learning_rate": 0.02, "decay_steps": 100}
    assert o["lr_policy"] is trainop.schedules.tf1.cosine_decay
    assert recipe.pending() == {} and _no_unresolved_inside(o)
    model = torch.nn.Linear(3, 1)
    op = recipe.build(model, lambda x, y: torch.nn.functional.mse_loss(model(x), y))
    op(torch.ones(4, 3), torch.zeros(4, 1))
    assert int(op.global_step) == 1


def test_the_corpus_script_tabulates_the_project_recipes(tmp_path):
    """``scripts/recipe_corpus.py`` (run on the upstream corpora for docs/recipes.md) on the
    project's own recipes: three resolved, one needing code, no crash."""
    import json
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.path.join(root, "src")}
    out = tmp_path / "results.json"
    done = subprocess.run([sys.executable, os.path.join(root, "scripts", "recipe_corpus.py"),
                           HERE, "--no-check-config", "--json", str(out)], env=env,
                          capture_output=True, text=True, timeout=600, check=True)
    lines = done.stdout.splitlines()
    assert lines[:5] == ["files: 4", "  resolved: 3", "  needs code: 1", "  failing: 0",
                         "  crash: 0"], done.stdout
    results = json.loads(out.read_text())
    assert set(results[_path("dynamic_lr.config")]["load"]["pending"]) == {
        "dynamic_learning_rate", "learning_rates"}
