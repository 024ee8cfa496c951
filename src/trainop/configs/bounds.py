"""The evaluator's bounds: what a recipe file may build, checked before it is built.

A recipe is data, so its values are small: the largest real per-epoch ``learning_rates`` lists
have about a thousand entries, the largest RETURNN network dicts some tens of thousands of
values. The limits below are a thousand times that, and every value the config evaluator
(``trainop.configs.pyconfig``) or the YAML/JSON readers build is checked against them *before*
it is built (``[a] * n`` from the size of ``a`` and ``n``; ``a ** b`` from the bits of ``a``
and ``b``; ``range``/``numpy.linspace`` from their count; ``str(x)`` from the size of ``x``):

=====================  =========================  ==============================================
limit                  value                      what it bounds
=====================  =========================  ==============================================
``MAX_FILE_BYTES``     4 MiB                      the file (a regular file: no FIFO, no device)
``MAX_WEIGHT``         1,100,000                  one value: its elements, counted every time
                                                  they appear (``[a] * 10`` counts ``a`` ten
                                                  times), plus the characters of its strings
``MAX_WORK``           2,000,000                  elements built and loop steps taken while
                                                  evaluating one file
``MAX_INT_BITS``       4,096                      the bits of an integer (about 1,233 digits)
``MAX_DEPTH``          100                        nesting of a value (lists in lists, ...)
``MAX_SYNTAX_DEPTH``   200                        nesting of the file's syntax tree
``MAX_FSTRING_FIELDS`` 10,000                     ``{...}`` fields of one f-string literal
                                                  (Python's parser is quadratic in them:
                                                  refused before the file is parsed)
``MAX_SAME_HASH``      16                         distinct keys of one dict or set sharing one
                                                  hash (``{i * (2**61 - 1): 0 ...}`` all hash
                                                  to 0: building it would be quadratic)
=====================  =========================  ==============================================

A value beyond a limit is a ``trainop.RecipeError`` naming the file, the line and the limit.
Messages show values through ``trainop.contract.validation.describe``, a ``reprlib`` repr that
never formats the whole of a large value.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_FSTRING_FIELDS", "MAX_INT_BITS", "MAX_SAME_HASH",
           "MAX_SYNTAX_DEPTH", "MAX_WEIGHT", "MAX_WORK", "BoundExceeded", "KeyGuard", "Meter",
           "check_int_bits", "check_hashes", "check_weight", "is_array", "is_numpy_scalar",
           "printed_size"]

MAX_FILE_BYTES = 4 << 20
MAX_WEIGHT = 1_100_000
MAX_WORK = 2_000_000
MAX_INT_BITS = 4096
MAX_DEPTH = 100
MAX_SYNTAX_DEPTH = 200
MAX_SAME_HASH = 16
MAX_FSTRING_FIELDS = 10_000


class BoundExceeded(Exception):
    """A value would exceed a limit: ``reason`` says which (the caller adds file and line)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def is_array(value: Any) -> bool:
    """A numpy array (the evaluator keeps 1-D arrays as values)."""
    return type(value).__name__ == "ndarray" and type(value).__module__ == "numpy"


def is_numpy_scalar(value: Any) -> bool:
    """A numpy scalar (``numpy.float64``, ``numpy.int64``: an element of an array)."""
    return type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0


