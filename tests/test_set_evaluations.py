"""``--set`` evaluates a RETURNN config a bounded number of times (issue #47, C1): the load with
every setting and one check without them, whatever the number of settings (it was one load
more per setting: 3,000 settings on a file reading 10,000 names did not finish in 900 s). Where
each setting took effect is what the load without each one, one by one, says (the per-item
way, kept here as the oracle), on generated configs and on the project's examples."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trainop
from trainop.configs import pyconfig
from trainop.interfaces.recipes import settings as set_module
from trainop.interfaces.recipes.settings import load_with_settings, parse_settings


def test_the_names_a_value_read(tmp_path):
    """``PyConfig.reads``: the given names each value was computed from, through lookups,
    other names and ``if`` tests (both branches), and the name set itself."""
    text = ("a = config.float('x', 1.0)\nb = a * 2\nc = config.float('y', 3.0)\n"
            "if config.bool('z', False):\n    d = 1\nelse:\n    e = b\n"
            "f = 5\nf += c\ng = [config.value('w', None) for _ in range(2)]\nh = 1\n"
            "k = config.float('x', 1.0) + config.float('y', 2.0)\n"
            "m = config.float('x', 1.0)\nm += config.float('y', 0.0)\n"  # both: += keeps m
            "n = config.float('x', 1.0)\nif not config.bool('z', False):\n    n = 2\n"
            "p = config.float('x', 1.0)\np = 3\n"  # p is 3 whatever x is
            "r = config.float('x', 1.0)\nfrom os import path as r\n")  # r: the import
    parsed = pyconfig.evaluate_python_config(text, config_values={"x": trainop.configs.Text(
        "2"), "z": trainop.configs.Text("True"), "h": trainop.configs.Text("7"),
        "w": trainop.configs.Text("adam")})  # text that is a name: read as text, no code
    assert parsed.values["g"] == [parsed.values["w"]] * 2 == ["adam", "adam"]
    reads = {name: set(parsed.reads.of(name)) for name in "abcdefghkmnpr"}
    assert reads == {"a": {"x"}, "b": {"x"}, "c": set(), "d": {"z"}, "e": {"z"},
                     "f": set(), "g": {"w"}, "h": {"h"}, "k": {"x"}, "m": {"x"},
                     "n": {"x", "z"}, "p": set(), "r": set()}
    from trainop.configs.reads import tracking

    with tracking(["x", "y", "z", "w"]) as seen:
        parsed = pyconfig.evaluate_python_config(text)
    assert seen == [parsed]
    after = pyconfig.evaluate_python_config(text)  # outside: its own config_values, unseen
    assert seen == [parsed] and after.reads.of("a") == frozenset()
    assert {name: set(parsed.reads.of(name)) for name in "abcdefgkmnp"} == {
        "a": {"x"}, "b": {"x"}, "c": {"y"}, "d": {"z"}, "e": {"z", "x"}, "f": {"y"},
        "g": {"w"}, "k": {"x", "y"}, "m": {"x", "y"}, "n": {"z"}, "p": set()}


def test_a_set_name_reads_itself_and_what_the_files_own_value_read():
    """A name set over the file's value is re-read in the type of that value (RETURNN's
    ``++NAME VALUE``: a ``str`` stays text), so it reads what the file's value read."""
    from trainop.configs import Text
    from trainop.configs.reads import tracking

    text = "s = config.float('y', 'none')\nt = 1\n"
    given = {"s": Text("1"), "y": Text("2"), "q": Text("5")}
    parsed = pyconfig.evaluate_python_config(text, config_values=given)
    without_y = pyconfig.evaluate_python_config(text, config_values={"s": Text("1")})
    assert (parsed.values["s"], without_y.values["s"]) == (1, "1")  # y changes s's type
    assert {n: set(parsed.reads.of(n)) for n in "sqt"} == {"s": {"s", "y"}, "q": {"q"},
                                                           "t": set()}
    with tracking(["y"]):  # a name set that is not followed reads nothing followed
        parsed = pyconfig.evaluate_python_config(text, config_values={"t": Text("3")})
    assert parsed.values["t"] == 3 and parsed.reads.of("t") == frozenset()
    assert parsed.reads.of("s") == {"y"}


def _counting(monkeypatch, path) -> list[str]:
    """Every evaluation of the file at ``path`` (each parses it once), recorded."""
    calls: list[str] = []
    parse = pyconfig.parse_python

    def counted(source, filename="<config>"):
        if filename == str(path):
            calls.append(filename)
        return parse(source, filename)

    monkeypatch.setattr(pyconfig, "parse_python", counted)
    return calls


