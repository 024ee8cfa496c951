"""``scripts/gpu_check.sh`` (#31) without a GPU: it parses, its phases' limits add up to less
than the 8 minutes it promises, and on a machine without CUDA it stops at once with a clear
line and exit status 3, before installing anything."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.sh"


def _run(*args, **env):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_parses_and_fits_in_eight_minutes():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)
    out = _run("--dry-run")
    assert out.returncode == 0, out.stderr
    total = int(re.search(r"total at most (\d+) s", out.stdout).group(1))
    limits = [int(s) for s in re.findall(r": at most (\d+) s", out.stdout)]
    assert sum(limits) == total <= 8 * 60 - 30
    assert "tests/test_cuda.py" in out.stdout and "tests/test_cuda_capture.py" in out.stdout


def test_unknown_argument_is_refused():
    out = _run("--fast")
    assert out.returncode == 2 and "unknown argument '--fast'" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_without_cuda_it_stops_at_once_with_a_clear_line(tmp_path):
    out = _run(OUT=str(tmp_path), PYTHON=sys.executable)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "gpu_check: no CUDA device" in out.stderr
    assert "stopped before anything ran" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu_check.log", "preflight.txt"]
