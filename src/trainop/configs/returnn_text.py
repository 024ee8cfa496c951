"""RETURNN's two config formats that are not Python: JSON and the old line format.

RETURNN's ``Config.load_file`` reads a file by its first characters: ``#!`` (or a ``.py``
name) is Python, ``{`` is JSON (with ``//`` and ``/* */`` comments allowed), anything else is
the line format, one ``key value`` per line (``#`` starts a comment; a value with a comma is
a list). Python configs are parsed by ``trainop.configs.pyconfig``; this module reads the other
two as data. A file without ``#!`` that parses as Python is taken as Python (trainop is
lenient there; RETURNN would read it line by line); one that does not parse is read as the
line format only when every line is a ``key value`` line (no indentation, no Python keyword,
no ``=``, ``(`` or ``[`` right after the key), else it is a Python config with a syntax error
(``RecipeError``), never re-read as another format.

Line-format values are strings in RETURNN, converted when an option is read (``config.float``,
``config.int``, ``config.bool``); here each value (and each element of a list) becomes an int,
a float, a bool (``true``/``false``/``yes``/``no``/``on``/``off``, any case) or ``None``
(``None``) when it reads as one, and stays a string otherwise.

Example:
    >>> from trainop.configs.returnn_text import parse_returnn_text
    >>> parse_returnn_text("learning_rate 0.01  # Adam\\nadam true\\nlearning_rates 0.1,0.2\\n")
    {'learning_rate': 0.01, 'adam': True, 'learning_rates': [0.1, 0.2]}
"""

from __future__ import annotations

import ast
import keyword
import re
from typing import Any

from trainop.configs.bounds import BoundExceeded, Meter
from trainop.configs.errors import RecipeError
from trainop.configs.structured import load_json

__all__ = ["parse_returnn_text", "returnn_text_kind"]

_LINE = re.compile(r"[A-Za-z_][\w.\-]*[ \t]+[^\s=(\[]")
_PYTHON_LINE = re.compile(r"[\w.]+(\s*[-+*/]?=|[(\[])")
_PYTHON_WORDS = set(keyword.kwlist) | {"print", "exec"}

_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


def returnn_text_kind(text: str, filename: str = "<config>") -> str:
    """``"python"``, ``"json"`` or ``"lines"``: how RETURNN would read this file (a file
    without ``#!`` that parses as Python counts as Python)."""
    body = text.strip()
    if body.startswith("#!") or filename.endswith(".py"):
        return "python"
    if body.startswith("{"):
        return "json"
    try:
        ast.parse(text, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "lines" if _line_format(text) else "python"
    return "python"


def _line_format(text: str) -> bool:
    """Some line is ``key value`` and none reads as Python (indented, a Python keyword first,
    or ``=``/``(``/``[``/``.`` right after the first name)."""
    seen = False
    for line in text.splitlines():
        content = line.partition("#")[0]
        if not content.strip():
            continue
        first = content.split(None, 1)[0]
        if content[0].isspace() or first in _PYTHON_WORDS or _PYTHON_LINE.match(content):
            return False
        seen = seen or bool(_LINE.match(content))
    return seen


def parse_returnn_text(text: str, filename: str = "<config>") -> dict[str, Any]:
    """The values of a RETURNN JSON or line-format config.

    Raises:
        RecipeError: invalid JSON (the position named), JSON that is not an object, or a line
            that is not ``key value`` (``filename:line`` named).
    """
    body = text.strip()
    if body.startswith("{"):
        data = load_json(_strip_json_comments(body), filename)
        if not isinstance(data, dict):  # pragma: no cover - a '{' document is an object
            raise RecipeError(filename, None, f"expected a JSON object, got "
                                              f"{type(data).__name__}")
        return data
    values: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.partition("#")[0].strip()
        if not line:
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise RecipeError(filename, number, f"expected `key value` on each line of the "
                                                f"RETURNN line-format config, got "
                                                f"{line[:60]!r}")
        key, value = parts
        if value.find(",") > 0:
            values[key] = [_scalar(v) for v in value.split(",")]
        else:
            values[key] = _scalar(value)
        try:  # an int of up to 4,300 digits (Python's limit) is cheap to build; checked after
            Meter().check(values[key])
        except BoundExceeded as exc:
            raise RecipeError(filename, number, exc.reason) from None
    return values


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.lower() in _BOOLS:
        return _BOOLS[text.lower()]
    if text == "None":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _strip_json_comments(text: str) -> str:
    """``text`` without ``// ...`` and ``/* ... */`` comments outside strings."""
    out = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
        elif c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)
