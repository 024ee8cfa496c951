"""RETURNN's ``Config.float``: a number given as a str in a config is read as that number.

RETURNN reads ``learning_rate``, ``min_learning_rate`` and the newbob thresholds with
``Config.float``, which converts a str value with Python's ``float()`` (``"1e-3"`` is 0.001,
``" 1e-3 "`` too, ``"inf"`` is infinity) and lets ``float()``'s ``ValueError`` through for text
that is no number (``"abc"``, ``""``). trainop reads these keys the same way; the value then
passes the key's own checks (a learning rate is finite and >= 0).
"""

from __future__ import annotations

from typing import Any

__all__ = ["FLOAT_KEYS", "config_float"]

#: The keys trainop reads that RETURNN reads with ``Config.float``.
FLOAT_KEYS = frozenset({"learning_rate", "min_learning_rate", "newbob_relative_error_threshold",
                        "newbob_error_threshold", "newbob_relative_error_grow_threshold"})


def config_float(name: str, value: Any) -> Any:
    """``value`` read as RETURNN's ``Config.float`` reads it: a str through ``float()``,
    anything else as it is (checked later by its key's rules)."""
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"Expected `{name}` to be a number, or a str that float() reads as "
                         f"one (RETURNN's Config.float: \"1e-3\"), got {value!r}") from None
