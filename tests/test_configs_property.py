"""Property-based test (hypothesis) of the recipe reader: generated config files — Python with
random nesting, sizes and operators, YAML with alias chains and tags, JSON nesting, random bytes
spliced in — each loaded by ``trainop.load_recipe`` in a forked child under a timeout and a
memory cap (``config_probes``). Every file must give a recipe or one clear error
(``trainop.RecipeError`` or another ``ValueError``/``TypeError``, one line), within the bounds.

Profiles: ``ci`` (default, 25 examples per test, a few seconds) and ``long``
(``TRAINOP_HYPOTHESIS_PROFILE=long``, 500 per test).
"""

from __future__ import annotations

import os

import pytest
from config_probes import ProbeServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture])
settings.register_profile("long", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture])
PROFILE = settings.get_profile(os.environ.get("TRAINOP_HYPOTHESIS_PROFILE", "ci"))
TIMEOUT = 30  # seconds per file: the bounds keep real work far below


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("property")
    server = ProbeServer(str(folder))
    server.folder = folder
    yield server
    server.close()


SIZES = st.sampled_from([0, 1, 2, 3, 10, 1000, 10**5, 10**6, 10**9, 10**30])
LEAVES = st.one_of(
    st.integers(-5, 5).map(str), SIZES.map(str), st.floats(allow_nan=False).map(repr),
    st.text(max_size=8).map(repr), st.sampled_from(["True", "None", "x0", "x1", "lr",
                                                    "learning_rate", "numpy", "undefined"]),
)


def _compose(children):
    one, n = children, SIZES.map(str)
    return st.one_of(
        st.lists(one, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(one, max_size=3).map(lambda xs: "(" + "".join(x + ", " for x in xs) + ")"),
        st.tuples(st.text(max_size=4), one).map(lambda kv: f"{{{kv[0]!r}: {kv[1]}}}"),
        st.tuples(one, n).map(lambda t: f"[{t[0]}] * {t[1]}"),
        st.tuples(one, n).map(lambda t: f"{t[0]} ** {t[1]}"),
        st.tuples(one, st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "==", "<", "and",
                                        "or", "in", "|", "@"]), one).map(" ".join),
        st.tuples(st.sampled_from(["str", "list", "range", "min", "max", "sum", "len", "int",
                                   "float", "tuple", "sorted", "set", "abs", "unknown",
                                   "numpy.array", "os.system"]), one).map(
            lambda t: f"{t[0]}({t[1]})"),
        st.tuples(one, one, n).map(lambda t: f"numpy.linspace({t[0]}, {t[1]}, num={t[2]})"),
        st.tuples(one, one).map(lambda t: f"numpy.arange({t[0]}, {t[1]})"),
        st.tuples(one, one).map(lambda t: f"[{t[0]} for v in {t[1]}]"),
        st.tuples(one, one).map(lambda t: f"{{v: {t[0]} for v in {t[1]}}}"),
        st.tuples(one, one, one).map(lambda t: f"{t[0]} if {t[1]} else {t[2]}"),
        st.tuples(one, one).map(lambda t: f"{t[0]}[{t[1]}]"),
        one.map(lambda x: f"f'{{{x}}}'"),
        one.map(lambda x: f"lambda: {x}"),
        one.map(lambda x: f"({x})"),
    )


EXPRESSIONS = st.recursive(LEAVES, _compose, max_leaves=12)
TARGETS = st.sampled_from(["x0", "x1", "lr", "learning_rate", "learning_rates", "optimizer",
                           "gradient_clip", "accum_grad_multiple_step", "dynamic_learning_rate",
                           "newbob_learning_rate_decay", "a, b"])
STATEMENTS = st.one_of(
    st.tuples(TARGETS, EXPRESSIONS).map(lambda t: f"{t[0]} = {t[1]}"),
    EXPRESSIONS.map(lambda e: f"optimizer = {{'class': {e}}}"),
    st.sampled_from(["import numpy", "import numpy as np", "import os", "def f(x):\n    return x",
                     "for i in range(3):\n    x0 = i", "x0 += [1]", "x0[0] = 1", "del x1",
                     "if learning_rate:\n    x1 = 2\nelse:\n    x1 = 3", "class C:\n    pass",
                     "optimizer = {'class': 'somemodule.X'}", "learning_rate = 0.01"]),
)


def _splice(text: str, data: st.DataObject) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    if data.draw(st.booleans(), label="splice bytes"):
        at = data.draw(st.integers(0, len(raw)), label="at")
        raw = raw[:at] + data.draw(st.binary(max_size=6), label="bytes") + raw[at:]
    return raw


def _check(server, name: str, raw: bytes) -> None:
    path = server.folder / name
    path.write_bytes(raw)
    answer = server.probe(f"r = trainop.load_recipe({str(path)!r}); result(r.format)",
                          timeout=TIMEOUT, memory_gb=1.5)
    assert answer["status"] == "done", answer  # not killed by the timeout or the memory cap
    error = answer["error"]
    if error is not None:
        kind = error.partition(":")[0]
        assert kind in ("RecipeError", "ValueError", "TypeError"), answer
        if kind == "RecipeError":
            assert "\n" not in error and len(error) < 1000, error
    assert not (server.folder / "IMPORTED").exists()


@PROFILE
@given(statements=st.lists(STATEMENTS, min_size=1, max_size=8), data=st.data())
def test_python_configs_give_a_recipe_or_one_clear_error(server, statements, data):
    source = "learning_rate = 0.001\n" + "\n".join(statements) + "\n"
    _check(server, "generated.config", _splice(source, data))


@PROFILE
@given(depth=st.integers(1, 10), width=st.integers(1, 12), leaf=st.text(max_size=20),
       tag=st.sampled_from(["", "!!python/object/apply:os.system ", "!!binary ", "!custom ",
                            "!!str "]),
       data=st.data())
def test_yaml_with_aliases_gives_a_recipe_or_one_clear_error(server, depth, width, leaf, tag,
                                                             data):
    lines = ["format: trainop", "learning_rate: 0.01", f"a0: &a0 {tag}{leaf!r}"]
    for level in range(1, depth + 1):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    lines.append(f"learning_rates: *a{depth}")
    _check(server, "generated.yaml", _splice("\n".join(lines) + "\n", data))


@PROFILE
@given(depth=st.integers(0, 3000), value=st.sampled_from(["0", "\"x\"", "{}", "1e999", "[]"]),
       data=st.data())
def test_json_nesting_gives_a_recipe_or_one_clear_error(server, depth, value, data):
    body = "[" * depth + value + "]" * depth
    text = '{"format": "trainop", "learning_rate": 0.01, "learning_rates": ' + body + "}"
    _check(server, "generated.json", _splice(text, data))
