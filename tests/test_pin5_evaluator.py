"""Pins of the config evaluator's statements and expressions that the audited tests left
unexecuted (issue #40, branch coverage of ``configs/pyconfig.py``): what a RETURNN config may
hold besides plain assignments (docstring, ``pass``, ``del``, an annotation, augmented
assignment, ``**``/``*`` unpacking, conditional and short-circuit expressions) evaluates to
what Python's own ``exec`` of the same text gives (RETURNN runs the file with ``exec``); what
Python would fail on or what needs code is listed, never guessed. ``--set`` text is read within
the config text's bounds."""

from __future__ import annotations

import pytest
from admitted import admitted

from trainop.configs import Text, evaluate_python_config
from trainop.configs.bounds import MAX_WEIGHT

STATEMENTS = '''"""A RETURNN config."""
a = [1, 2]
b = {"x": 1}
n = 3
n += 2
n -= 1
s = "ab"
s *= 2
gone = 1
del gone
pass
ann: int
typed: float = 0.5
c = {**b, "y": 2}
d = dict(**b, z=3)
e = [*a, 3]
f = max(*a)
g = 1 if n > 4 else 2
h = 1 if n < 4 else 2
first_true = 3 or 5
first_false = 0 or 5
last = 3 and 5
p, q = a
bs = b"ab"
codes = [v for v in bs]
'''


def test_statements_evaluate_to_what_python_runs_them_to():
    config = admitted(evaluate_python_config, STATEMENTS, "c.config")
    ran: dict = {}
    exec(STATEMENTS, ran)  # noqa: S102 - the oracle: Python running the text written here
    expected = {k: v for k, v in ran.items() if not k.startswith("__")}
    assert config.values == expected
    assert "gone" not in config.values and "ann" not in config.values
    assert not config.unresolved


def test_what_python_fails_on_or_runs_as_code_is_listed_by_line():
    source = ("import numpy\na = [1, 2]\nz = 1 / 0\na[0] = 7\nu += 1\nk = 2\nk += missing\n"
              "p, q = [1, 2, 3]\nx = (y := 2)\nt = 1 if numpy.array([1, 2]) else 0\n"
              "w = f'{k:>4}'\n")
    config = evaluate_python_config(source, "c.config", partial=True)
    reasons = {k: str(v) for k, v in config.unresolved.items()}
    assert reasons["z"] == "c.config:3: ZeroDivisionError: division by zero"
    # a[0] = 7 changes a: a is no longer known data (Python: [7, 2])
    assert reasons["a"].startswith("c.config:4:") and "a[0]" in reasons["a"]
    assert reasons["u"] == "c.config:5: augmented assignment to 'u'"
    assert reasons["k"].startswith("c.config:7:")
    assert reasons["p"] == reasons["q"] == "c.config:8: unpacks 3 values into 2 names"
    assert reasons["x"] == "c.config:9: NamedExpr is code, not data"
    assert reasons["t"] == "c.config:10: the truth of an array"  # numpy: ambiguous
    assert reasons["w"] == "c.config:11: formatted string with a format spec"


def _set(text: str):
    """The value ``--set v=TEXT`` gives ``v`` (RETURNN's ``++v TEXT``)."""
    return evaluate_python_config("lr = 0.1\n", "c.config",
                                  config_values={"v": Text(text)}).values["v"]


def test_set_text_is_data_within_the_config_texts_bounds():
    # data text is its value, anything else stays the text (RETURNN keeps command-line text)
    assert _set("[1, 2] * 2") == [1, 2, 1, 2]
    assert _set("x + 1") == "x + 1"
    assert _set("a\0b") == "a\0b"
    assert admitted(_set, "2 ** 4095") == 2 ** 4095
    with pytest.raises(ValueError, match="MAX_INT_BITS"):
        _set("2 ** 4096")
    assert admitted(_set, "x" * MAX_WEIGHT) == "x" * MAX_WEIGHT
    with pytest.raises(ValueError, match="MAX_WEIGHT"):
        _set("x" * (MAX_WEIGHT + 1))
    with pytest.raises(ValueError, match="MAX_SYNTAX_DEPTH"):
        _set("-" * 100_000 + "1")
