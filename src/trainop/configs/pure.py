"""The functions a config may call: pure builtins and numpy's range makers, run on checked,
bounded arguments.

Builtins (when the config does not rebind the name): ``dict``, ``list``, ``tuple``, ``set``,
``int``, ``float``, ``str``, ``bool``, ``min``, ``max``, ``abs``, ``len``, ``sum``, ``round``,
``range``, ``sorted``, ``reversed``, ``zip``, ``enumerate``. numpy (through ``import numpy``
or ``import numpy as np``): ``linspace``, ``arange``, ``geomspace``, ``logspace``,
``concatenate``, ``array``, ``asarray``: numpy itself computes them (float64, numpy's own
rounding), after their arguments have been checked to be numbers (or 1-D sequences of
numbers) and the result's size to be within ``MAX_WEIGHT``. Anything else a config calls is
code and is not run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from trainop.configs.bounds import (
    MAX_WEIGHT,
    BoundExceeded,
    Meter,
    check_hashes,
    check_weight,
    is_array,
    is_numpy_scalar,
)

__all__ = ["BUILTINS", "NUMPY", "NotPure", "elements", "is_array"]


class NotPure(Exception):
    """Arguments the pure function does not take as data (the call stays unresolved)."""


def _real(value: Any, what: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        if is_numpy_scalar(value):
            return value.item()
        raise NotPure(f"{what} must be a number, got {type(value).__name__}")
    return value


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise NotPure(f"{what} must be an int, got {type(value).__name__}")
    if value < 0:
        raise NotPure(f"{what} must be >= 0, got {value}")
    check_weight(value + 1, f"{what}={value}")
    return value


def elements(meter: Meter, value: Any) -> list | Any:
    """The elements of a built value (a list, tuple, str, dict, set, 1-D array; its length
    charged as work); ``NotPure`` for anything else."""
    if is_array(value):
        if value.ndim != 1:
            raise NotPure("only 1-D arrays are iterated")
        return value.tolist()
    if isinstance(value, list | tuple | str | dict | set | frozenset):
        meter.charge(len(value))
        return value
    raise NotPure(f"iterates over {type(value).__name__}")


def _simple(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(meter: Meter, args: list, kwargs: dict) -> Any:
        for a in (*args, *kwargs.values()):
            if isinstance(a, list | tuple | dict | set) or is_array(a):
                meter.charge(meter.weight(a))
        return fn(*args, **kwargs)
    return call


def _container(kind: type) -> Callable[..., Any]:
    def call(meter: Meter, args: list, kwargs: dict) -> Any:
        if kwargs and kind is not dict:
            raise NotPure(f"{kind.__name__}() with keywords")
        if not args:
            return kind(**kwargs)
        if len(args) != 1:
            raise NotPure(f"{kind.__name__}() with {len(args)} arguments")
        items = elements(meter, args[0])
        check_weight(meter.weight(items) + meter.weight(kwargs))
        if kind is set:
            check_hashes(items)
        elif kind is dict and not isinstance(items, dict):  # pairs (``dict(zip(k, v))``)
            check_hashes(p[0] for p in items if isinstance(p, list | tuple) and len(p) == 2)
        return kind(items, **kwargs)
    return call


def _str(meter: Meter, args: list, kwargs: dict) -> str:
    if kwargs or len(args) > 1:
        raise NotPure("str() with an encoding")
    if not args:
        return ""
    value = args[0]
    if isinstance(value, str):
        return value
    # a repr is at most ~24 characters per number, 4 per string character: check first
    check_weight(32 * meter.weight(value), "str() of the value")
    text = str(value)
    check_weight(len(text), "the string")
    return text


def _int(meter: Meter, args: list, kwargs: dict) -> int:
    if args and isinstance(args[0], float) and not math.isfinite(args[0]):
        raise NotPure("int() of an infinite or NaN float")
    return int(*args, **kwargs)


def _range(meter: Meter, args: list, kwargs: dict) -> list[int]:
    if kwargs or not 1 <= len(args) <= 3 or not all(
            isinstance(a, int) and not isinstance(a, bool) for a in args):
        raise NotPure("range() of other than 1 to 3 ints")
    span = range(*args)
    try:
        count = len(span)
    except OverflowError:  # more than sys.maxsize elements
        count = MAX_WEIGHT + 1
    check_weight(count + 1, f"range{tuple(args)}")
    meter.charge(len(span))
    return list(span)


def _reduce(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(meter: Meter, args: list, kwargs: dict) -> Any:
        if "key" in kwargs:  # a key function would call a value the caller resolved
            raise NotPure(f"{fn.__name__}() with a key function")
        if len(args) == 1 and not isinstance(args[0], int | float):
            args = [elements(meter, args[0])]
        if fn is sum and not all(_is_real(v) for v in (*args[0], *args[1:], *kwargs.values())):
            raise NotPure("sum() of other than numbers")  # sum of lists is quadratic
        return fn(*args, **kwargs)
    return call


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) or is_numpy_scalar(value)


def _round(meter: Meter, args: list, kwargs: dict) -> Any:
    digits = args[1] if len(args) > 1 else kwargs.get("ndigits")
    if digits is not None and (not isinstance(digits, int) or abs(digits) > 400):
        raise NotPure("round() to more than 400 digits")  # round(5, -10**9) computes 10**10**9
    return round(*args, **kwargs)


def _enumerate_like(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(meter: Meter, args: list, kwargs: dict) -> list:
        items = [elements(meter, a) if not isinstance(a, int) else a for a in args]
        out = list(fn(*items, **kwargs))
        check_weight(meter.weight(out))
        meter.charge(len(out))
        return out
    return call


BUILTINS: dict[str, Callable[[Meter, list, dict], Any]] = {
    "dict": _container(dict), "list": _container(list), "tuple": _container(tuple),
    "set": _container(set), "str": _str, "int": _int, "float": _simple(float),
    "bool": _simple(bool), "abs": _simple(abs), "round": _round, "len": _simple(len),
    "min": _reduce(min), "max": _reduce(max), "sum": _reduce(sum), "sorted": _reduce(sorted),
    "range": _range, "reversed": _enumerate_like(reversed), "zip": _enumerate_like(zip),
    "enumerate": _enumerate_like(enumerate),
}


# ----------------------------------------------------------------------------- numpy
def _numpy():
    import numpy

    return numpy


def _spaced(name: str, extra: tuple[str, ...]) -> Callable[..., Any]:
    """``linspace``/``geomspace``/``logspace``: ``(start, stop, num=50, endpoint=True, ...)``."""
    def call(meter: Meter, args: list, kwargs: dict) -> Any:
        names = ("start", "stop", "num", "endpoint", *extra)
        if len(args) > len(names):
            raise NotPure(f"numpy.{name} with {len(args)} arguments")
        given = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names or key in given:
                raise NotPure(f"numpy.{name} with argument {key!r}")
            given[key] = value
        if "start" not in given or "stop" not in given:
            raise NotPure(f"numpy.{name} without start and stop")
        given["start"] = _real(given["start"], "start")
        given["stop"] = _real(given["stop"], "stop")
        given["num"] = _count(given.get("num", 50), "num")
        given["endpoint"] = bool(given.get("endpoint", True))
        if "base" in given:
            given["base"] = _real(given["base"], "base")
        meter.charge(given["num"])
        numpy = _numpy()
        with numpy.errstate(all="ignore"):
            return getattr(numpy, name)(**given)
    return call


def _arange(meter: Meter, args: list, kwargs: dict) -> Any:
    names = ("start", "stop", "step")
    given = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names or key in given:
            raise NotPure(f"numpy.arange with argument {key!r}")
        given[key] = value
    if not 1 <= len(given) <= 3 or "start" not in given:
        raise NotPure("numpy.arange without a start")
    values = [_real(given[k], k) for k in names if k in given]
    if any(isinstance(v, int) and not -2**63 <= v < 2**63 for v in values):
        # numpy would make an object array of Python ints, beyond the bounds' reach
        raise BoundExceeded(f"numpy.arange{_brief(values)} with an integer beyond 64 bits "
                            f"(the array would hold Python ints, beyond the bounds)")
    start, stop, step = (0, values[0], 1) if len(values) == 1 else (*values, 1)[:3]
    if step == 0 or not all(math.isfinite(v) for v in (start, stop, step)):
        raise NotPure("numpy.arange with a zero or non-finite argument")
    count = max(0, math.ceil((stop - start) / step))
    check_weight(count + 1, f"numpy.arange{tuple(values)}")
    meter.charge(count)
    return _numpy().arange(*values)


def _brief(values: list) -> str:
    text = repr(tuple(values))
    return text if len(text) <= 60 else text[:57] + "..."


def _array_of(meter: Meter, value: Any) -> Any:
    """A 1-D float/int array from a list/tuple of numbers or a 1-D array."""
    if is_array(value):
        if value.ndim != 1:
            raise NotPure("only 1-D arrays")
        return value
    if not isinstance(value, list | tuple):
        raise NotPure(f"an array of {type(value).__name__}")
    numbers = [_real(v, "an element") for v in value]
    meter.charge(len(numbers))
    array = _numpy().asarray(numbers)
    if array.dtype.kind not in "iuf":  # object arrays of big ints: unbounded arithmetic
        raise NotPure("an array of integers beyond 64 bits")
    return array


def _array(meter: Meter, args: list, kwargs: dict) -> Any:
    if len(args) != 1 or kwargs:
        raise NotPure("numpy.array with more than the values")
    return _array_of(meter, args[0]).copy()


def _concatenate(meter: Meter, args: list, kwargs: dict) -> Any:
    if len(args) != 1 or kwargs or not isinstance(args[0], list | tuple):
        raise NotPure("numpy.concatenate of other than one sequence of arrays")
    parts = [_array_of(meter, part) for part in args[0]]
    check_weight(1 + sum(p.size for p in parts), "numpy.concatenate(...)")
    meter.charge(sum(p.size for p in parts))
    return _numpy().concatenate(parts)


NUMPY: dict[str, Callable[[Meter, list, dict], Any]] = {
    "numpy.linspace": _spaced("linspace", ()),
    "numpy.geomspace": _spaced("geomspace", ()),
    "numpy.logspace": _spaced("logspace", ("base",)),
    "numpy.arange": _arange,
    "numpy.concatenate": _concatenate,
    "numpy.array": _array,
    "numpy.asarray": _array,
}
