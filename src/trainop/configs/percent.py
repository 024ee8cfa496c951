"""``"text %s" % value``: printf-style string formatting of data, as Python computes it.

RETURNN configs name files from a setup name (``"data/exp-%s/train-scores.data" %
setup_name``). ``percent_format`` runs Python's own ``str.__mod__`` on a format string and
data (numbers, strings, and tuples/lists/dicts of them), after checking every conversion's
width and precision: a ``*`` or a number above ``MAX_FIELD`` (``"%0999999999d"``) is refused,
so the result stays within the evaluator's bounds.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_FIELD", "NotFormattable", "percent_format"]

#: the largest width or precision a conversion may ask for.
MAX_FIELD = 1000

_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.S)


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


def percent_format(text: str, values: Any) -> str:
    """``text % values``; ``NotFormattable`` for a field beyond ``MAX_FIELD``, a ``*`` field,
    or a value that is not data."""
    for match in _SPEC.finditer(text):
        for field in match.group(1, 2):
            if field == "*":
                raise NotFormattable("a '*' width or precision")
            if field and (len(field) > 4 or int(field) > MAX_FIELD):
                raise NotFormattable(f"a width or precision above {MAX_FIELD}")
    if not _data(values):
        raise NotFormattable(f"formatting of {type(values).__name__}")
    if isinstance(values, int) and not isinstance(values, bool) and values.bit_length() > 4096:
        raise NotFormattable("formatting of an integer above 2**4096")
    try:
        return text % values
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise NotFormattable(f"{type(exc).__name__}: {exc}") from None
