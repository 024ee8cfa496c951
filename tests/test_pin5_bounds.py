"""Pins of the config evaluator's size bounds (issue #40, round-5 audit): every limit exactly at
its bound (admitted, with Python's own value) and one past it (refused, naming the limit).
Values are Python's and numpy's own (``eval``/``%``/``numpy``), the limits bounds.py's."""

from __future__ import annotations

import numpy
import pytest
from admitted import admitted

from trainop.configs import evaluate_python_config
from trainop.configs.bounds import (
    MAX_FSTRING_FIELDS,
    MAX_SAME_HASH,
    MAX_SYNTAX_DEPTH,
    MAX_WEIGHT,
    MAX_WORK,
    BoundExceeded,
    Meter,
)
from trainop.configs.percent import MAX_FIELD, NotFormattable, percent_format


def _value(source: str, name: str = "y"):
    return admitted(evaluate_python_config, source, "c.config").values[name]


def _refused(source: str, limit: str) -> None:
    with pytest.raises(ValueError, match=limit):
        evaluate_python_config(source, "c.config")


def test_work_of_exactly_max_work_is_admitted_and_one_more_step_refused():
    meter = Meter()
    admitted(meter.charge, MAX_WORK)
    with pytest.raises(BoundExceeded, match="MAX_WORK"):
        meter.charge(1)


def test_the_largest_integer_and_one_bit_more():
    assert _value("y = 2 ** 4095") == 2 ** 4095
    _refused("y = 2 ** 4096", "MAX_INT_BITS")


def test_keys_of_one_hash_up_to_max_same_hash():
    # Python hashes i * (2**61 - 1) to 0 for every i
    ok = f"y = {{i * (2**61 - 1): i for i in range({MAX_SAME_HASH})}}"
    assert _value(ok) == eval(ok[4:])  # noqa: S307 - the oracle, a literal written here
    _refused(f"y = {{i * (2**61 - 1): i for i in range({MAX_SAME_HASH + 1})}}", "MAX_SAME_HASH")


def test_equal_keys_built_separately_are_one_key():
    source = "y = {0.5 * 2 for _ in range(40)}"
    assert _value(source) == eval(source[4:]) == {1.0}  # noqa: S307


def test_range_and_arange_past_the_weight_bound_are_refused_before_they_are_built():
    # the count is checked against MAX_WEIGHT first (building them would then pass MAX_WORK)
    _refused(f"y = range({MAX_WEIGHT})", "MAX_WEIGHT")
    _refused(f"import numpy\ny = numpy.arange(0, {MAX_WEIGHT - 0.5})", "MAX_WEIGHT")
    assert _value("y = range(2, 9, 3)") == list(range(2, 9, 3))
    assert list(_value("import numpy\ny = numpy.arange(0, 2.5)")) == list(numpy.arange(0, 2.5))


def test_linspace_num_past_the_weight_bound_is_refused_before_it_is_built():
    _refused(f"import numpy\ny = numpy.linspace(0, 1, {MAX_WEIGHT})", "MAX_WEIGHT")
    assert list(_value("import numpy\ny = numpy.linspace(0, 1, 5)")) == list(
        numpy.linspace(0, 1, 5))


def test_arange_of_an_integer_past_64_bits_is_refused():
    _refused(f"import numpy\ny = numpy.arange({2**63 - 1}, {2**63})", "beyond 64 bits")
    assert list(_value(f"import numpy\ny = numpy.arange({2**63 - 2}, {2**63 - 1})")) == [
        2**63 - 2]


def test_syntax_nested_exactly_max_syntax_depth():
    # Module > Assign > UnaryOp x n > the innermost operand: n + 2 levels below the module
    n = MAX_SYNTAX_DEPTH - 2
    assert _value("y = " + "-" * n + "1") == eval("-" * n + "1")  # noqa: S307
    _refused("y = " + "-" * (n + 1) + "1", "MAX_SYNTAX_DEPTH")


def test_fstring_fields_at_the_bound():
    fields = "{1}" * MAX_FSTRING_FIELDS
    assert _value(f'y = f"{fields}"') == "1" * MAX_FSTRING_FIELDS
    # one more "{" elsewhere in the file: the f-strings are counted token by token
    assert _value(f'# {{\ny = f"{fields}"') == "1" * MAX_FSTRING_FIELDS
    _refused(f'y = f"{fields}{{1}}"', "MAX_FSTRING_FIELDS")


def test_a_joined_config_value_counts_every_separator():
    sep = "s" * 2000  # 1,000 parts: 2 MB of separators
    _refused(f'x = [0] * 1000\ny = config.value("x", None, None, "{sep}")\n', "MAX_WEIGHT")
    assert _value('x = [0] * 3\ny = config.value("x", None, None, "--")\n') == "0--0--0"


@pytest.mark.parametrize("spec", ["%{}d", "%.{}f", "%{}.{}e"])
def test_percent_fields_at_max_field_and_one_past(spec):
    at = spec.format(MAX_FIELD, MAX_FIELD)
    assert admitted(percent_format, at, 5) == at % 5
    with pytest.raises(NotFormattable, match="above"):
        percent_format(spec.format(MAX_FIELD + 1, MAX_FIELD + 1), 5)


def test_a_keyed_conversion_ends_at_its_balanced_parenthesis():
    values = {"(x)s": 3}
    assert admitted(percent_format, "%((x)s)5d", values) == "%((x)s)5d" % values  # noqa: UP031
    with pytest.raises(NotFormattable, match="above"):
        percent_format(f"%((x)s){MAX_FIELD + 1}d", values)


def test_a_width_of_thousands_of_digits_is_not_formattable():
    with pytest.raises(NotFormattable):
        percent_format("%" + "9" * 5000 + "d", 1)


def test_keyed_conversions_count_the_largest_value_each_time():
    values = {"a": "x" * (MAX_WEIGHT * 6 // 10)}  # printed twice: 1.2 x MAX_WEIGHT
    with pytest.raises(BoundExceeded, match="MAX_WEIGHT"):
        percent_format("%(a)s%(a)s", values)
    assert admitted(percent_format, "%(a)s", {"a": "xy"}) == "xy"


def test_a_value_of_exactly_max_weight_is_admitted_and_one_more_refused():
    # a str weighs 1 + its length: "x" * (MAX_WEIGHT - 1) is exactly MAX_WEIGHT
    assert _value(f'y = "x" * {MAX_WEIGHT - 1}') == "x" * (MAX_WEIGHT - 1)
    _refused(f'y = "x" * {MAX_WEIGHT}', "MAX_WEIGHT")
