"""Pins of the config evaluator (issue #34): each value is Python's own, computed by running the
same source with ``exec`` (the oracle), never trainop's output."""
from __future__ import annotations

import pytest

from trainop.configs import evaluate_python_config
from trainop.configs.bounds import MAX_DEPTH, MAX_INT_BITS, MAX_WEIGHT


def _python(source):
    scope: dict = {}
    exec(source, {}, scope)  # noqa: S102 - the oracle: trusted sources written in this file
    return scope


@pytest.mark.parametrize("source, name", [
    ("max = 0.5\nlr = max", "lr"),                                  # a rebound builtin
    ("xs = [3, 1]\ny = [x for x in [[x] for x in xs]]", "y"),       # inner scope shadows
    ("y = [(x, x) for x in [1, 2] for x in [x * 10]]", "y"),        # comprehension scoping
    ("y = [[x for x in [z]] for x in [1] for z in [2]]", "y"),     # innermost scope first
    ("y = (-3) ** 5", "y"),                                         # negative base
    ("y = 1 < 3 < 2", "y"),                                         # chained comparison
    ("y = 0 and 5", "y"), ("y = 2 and 5", "y"), ("y = 0 or 7", "y"),
])
def test_values_agree_with_python(source, name):
    config = evaluate_python_config(source, "c.config")
    assert config.values[name] == _python(source)[name]


def test_a_method_call_leaves_the_list_unresolved():
    # Python: rates == [0.1, 0.2]; the evaluator must not report the old [0.1]
    config = evaluate_python_config("rates = [0.1]\nrates.append(0.2)\n", "c.config")
    assert config.values.get("rates") != [0.1]
    assert "rates" in config.unresolved


def test_a_call_of_a_rebound_builtin_is_not_the_builtin():
    source = "max = 0.5\ny = max(1, 2)\n"  # Python: TypeError, 'float' is not callable
    with pytest.raises(TypeError):
        _python(source)
    config = evaluate_python_config(source, "c.config")
    assert config.values.get("y") != 2 and "y" in config.unresolved


def test_negative_base_power_beyond_the_int_bits_is_refused_before_it_is_built():
    import time
    start = time.monotonic()  # built first, (-3) ** 10**8 (160M bits) takes many seconds
    with pytest.raises(ValueError, match="MAX_INT_BITS"):
        evaluate_python_config(f"y = (-3) ** {10 ** 8}", "c.config")
    assert time.monotonic() - start < 30  # a backstop only (#39)


def test_a_bound_exceeded_in_an_if_test_is_an_error_not_unresolved_code():
    with pytest.raises(ValueError, match="MAX_WEIGHT"):
        evaluate_python_config(f"if [0] * {MAX_WEIGHT + 5}:\n    x = 1\n", "c.config")


@pytest.mark.no_cover  # a list of MAX_WEIGHT elements weighed: its lines are covered elsewhere
def test_the_bounds_admit_their_own_edges():
    # MAX_INT_BITS bits exactly: 2 ** (MAX_INT_BITS - 1) has MAX_INT_BITS bits
    v = evaluate_python_config(f"y = 2 ** {MAX_INT_BITS - 1}", "c.config").values["y"]
    assert v == 2 ** (MAX_INT_BITS - 1) and v.bit_length() == MAX_INT_BITS
    with pytest.raises(ValueError, match="MAX_INT_BITS"):
        evaluate_python_config(f"y = 2 ** {MAX_INT_BITS}", "c.config")
    # a list weighs 1 + its elements: [0] * (MAX_WEIGHT - 1) is exactly MAX_WEIGHT
    v = evaluate_python_config(f"y = [0] * {MAX_WEIGHT - 1}", "c.config").values["y"]
    assert len(v) == MAX_WEIGHT - 1
    with pytest.raises(ValueError, match="MAX_WEIGHT"):
        evaluate_python_config(f"y = [0] * {MAX_WEIGHT}", "c.config")
    # a string weighs 1 + its characters
    with pytest.raises(ValueError, match="MAX_WEIGHT"):
        evaluate_python_config(f"y = 'ab' * {MAX_WEIGHT // 2 + 1}", "c.config")
    # nesting exactly MAX_DEPTH deep is allowed, one more is not
    ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert evaluate_python_config(f"y = {ok}", "c.config").values["y"] == eval(ok)  # noqa: S307
    with pytest.raises(ValueError, match="MAX_DEPTH"):
        evaluate_python_config(f"y = [{ok}]", "c.config")


def test_the_work_meter_admits_exactly_max_work():
    # bounds.py's definition: work *beyond* MAX_WORK is refused, MAX_WORK itself is allowed
    from trainop.configs.bounds import MAX_WORK, BoundExceeded, Meter
    meter = Meter()
    meter.charge(MAX_WORK - 1)
    meter.charge(1)
    assert meter.work == MAX_WORK
    with pytest.raises(BoundExceeded, match="MAX_WORK"):
        meter.charge(1)


@pytest.mark.parametrize("value", [
    "ab", "a\\'\"", "é\U0001f600\x07", 2**4000, -2**4000, 1.5e-300, -1.7976931348623157e308,
    True, None, [1, "x", (2,)], (1,), frozenset({1, 2}), {1: "a", "b": [None]}, [], {}, set(),
])
def test_printed_size_bounds_str_repr_and_ascii(value):
    # Python's own printing is the reference: the estimate is never below it
    from trainop.configs.bounds import printed_size

    assert printed_size(value) >= max(len(str(value)), len(repr(value)), len(ascii(value)))
