"""Property (hypothesis, issue #34): the config evaluator agrees with Python on random pure
expressions within its bounds. Each example is a batch of expressions; real Python evaluates
the same batch in one subprocess (the oracle), the evaluator each expression. Profiles: ``ci``
(default, a few seconds) and ``long`` (``TRAINOP_HYPOTHESIS_PROFILE=long``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainop.configs import evaluate_python_config

settings.register_profile("eval-ci", max_examples=15, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("eval-long", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = settings.get_profile(
    "eval-long" if os.environ.get("TRAINOP_HYPOTHESIS_PROFILE") == "long" else "eval-ci")

_ATOMS = st.one_of(st.integers(-50, 50).map(repr), st.sampled_from(
    ["0.5", "-2.25", "True", "False", "[1, 2, 3]", "(4, 5)", "'ab'", "[]", "x", "{'k': 1}"]))
_BIN = ["+", "-", "*", "//", "%", "**", "<", "<=", "==", "!=", "and", "or", "/"]
_FUNCS = ["abs", "len", "max", "min", "sum", "sorted", "list", "str", "int", "float", "bool",
          "round", "tuple"]


def _expr(depth: int) -> st.SearchStrategy[str]:
    if depth == 0:
        return _ATOMS
    sub = _expr(depth - 1)
    return st.one_of(
        sub,
        st.tuples(sub, st.sampled_from(_BIN), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(_FUNCS), sub).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(sub, sub).map(lambda t: f"[{t[0]}, {t[1]}]"),
        st.tuples(sub, sub, sub).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        sub.map(lambda e: f"[y * 2 for y in [x, {e}] if y]"),
        sub.map(lambda e: f"(not {e})"),
    )


_ORACLE = """
import json, sys
out = []
for src in json.load(sys.stdin):
    scope = {}
    try:
        exec(src, {}, scope)
        out.append(["ok", repr(scope["v"])])
    except Exception as e:
        out.append(["error", type(e).__name__])
print(json.dumps(out))
"""


def _python(sources: list[str]) -> list[list[str]]:
    run = subprocess.run([sys.executable, "-c", _ORACLE], input=json.dumps(sources),
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(run.stdout)


@PROFILE
@given(st.lists(_expr(3), min_size=20, max_size=20))
def test_the_evaluator_agrees_with_python(exprs):
    sources = [f"x = 3\nv = {e}\n" for e in exprs]
    for source, (kind, expected) in zip(sources, _python(sources), strict=True):
        try:
            config = evaluate_python_config(source, "c.config")
        except ValueError as err:  # a bound: Python's value would exceed the limits
            assert "MAX_" in str(err), (source, err)
            continue
        value = config.values.get("v")
        if kind == "error" or "v" in config.unresolved:
            # Python raised: the evaluator must not invent a value
            assert kind == "error" or "v" in config.unresolved, source
            if kind == "error":
                assert "v" in config.unresolved, (source, value)
            continue
        assert repr(value) == expected, (source, value, expected)
