"""Something the native layer builds on first use, once per process, or the reason it cannot.

The C kernels (``build``) and the metadata reader (``metadata``) are both compiled on first use
and cached; both are switched off by ``TRAINOP_NATIVE=0``, and both fall back to Python when
their build fails. ``BuiltOnce`` holds that logic once: the first ``get()`` builds (under a
lock, so concurrent first calls build once), later calls return the result or ``None``.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["BuiltOnce", "NativeFallbackWarning"]

T = TypeVar("T")


class NativeFallbackWarning(RuntimeWarning):
    """Native code (the C kernels, the C++ metadata reader) could not be built or loaded, so
    a slower Python or foreach path runs instead; the message says why and what runs."""


class BuiltOnce(Generic[T]):
    """``build()`` on the first ``get()``; ``value`` is its result, or ``None`` with ``reason``
    saying why (``TRAINOP_NATIVE=0``, or ``failure`` followed by the error, for an exception of
    the types in ``errors``). A failed build is reported once, as a ``NativeFallbackWarning``
    (a ``RuntimeWarning``) naming the reason and ``fallback`` (what runs instead); switching
    it off on purpose is not."""

    def __init__(self, build: Callable[[], T], failure: str,
                 errors: tuple[type[Exception], ...], fallback: str = "") -> None:
        self._build, self._failure, self._errors = build, failure, errors
        self._fallback = fallback
        self._lock = threading.Lock()
        self.value: T | None = None
        self.reason: str | None = None

    def get(self) -> T | None:
        """The built thing (building it on the first call), or ``None``."""
        if self.value is not None or self.reason is not None:
            return self.value
        with self._lock:
            if self.value is None and self.reason is None:
                if os.environ.get("TRAINOP_NATIVE", "1") == "0":
                    self.reason = "switched off by TRAINOP_NATIVE=0"
                else:
                    try:
                        self.value = self._build()
                    except self._errors as error:
                        self.reason = f"{self._failure}: {error}"
                        warnings.warn(f"trainop: {self.reason}; {self._fallback} (`trainop "
                                      f"doctor` shows what is in use; TRAINOP_NATIVE=0 switches "
                                      f"native code off without this warning)",
                                      NativeFallbackWarning, stacklevel=3)
        return self.value

    def unavailable_reason(self) -> str | None:
        """``None`` if it builds, else why not."""
        self.get()
        return self.reason
