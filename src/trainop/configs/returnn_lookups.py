"""RETURNN's ``config.bool/int/float/value/typed_value/list/has(...)`` in a config, resolved
as data, with the values the user sets.

A RETURNN config runs with ``config`` (RETURNN's ``Config``) in its globals; its lookups read
what is set so far: the file's own earlier assignments and the values given from outside
(``Config.typed_dict``), or the command line's text (``++name value``, ``Config.dict``: the
text split at commas). ``Lookups`` answers them as RETURNN's ``returnn/config.py`` does:

- ``has(name)``: the name is set (typed, or text);
- ``typed_value(name, default=None, index=None)``: the typed value, else ``default`` (text
  is not seen);
- ``value(name, default, index=None, list_join_str=",")``: a typed value as ``str`` (a list
  joined, ``None`` -> ``default``), text joined, else ``default``;
- ``int``/``bool``/``float(name, default, index=0)``: a typed value as it is (a bool also from
  an int); text parsed (``int(text)``; ``bool`` as ``to_bool``: an int, or
  true/yes/on/false/no/off; ``float(text)``), else ``default``;
- ``list(name, default=None)``: a typed value as a list (a scalar wrapped), the text's parts,
  else ``default`` (``[]``).

A value of the wrong type (``config.int`` of a typed ``"x"``), where RETURNN asserts, is not
data: the lookup stays unresolved. Text comes from ``Text`` (what the command line's ``--set
NAME=VALUE`` gives); any other given value is typed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainop.configs.bounds import check_weight, printed_size

__all__ = ["LOOKUPS", "Text", "lookup", "lookup_cost"]


class Text(str):
    """A value set as command-line text (RETURNN's ``++name value``)."""


class LookupError_(Exception):
    """The lookup is not data (RETURNN would assert or fail)."""


def _parts(text: str) -> list[str]:
    return text.split(",") if text.find(",") > 0 else [text]


def _to_bool(text: str) -> bool:
    try:
        return bool(int(text))
    except ValueError:
        pass
    if text.lower() in ("true", "yes", "on", "1"):
        return True
    if text.lower() in ("false", "no", "off", "0"):
        return False
    raise LookupError_(f"to_bool cannot read {text!r}")


def _indexed(value: Any, index: int | None) -> Any:
    if index is None:
        return value
    if isinstance(value, list | tuple):
        return value[index]
    if index != 0:
        raise LookupError_(f"index {index} of a value that is not a list")
    return value


def _args(args: list, kwargs: dict, names: tuple[str, ...], defaults: tuple) -> list:
    """Positional and keyword arguments against ``names`` (the first required)."""
    if len(args) > len(names) or set(kwargs) - set(names):
        raise LookupError_("arguments other than RETURNN's")
    out = list(args) + list(defaults[len(args) - 1:]) if args else []
    if not args:
        if names[0] not in kwargs:
            raise LookupError_("no name")
        out = [kwargs[names[0]], *defaults]
    for i, name in enumerate(names):
        if name in kwargs:
            out[i] = kwargs[name]
    if not isinstance(out[0], str):
        raise LookupError_(f"a name that is not a string: {out[0]!r}")
    return out


_MISSING = object()


def _join(separator: Any, parts: list) -> str:
    """``separator.join(str(p) for p in parts)``, its size checked against ``MAX_WEIGHT``
    before any part is printed (a long ``list_join_str`` between many parts, or parts that
    print long, would otherwise be built whatever their size)."""
    if not isinstance(separator, str):
        raise LookupError_(f"a list_join_str that is not a string: {type(separator).__name__}")
    memo: dict[int, int] = {}
    check_weight(sum(len(p) if isinstance(p, str) else printed_size(p, memo) for p in parts)
                 + len(separator) * max(len(parts) - 1, 0), "config.value(...) joined")
    return separator.join(str(p) for p in parts)


def lookup(method: str, typed: Mapping[str, Any], args: list, kwargs: dict) -> Any:
    """``config.<method>(*args, **kwargs)`` over ``typed`` (name -> value; ``Text`` values are
    command-line text). ``LookupError_`` where RETURNN would fail or the value is unknown."""
    table = {"has": (("key",), ()), "typed_value": (("key", "default", "index"), (None, None)),
             "value": (("key", "default", "index", "list_join_str"), (_MISSING, None, ",")),
             "int": (("key", "default", "index"), (_MISSING, 0)),
             "bool": (("key", "default", "index"), (_MISSING, 0)),
             "float": (("key", "default", "index"), (_MISSING, 0)),
             "list": (("key", "default"), (None,))}
    names, defaults = table[method]
    key, *rest = _args(args, kwargs, names, defaults)
    if any(r is _MISSING for r in rest):
        raise LookupError_(f"config.{method} without a default")
    value = typed.get(key, _MISSING)
    text = isinstance(value, Text)
    if method == "has":
        return value is not _MISSING
    if method == "typed_value":
        default, index = rest
        return _indexed(default if value is _MISSING or text else value, index)
    if method == "value":
        default, index, join = rest
        if value is _MISSING:
            return default
        if text:
            parts = _parts(value)
            return _join(join, parts) if index is None else parts[index]
        if index is not None:
            return _join("", [value[index]])  # str(), its size checked first
        if isinstance(value, list | tuple):
            return _join(join, list(value))
        return default if value is None else _join("", [value])
    if method == "list":
        default = [] if rest[0] is None else rest[0]
        if value is _MISSING:
            return default
        if text:
            return _parts(value)
        if value is None:
            return default
        return list(value) if isinstance(value, list | tuple) else [value]
    default, index = rest
    if value is _MISSING:
        return default
    if text:
        part = _parts(value)[index]
        try:
            if method == "int":
                return int(part)
            if method == "float":
                return float(part)
        except ValueError as exc:
            raise LookupError_(str(exc)) from None
        return default if not part else _to_bool(part)
    value = _indexed(value, index)
    if method == "bool" and isinstance(value, int):
        value = bool(value)
    kinds = {"int": int, "bool": bool, "float": (int, float, str)}[method]
    if value is not None and not isinstance(value, kinds):
        raise LookupError_(f"config.{method}({key!r}) of {type(value).__name__}")
    if method == "float" and isinstance(value, str):
        try:
            return float(value)
        except ValueError as exc:
            raise LookupError_(str(exc)) from None
    return value


def lookup_cost(method: str, value: Any) -> int:
    """The elements ``config.<method>`` reads beyond the name itself (a work budget's
    count; the name is found in constant time): the characters of command-line text it
    splits, the elements of a typed list ``value``/``list`` join or copy; else 0."""
    if isinstance(value, Text):
        return 0 if method in ("has", "typed_value") else len(value)
    if method in ("value", "list") and isinstance(value, list | tuple):
        return len(value)
    return 0


#: the lookups a config may call on ``config``.
LOOKUPS: tuple[str, ...] = ("has", "typed_value", "value", "int", "bool", "float", "list")
