"""``os.path`` functions on strings, as Python computes them, and ``__file__``.

A config may build names from its own path (RETURNN's ``learning_rate_file =
os.path.splitext(os.path.basename(__file__))[0] + ".lr"``). These functions of strings are
pure: ``OS_PATH`` maps their dotted names (``"os.path.basename"``) to callables of ``(meter,
args, kwargs)`` that run ``os.path``'s own function on string arguments only (bounded by
``MAX_WEIGHT`` like every built value). Functions that read the file system (``exists``,
``abspath``, ``realpath``, ``expanduser``, ...) are not here: they stay code.
"""

from __future__ import annotations

import os.path
from collections.abc import Callable
from typing import Any

from trainop.configs.bounds import Meter, check_weight
from trainop.configs.pure import NotPure

__all__ = ["OS_PATH"]


def _pure(function: Callable[..., Any], name: str) -> Callable[[Meter, list, dict], Any]:
    def call(meter: Meter, args: list, kwargs: dict) -> Any:
        if kwargs or not args or not all(isinstance(a, str) for a in args):
            raise NotPure(f"os.path.{name} of other than strings")
        check_weight(1 + sum(len(a) for a in args), f"os.path.{name}(...)")
        meter.charge(sum(len(a) for a in args))
        return function(*args)

    return call


_NAMES = ("basename", "dirname", "splitext", "split", "join", "normpath", "splitdrive",
          "isabs")

#: dotted name -> pure function of strings (``os.path.X`` and ``posixpath.X``).
OS_PATH: dict[str, Callable[[Meter, list, dict], Any]] = {
    f"{module}.{name}": _pure(getattr(os.path, name), name)
    for module in ("os.path", "posixpath") for name in _NAMES
}
