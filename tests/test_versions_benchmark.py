"""``benchmarks/versions.py`` (a benchmark, run by hand): a smoke run against this checkout's own
HEAD at a tiny scale, in a subprocess (it imports a second copy of trainop under another name),
so the tool that measured #16's "as fast as before" keeps working."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trainop

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "versions.py"
SOURCE = Path(trainop.__file__).resolve().parent.parent  # src/, where this trainop lives


def _git_checkout() -> bool:
    if shutil.which("git") is None or not SCRIPT.exists():
        return False
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "HEAD"],
                           capture_output=True, text=True)
    return found.returncode == 0 and SOURCE == ROOT / "src"


@pytest.mark.skipif(not _git_checkout(), reason="needs this repository's git checkout")
def test_versions_compares_two_versions_stepping_the_same_tensors():
    env = {**os.environ, "PYTHONPATH": str(SOURCE), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--against", "HEAD", "--rounds", "2", "--steps", "2",
         "--warmup", "1", "--scale", "0.002",
         "--cases", "c:MomentumOptimizer,d:LazyAdamOptimizer,b:GradientDescentOptimizer"],
        capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = re.findall(r"^\| \((\w)\) \| (\w+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$",
                      out.stdout, re.M)
    assert [(key, name) for key, name, *_ in rows] == [
        ("c", "MomentumOptimizer"), ("d", "LazyAdamOptimizer"), ("b", "GradientDescentOptimizer")]
    for _, _, earlier, this, ratio in rows:
        assert float(earlier) > 0 and float(this) > 0
        # (the ms columns are rounded to 3 decimals: tiny steps here)
        assert float(ratio) == pytest.approx(float(this) / float(earlier), rel=0.1)
