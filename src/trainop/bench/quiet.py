"""Silence file descriptor 2 for a moment: C++ libraries (the profiler's kineto, TensorFlow's
absl logging) write start-up and start/stop lines there that no setting turns off."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

__all__ = ["quiet_stderr", "stderr_to"]


@contextlib.contextmanager
def stderr_to(fd: int) -> Iterator[None]:
    """Point file descriptor 2 at the open descriptor ``fd`` inside the block."""
    saved = os.dup(2)
    sys.stderr.flush()
    os.dup2(fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 to the null device inside the block (Python exceptions still
    propagate; only text written to stderr is lost)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        with stderr_to(devnull):
            yield
    finally:
        os.close(devnull)
