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


def test_the_benchmark_runs_cover_every_other_optimizer_once():
    from trainop.bench.specs import SPECS

    line = next(x for x in _run("--dry-run").stdout.splitlines() if "--gpu-workloads:" in x)
    runs = [r.strip().split(",") for r in line.split(":", 1)[1].split("|")]
    keys = [f"other_{n}" for n in SPECS if n != "AdamOptimizer"]
    for key in keys:
        assert sum(any(key.startswith(p) for p in run) for run in runs) == 1, key


def test_every_phase_runs_and_the_summary_names_them(tmp_path):
    """With a stand-in for Python that succeeds at everything (as on a GPU machine where every
    phase passes), every phase runs in order and the summary lists each as ok."""
    fake = tmp_path / "python"
    fake.write_text('#!/usr/bin/env bash\necho "fake python: $*"\n')
    fake.chmod(0o755)
    out = _run(OUT=str(tmp_path / "out"), PYTHON=str(fake))
    assert out.returncode == 0, out.stdout + out.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    for phase in ("preflight", "install", "doctor", "tests_existing", "tests_new", "bench_main",
                  "bench_other1", "bench_other2"):
        assert re.search(rf"^{phase}\s+ok\s", summary, re.M), summary
    log = (tmp_path / "out" / "gpu_check.log").read_text()
    assert "-m trainop bench --device cuda --scale 1 --repeats 10" in log
    assert "--no-deps --no-build-isolation -e" in log
