"""Strict keys: an unknown key is an error naming the closest valid one."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["check_keys", "closest", "closest_names"]


def closest(name: str, valid: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The valid name closest to ``name`` (difflib ratio >= ``cutoff``), or ``None``."""
    matches = difflib.get_close_matches(name, list(valid), n=1, cutoff=cutoff)
    return matches[0] if matches else None


def closest_names(name: str, valid: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` valid names closest to ``name`` (case-insensitive difflib ratio >= 0.5)."""
    valid = list(valid)
    lowered = {v.lower(): v for v in valid}
    matches = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.5)
    return [lowered[m] for m in matches]


def check_keys(given: Mapping[str, Any], valid: Iterable[str], where: str) -> None:
    """Raise ``ValueError`` for the first key of ``given`` not in ``valid``:
    ``Unknown key 'gradient_clip_globl_norm' in <where>; did you mean
    'gradient_clip_global_norm'?``."""
    valid = list(valid)
    for key in given:
        if key not in valid:
            hint = closest(str(key), valid)
            suggestion = f"; did you mean {hint!r}?" if hint else f"; valid keys: {sorted(valid)}"
            raise ValueError(f"Unknown key {key!r} in {where}{suggestion}")
