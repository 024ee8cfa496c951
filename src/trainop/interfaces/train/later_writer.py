"""``LaterWriter``: a TensorBoard writer opened at its first use, so that building a run
(which validates the recipe) creates no file in ``--out`` before the run starts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["LaterWriter"]


class LaterWriter:
    """Stands for the ``SummaryWriter`` ``open()`` makes; any attribute (``add_scalar``,
    ``flush``, ...) opens it first. ``close()`` before any use opens nothing."""

    def __init__(self, open: Callable[[], Any]) -> None:
        self._open, self._writer = open, None

    def add_scalar(self, *args: Any, **kwargs: Any) -> Any:
        return self._real().add_scalar(*args, **kwargs)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def _real(self) -> Any:
        if self._writer is None:
            self._writer = self._open()
        return self._writer

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._real(), name)