class Meter:
    """Weights and depths of values (memoized by identity: the meter keeps the values it has
    measured alive, so an identity is never reused), and the work done for one file."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Any, int, int]] = {}
        self.work = 0

    def charge(self, amount: int) -> None:
        """Count ``amount`` elements built (or loop steps); beyond ``MAX_WORK`` raise."""
        self.work += max(int(amount), 0)
        if self.work > MAX_WORK:
            raise BoundExceeded(f"evaluating the file takes more than {MAX_WORK:,} steps "
                                f"(MAX_WORK)")

    def weight(self, value: Any) -> int:
        """Elements of ``value`` counted where they appear, plus string characters."""
        return self._measure(value, 0)[0]

    def check(self, value: Any, what: str = "a value") -> Any:
        """``value`` when within ``MAX_WEIGHT``/``MAX_DEPTH``/``MAX_INT_BITS``, else raise."""
        weight, depth = self._measure(value, 0)
        check_weight(weight, what)
        if depth > MAX_DEPTH:
            raise BoundExceeded(f"{what} nests deeper than {MAX_DEPTH} levels (MAX_DEPTH)")
        return value

    def _measure(self, value: Any, level: int) -> tuple[int, int]:
        if value is None or isinstance(value, bool | float | complex):
            return 1, 0
        if isinstance(value, int):
            check_int_bits(value.bit_length())
            return 1, 0
        if isinstance(value, str | bytes):
            return 1 + len(value), 0
        if is_array(value):
            return 1 + int(value.size), int(value.ndim)
        if not isinstance(value, list | tuple | dict | set | frozenset):
            return 1, 0
        key = id(value)
        if key in self._seen:
            _, weight, depth = self._seen[key]
            return weight, depth
        if level > MAX_DEPTH:
            raise BoundExceeded(f"a value nests deeper than {MAX_DEPTH} levels (MAX_DEPTH)")
        items = [x for kv in value.items() for x in kv] if isinstance(value, dict) else value
        weight, depth = 1, 0
        for item in items:
            w, d = self._measure(item, level + 1)
            weight += w
            depth = max(depth, d + 1)
            if weight > MAX_WEIGHT:
                break  # the caller's check reports it; no need to count further
        depth = max(depth, 1)
        self._seen[key] = (value, weight, depth)
        return weight, depth


class KeyGuard:
    """The keys of one dict or set being built, grouped by hash: more than ``MAX_SAME_HASH``
    distinct keys with one hash raise before they are inserted (each insertion would compare
    against all of them). Equal keys (``[0] * 1000`` into a set) are one key, not a
    collision; the cost is linear in the keys times at most ``MAX_SAME_HASH``."""

    def __init__(self) -> None:
        self._groups: dict[int, list[Any]] = {}

    def add(self, key: Any) -> Any:
        group = self._groups.setdefault(hash(key), [])
        if not any(k is key or k == key for k in group):
            group.append(key)
            if len(group) > MAX_SAME_HASH:
                raise BoundExceeded(f"a dict or set would hold more than {MAX_SAME_HASH} "
                                    f"distinct keys with one hash (MAX_SAME_HASH; "
                                    f"{_short_repr(key)} is one): building it is quadratic")
        return key


def check_hashes(keys: Any) -> Any:
    """``keys`` (an iterable, returned as a list) when no hash is shared by more than
    ``MAX_SAME_HASH`` distinct keys, else raise ``BoundExceeded``."""
    guard = KeyGuard()
    return [guard.add(k) for k in keys]


def _short_repr(value: Any) -> str:
    text = repr(value) if isinstance(value, int | float | str | bytes) and not (
        isinstance(value, str | bytes) and len(value) > 40) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def printed_size(value: Any, _memo: dict[int, int] | None = None) -> int:
    """An upper bound on ``len(str(value))``, ``len(repr(value))`` and ``len(ascii(value))``,
    found without building the text (a value shared in many places is measured once): a
    4,096-bit integer prints 1,233 digits, so ``[2**4000] * 10**6`` is 1.2 GB of text."""
    memo = {} if _memo is None else _memo
    key = id(value)
    if key in memo:
        return memo[key]
    if isinstance(value, str):  # an escape takes at most 10 characters (\\U0001f600)
        plain = value.isascii() and value.isprintable()
        size = 2 + (len(value) + value.count("\\") + value.count("'") if plain
                    else 10 * len(value))
    elif isinstance(value, bool) or value is None:
        size = 5
    elif isinstance(value, int):
        size = 2 + value.bit_length() * 302 // 1000 + 1
    elif isinstance(value, float):
        size = 24
    elif isinstance(value, list | tuple | set | frozenset) and not is_array(value):
        memo[key] = 0  # a cycle adds nothing
        size = 16 + sum(2 + printed_size(v, memo) for v in value)
    elif isinstance(value, dict):
        memo[key] = 0
        size = 2 + sum(4 + printed_size(k, memo) + printed_size(v, memo)
                       for k, v in value.items())
    elif is_array(value):  # numpy summarises beyond 1,000 elements
        size = 64 + 32 * min(int(value.size), 1000)
    else:
        size = len(repr(value))
    memo[key] = size
    return size


def check_weight(weight: int, what: str = "a value") -> None:
    """Raise when ``weight`` exceeds ``MAX_WEIGHT``."""
    if weight > MAX_WEIGHT:
        raise BoundExceeded(f"{what} would hold more than {MAX_WEIGHT:,} elements and "
                            f"characters (MAX_WEIGHT; {weight:,})")


def check_int_bits(bits: int) -> None:
    """Raise when an integer of ``bits`` bits exceeds ``MAX_INT_BITS``."""
    if bits > MAX_INT_BITS:
        raise BoundExceeded(f"an integer would have more than {MAX_INT_BITS:,} bits "
                            f"(MAX_INT_BITS; about {bits:,})")
