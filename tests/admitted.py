"""``admitted(fn, ...)``: a call at the edge of a limit that must be accepted. A refusal there
(any ``ValueError``/``TypeError``, trainop's ``CorruptCheckpoint``, ``RecipeError`` and
``BoundExceeded`` included) fails the test as an assertion naming the refusal, not as an error
the test did not expect (the mutation audit counts only assertions about behaviour)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def admitted(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; ``pytest.fail`` where it raises."""
    try:
        return fn(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - any refusal at the edge is the failure
        pytest.fail(f"refused at the edge of its limit: {type(error).__name__}: {error}")