def _many(tmp_path, n: int):
    """A config reading ``n`` names, each one element of the per-epoch learning rates."""
    lines = ["#!rnn.py", "optimizer = {'class': 'adam'}", "learning_rate = 0.01"]
    lines += [f"x{i} = config.float('x{i}', 0.5)" for i in range(n)]
    lines.append("learning_rates = [" + ", ".join(f"x{i}" for i in range(n)) + "]")
    path = tmp_path / "many.config"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("items", [1, 10, 300])
def test_set_evaluates_the_config_the_same_number_of_times_for_any_number_of_items(
        tmp_path, monkeypatch, items):
    path = _many(tmp_path, 300)
    calls = _counting(monkeypatch, path)
    recipe = load_with_settings(str(path), parse_settings(
        [f"x{i}={i + 1}" for i in range(items)]))
    assert len(calls) == 2  # the load with the settings, and the check without them
    assert recipe.options["learning_rates"] == [float(i + 1) for i in range(items)] + \
        [0.5] * (300 - items)
    assert len(recipe.settings) == items
    assert recipe.settings[-1].startswith(f"--set x{items - 1}={items}: changes "
                                          f"learning_rates = [1.0, ")


def test_a_refused_set_evaluates_the_config_a_bounded_number_of_times(tmp_path, monkeypatch):
    path = _many(tmp_path, 300)
    calls = _counting(monkeypatch, path)
    with pytest.raises(ValueError, match="the config neither sets nor reads 'nonsense'"):
        load_with_settings(str(path), parse_settings(
            [*(f"x{i}=1" for i in range(300)), "nonsense=1"]))
    assert len(calls) == 2


# ---- the per-item way: the load without each setting, one by one (the oracle) -------------
def _per_item(path: str, items: dict) -> list[str] | str:
    """``recipe.settings`` as the load without each ``--set NAME`` finds them, or the
    ``ValueError`` message."""
    names = {k: v for k, v in items.items() if "." not in k}
    dotted = {k: v for k, v in items.items() if "." in k}
    with set_module._quiet():
        recipe = trainop.load_recipe(path, config_values=names or None, overrides=dotted)
    keys = set(recipe.training_keys())
    lines = []
    for name, value in names.items():
        others = {k: v for k, v in names.items() if k != name}
        try:
            with set_module._quiet():
                without = trainop.load_recipe(path, config_values=others or None,
                                              overrides=dotted)
        except (ValueError, TypeError):
            lines.append(f"--set {name}={value}: supplies what the file needs")
            continue
        changed = [k for k in sorted(keys) if not set_module._same(
            recipe.options.get(k, set_module._NONE), without.options.get(k, set_module._NONE))]
        if name in keys:
            lines.append(f"--set {name}={value}: the training option {name} = "
                         f"{set_module._shown(recipe, name)}")
        elif changed:
            lines.append(f"--set {name}={value}: changes " + ", ".join(
                f"{k} = {set_module._shown(recipe, k)}" for k in changed))
        else:
            with open(path) as f:  # the reason, from the file as evaluated without them
                parsed = pyconfig.evaluate_python_config(f.read(), path, partial=True)
            return set_module._why_not(path, name, value, keys, parsed)
    return lines + [f"--set {k}={v}: {k} = {set_module._shown(recipe, k)}"
                    for k, v in dotted.items()]


def _once(path: str, items: dict) -> list[str] | str:
    try:
        return load_with_settings(path, items).settings
    except ValueError as exc:
        return str(exc)


# ---- generated configs: each training option reads at most one of the names set -----------
NAMES = ["n0", "n1", "n2", "flag"]
_value = st.sampled_from(["0.5", "0.01", "2", "1e-3", "0.25"])


