"""The run's files written whole or not at all: each is written beside its final name and
moved over it in one rename, so an interrupted write (Ctrl-C while matplotlib encodes the
PNG, a full disk) leaves no truncated file and no temporary."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["write_whole"]


def write_whole(path: str | Path, write: Callable[[Path], object]) -> Path:
    """``write(temporary)`` then the temporary renamed to ``path``; on any exception
    (``KeyboardInterrupt`` too) the temporary is removed and ``path`` is as it was."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(partial)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path
