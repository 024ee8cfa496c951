"""What a non-editable install ships, and the command's --version."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
from pathlib import Path

import pytest

import trainop

ROOT = Path(__file__).resolve().parents[1]


def test_package_data_ships_every_kernel_source():
    """The native kernels and the metadata reader build from these files on first use: a
    non-editable install without one of them falls back to slower paths."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["trainop.kernels.native"]
    csrc = ROOT / "src" / "trainop" / "kernels" / "native" / "csrc"
    sources = sorted(p.name for p in csrc.iterdir() if p.is_file())
    assert {"driver.c", "metadata.cpp", "rules.h"} <= set(sources)
    for name in sources:
        assert any(fnmatch.fnmatch(f"csrc/{name}", g) for g in globs), name


def test_version_flag():
    out = subprocess.run([sys.executable, "-m", "trainop", "--version"], capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.strip() == f"trainop {trainop.__version__}"