@st.composite
def configs(draw):
    """A RETURNN config whose names read ``config.<lookup>`` of n0..n2 and flag, and the
    settings of some of them, such that no training option reads more than one name set
    (where the module doc says the check is the load without each)."""
    lines = ["#!rnn.py", "optimizer = {'class': 'adam'}"]
    looked_up = set()
    for i in range(3):
        if draw(st.integers(0, 3)):
            lines.append(f"v{i} = config.float('n{i}', {draw(_value)})")
            looked_up.add(f"n{i}")
        else:
            lines.append(f"v{i} = {draw(_value)}")
    sources = st.sampled_from(["v0", "v1", "v2", "0.1"])
    lr, eps = draw(sources), draw(sources)
    lines.append(f"learning_rate = {lr} * {draw(st.sampled_from(['1', '2', '0.5']))}")
    lines.append(f"optimizer_epsilon = {eps}")
    useful = {f"n{v[1]}" for v in (lr, eps) if v != "0.1"} & looked_up
    if draw(st.booleans()):  # an option under a test of its own name
        lines.append("if config.bool('flag', False):\n    gradient_clip_global_norm = 2.0")
        useful.add("flag")
    if draw(st.booleans()):  # ... and one the test leaves
        lines.append("if not config.bool('flag', False):\n    gradient_clip = 3.0")
        useful.add("flag")
    lines.append(f"batch_size = {draw(sources)}")  # no training option
    if draw(st.booleans()):
        lines.append("learning_rates = [v0, v0 / 2]" if lr in ("v0", "0.1")
                     else f"learning_rates = [{lr}]")
        useful |= {"n0" if lr == "0.1" else f"n{lr[1]}"} & looked_up
    chosen = draw(st.lists(st.sampled_from(sorted(useful or NAMES)), unique=True,
                           min_size=1, max_size=4))
    extra = draw(st.sampled_from(["learning_rate", "other", *NAMES]))
    if draw(st.integers(0, 3)) == 0 and extra not in chosen and not (
            extra == "learning_rate" and lr != "0.1" and f"n{lr[1]}" in chosen):
        chosen.append(extra)  # one that may take no effect, or the option learning_rate
    items = {}
    for name in chosen:
        items[name] = draw(st.sampled_from(["True", "False"])) if name == "flag" \
            else draw(_value)
    if draw(st.booleans()):
        items["optimizer.beta1"] = "0.5"
    return "\n".join(lines) + "\n", items


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(configs())
def test_set_takes_effect_where_the_load_without_each_setting_says(tmp_path, case):
    text, items = case
    path = tmp_path / "gen.config"
    path.write_text(text)
    settings_ = parse_settings([f"{k}={v}" for k, v in items.items()])
    assert _once(str(path), settings_) == _per_item(str(path), settings_), text


# ---- the examples: RETURNN's and OpenSeq2Seq's ---------------------------------------------
RETURNN = "#!rnn.py\noptimizer = {'class': 'adam', 'epsilon': 1e-8}\nlearning_rate = 0.01\n" \
          "lr = config.float('lr', 0.01)\nlearning_rates = [lr, lr / 2]\nbatch_size = 5000\n" \
          "if config.bool('big', False):\n    gradient_clip_global_norm = 5.0\n" \
          "newbob_multi_num_epochs = config.int('epochs_per_step', 1)\n"


@pytest.mark.parametrize("file,items", [
    ("examples/returnn_lstm.config", ["learning_rate=0.1"]),
    ("examples/returnn_lstm.config", ["learning_rate=0.1", "optimizer_epsilon=0.001",
                                      "gradient_clip_global_norm=2"]),
    ("examples/returnn_lstm.config", ["learning_rate=0.1", "num_epochs=3"]),
    ("examples/returnn_lstm.config", ["task=search"]),
    ("examples/returnn_lstm.config", ["optimizer.beta2=0.9", "learning_rate=0.2"]),
    ("RETURNN", ["lr=0.5", "big=True", "epochs_per_step=3", "learning_rate=0.2"]),
    ("RETURNN", ["lr=0.01", "big=False"]),  # the file's own values: no option changes
    ("RETURNN", ["lr=0.5", "batch_size=10"]),
    ("RETURNN", ["lr=0.5", "lrr=0.1"]),
    ("examples/openseq2seq_jasper.py", ["max_steps=50", "optimizer_params.momentum=0.5"]),
    ("examples/openseq2seq_transformer.py", ["max_steps=abc"]),
])
def test_set_on_the_examples_agrees_with_the_load_without_each_setting(tmp_path, file, items):
    if file == "RETURNN":
        path = tmp_path / "r.config"
        path.write_text(RETURNN)
    else:
        path = pytest.importorskip("pathlib").Path(__file__).resolve().parents[1] / file
    settings_ = parse_settings(items)
    try:
        expected = _per_item(str(path), settings_)
    except (ValueError, TypeError) as exc:  # refused at load: the same refusal
        with pytest.raises(type(exc), match=None) as caught:
            load_with_settings(str(path), settings_)
        assert str(caught.value) == str(exc)
        return
    assert _once(str(path), settings_) == expected


def test_a_set_the_file_cannot_load_without_supplies_it_beside_one_that_it_can(tmp_path):
    """Several settings where the file cannot load without all of them: the ones that reach
    a training option supply what it needs (the documented reading of the check)."""
    path = tmp_path / "r.config"
    path.write_text("#!rnn.py\nlearning_rate = config.float('lr', -1.0)\n"
                    "optimizer = {'class': 'adam'}\nbatch_size = config.int('bs', 1)\n")
    with pytest.raises(ValueError, match="the file reads 'bs' only for what trainop does not"):
        load_with_settings(str(path), parse_settings(["lr=0.1", "bs=3"]))
    recipe = load_with_settings(str(path), parse_settings(["lr=0.1"]))
    assert recipe.settings == ["--set lr=0.1: supplies what the file needs"]
    assert recipe.options["learning_rate"] == 0.1
