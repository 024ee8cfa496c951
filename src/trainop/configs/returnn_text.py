"""RETURNN's two config formats that are not Python: JSON and the old line format.

RETURNN's ``Config.load_file`` reads a file by its first characters: ``#!`` (or a ``.py``
name) is Python, ``{`` is JSON (with ``//`` and ``/* */`` comments allowed), anything else is
the line format, one ``key value`` per line (``#`` starts a comment; a value with a comma is
a list). Python configs are parsed by ``trainop.configs.pyconfig``; this module reads the other
two as data. A file without ``#!`` that parses as Python is taken as Python (trainop is
lenient there; RETURNN would read it line by line).

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
import json
from typing import Any

__all__ = ["parse_returnn_text", "returnn_text_kind"]

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
    except SyntaxError:
        return "lines"
    return "python"


def parse_returnn_text(text: str, filename: str = "<config>") -> dict[str, Any]:
    """The values of a RETURNN JSON or line-format config.

    Raises:
        ValueError: invalid JSON (the position named), JSON that is not an object, or a line
            that is not ``key value`` (``filename:line`` named).
    """
    body = text.strip()
    if body.startswith("{"):
        try:
            data = json.loads(_strip_json_comments(body))
        except json.JSONDecodeError as e:
            raise ValueError(f"Expected {filename} (a RETURNN config starting with '{{') to be "
                             f"JSON, got an error at line {e.lineno} column {e.colno}: {e.msg}"
                             ) from None
        if not isinstance(data, dict):  # pragma: no cover - a '{' document is an object
            raise ValueError(f"Expected {filename} to hold a JSON object, got "
                             f"{type(data).__name__}")
        return data
    values: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.partition("#")[0].strip()
        if not line:
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise ValueError(f"Expected `key value` on each line of the RETURNN line-format "
                             f"config, got {line!r} at {filename}:{number}")
        key, value = parts
        if value.find(",") > 0:
            values[key] = [_scalar(v) for v in value.split(",")]
        else:
            values[key] = _scalar(value)
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
