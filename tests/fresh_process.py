"""Running a snippet in a fresh interpreter with its own build cache (first-use builds)."""

from __future__ import annotations

import os
import subprocess
import sys

import trainop


def run_fresh(code: str, cache_dir, **env: str) -> list[str]:
    """The stdout lines of ``python -c code`` with this trainop importable, its build cache at
    ``cache_dir`` and ``env`` added to the environment."""
    return run_fresh_with_stderr(code, cache_dir, **env)[0]


def run_fresh_with_stderr(code: str, cache_dir, **env: str) -> tuple[list[str], str]:
    """``run_fresh``'s stdout lines, and what the process wrote on stderr."""
    src = os.path.join(os.path.dirname(trainop.__file__), os.pardir)
    full_env = {**os.environ, "PYTHONPATH": os.path.abspath(src),
                "TRAINOP_CACHE_DIR": str(cache_dir), **env}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=full_env, timeout=600, check=True)
    return out.stdout.splitlines(), out.stderr
