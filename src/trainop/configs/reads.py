"""Which names a user gave (``config_values``: RETURNN's ``++NAME VALUE``, trainop's ``--set``)
each top-level value of a Python config was computed from, found while the file is evaluated.

A value *reads* a given name when its statement looks the name up (``config.float("lr")``,
asked for whether or not it is set), uses a top-level name that read it, or runs under an
``if`` whose test read it; a name an ``if`` assigns in the branch it did not take reads that
test too (without the name the other branch may run). So when a value does not read a name,
evaluating the file without that name gives the same value: ``interfaces.recipes.settings``
finds where each ``--set`` took effect from one evaluation with the settings and one without,
instead of one evaluation per setting.

``tracking(names)`` (a context manager) makes every evaluation inside it follow ``names`` and
collects the evaluated ``PyConfig``\\ s; by default an evaluation follows its own
``config_values``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["Reads", "tracking", "tracked"]


class Reads:
    """The given names each top-level name read, as bits (one per followed name)."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = tuple(dict.fromkeys(names))
        self._bit = {name: 1 << i for i, name in enumerate(self.names)}
        self._of: dict[str, int] = {}  # top-level name -> the bits its value read
        self.now = 0  # the bits the statement being evaluated read so far
        self.control = 0  # the bits the tests of the enclosing ``if`` statements read

    def key(self, key: str) -> None:
        """A ``config.<lookup>(key, ...)``: reads ``key`` if it is followed."""
        self.now |= self._bit.get(key, 0)

    def name(self, name: str) -> None:
        """A top-level name used (or tested for): reads what its value read."""
        self.now |= self._of.get(name, 0)

    def assign(self, name: str, keep: bool = False) -> None:
        """``name`` bound (or left unbound, or ``Unresolved``) by the statement being evaluated,
        under the enclosing tests; ``keep``: its earlier value may stay (an ``if`` branch not
        taken, ``+=``)."""
        self._of[name] = (self._of.get(name, 0) if keep else 0) | self.now | self.control

    def given(self, name: str) -> None:
        """``name`` set by the user over the file's value (after the file ran, or before as a
        typed global): its value reads itself."""
        self._of[name] = self._of.get(name, 0) | self._bit.get(name, 0)

    def of(self, name: str) -> frozenset[str]:
        """The followed names the value of ``name`` read."""
        bits = self._of.get(name, 0)
        return frozenset(n for n, bit in self._bit.items() if bits & bit)


_TRACKING: contextvars.ContextVar[tuple[tuple[str, ...], list] | None] = \
    contextvars.ContextVar("trainop_config_tracking", default=None)


@contextlib.contextmanager
def tracking(names: Iterable[str]) -> Iterator[list[Any]]:
    """Inside: every Python config evaluated follows ``names``; the list yielded collects the
    evaluated ``PyConfig``\\ s (``config.reads.of(name)``), in order."""
    seen: list[Any] = []
    token = _TRACKING.set((tuple(names), seen))
    try:
        yield seen
    finally:
        _TRACKING.reset(token)


def tracked(given: Iterable[str]) -> tuple[Reads, list[Any] | None]:
    """The ``Reads`` an evaluation starts with (the names of ``tracking``, else ``given``) and
    the list to add its ``PyConfig`` to (``None`` outside ``tracking``)."""
    current = _TRACKING.get()
    if current is None:
        return Reads(given), None
    return Reads(current[0]), current[1]
