"""``"text %s" % value``: printf-style string formatting of data, as Python computes it.

RETURNN configs name files from a setup name (``"data/exp-%s/train-scores.data" %
setup_name``). ``percent_format`` runs Python's own ``str.__mod__`` on a format string and
data (numbers, strings, and tuples/lists/dicts of them), after checking every conversion's
width and precision: a ``*`` or a number above ``MAX_FIELD`` (``"%0999999999d"``) is refused.
A format whose result could exceed ``MAX_WEIGHT`` characters is a ``BoundExceeded`` before it
is built: each conversion is counted at ``MAX_FIELD`` plus ``_NUMBER`` characters plus the
printed size of the value it takes (``bounds.printed_size``, never built); a ``%(key)s`` at
the dict's largest value every time (``"%(a)s" * 10**5 % {"a": "x" * 10**6}`` is refused).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trainop.configs.bounds import check_weight, printed_size

__all__ = ["MAX_FIELD", "NotFormattable", "percent_format"]

#: the largest width or precision a conversion may ask for.
MAX_FIELD = 1000

#: the most characters a number takes beyond its ``ascii``: ``%o`` of a 4,096-bit int has
#: 1,366 digits, ``%f`` of a float at most 309 before the point.
_NUMBER = 1400

#: what follows ``%`` (and a ``(key)``): flags, width, precision, length, the type
_REST = re.compile(r"[#0\- +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.S)


class NotFormattable(Exception):
    """The format or its values are not data within the bounds."""


def _data(value: Any, depth: int = 0) -> bool:
    if isinstance(value, bool | int | float | str | type(None)):
        return True
    if depth < 4 and isinstance(value, list | tuple):
        return all(_data(v, depth + 1) for v in value)
    if depth < 4 and isinstance(value, dict):
        return all(_data(k, depth + 1) and _data(v, depth + 1) for k, v in value.items())
    return False


def _conversions(text: str) -> Iterator[tuple[bool, str | None, str | None, str]]:
    """``(keyed, width, precision, type)`` of each conversion, parsed as Python parses them:
    a ``%(key)`` ends at its *balanced* ``)`` (``"%((x)s)0999999999d"`` has the key
    ``(x)s`` and the width 999999999)."""
    i = text.find("%")
    while i != -1:
        j, keyed = i + 1, text.startswith("(", i + 1)
        if keyed:
            depth, j = 1, j + 1
            while j < len(text) and depth:
                depth += (text[j] == "(") - (text[j] == ")")
                j += 1
            if depth:
                return  # an incomplete key: Python's ValueError
        match = _REST.match(text, j)
        if match is None:
            return  # a lone '%' at the end: Python's ValueError
        yield keyed, match.group(1), match.group(2), match.group(3)
        i = text.find("%", match.end())


def percent_format(text: str, values: Any) -> str:
    """``text % values``; ``NotFormattable`` for a field beyond ``MAX_FIELD``, a ``*`` field,
    or a value that is not data."""
    conversions, keyed = 0, False
    for is_keyed, width, precision, kind in _conversions(text):
        conversions += kind != "%"
        keyed = keyed or is_keyed
        for field in (width, precision):
            if field == "*":
                raise NotFormattable("a '*' width or precision")
            digits = (field or "").lstrip("0")  # the number, not its digits: '.00005' is 5
            if len(digits) > len(str(MAX_FIELD)) or int(digits or 0) > MAX_FIELD:
                raise NotFormattable(f"a width or precision above {MAX_FIELD}")
    if not _data(values):
        raise NotFormattable(f"formatting of {type(values).__name__}")
    if isinstance(values, int) and not isinstance(values, bool) and values.bit_length() > 4096:
        raise NotFormattable("formatting of an integer above 2**4096")
    _check_size(text, values, conversions, keyed)
    try:
        return text % values
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise NotFormattable(f"{type(exc).__name__}: {exc}") from None


def _check_size(text: str, values: Any, conversions: int, keyed: bool) -> None:
    """``BoundExceeded`` where ``text % values`` could have more than ``MAX_WEIGHT``
    characters: every conversion at its widest, each value taken once (a tuple's elements,
    or the one value), or, with ``%(key)`` conversions, the dict's largest value every time."""
    per = MAX_FIELD + _NUMBER
    if keyed and isinstance(values, dict):
        largest = max((printed_size(v) for v in values.values()), default=0)
        size = conversions * (per + largest)
    else:
        taken = values if isinstance(values, tuple) else (values,)
        size = conversions * per + sum(printed_size(v) for v in taken)
    check_weight(len(text) + size, "the formatted string ('...' % ...)")
