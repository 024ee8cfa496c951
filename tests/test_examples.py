"""The main job's scripts run: the quick start and the demo (`bash scripts/run.sh`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainop

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("script,expect", [
    ("demo.py", ["1. OpenSeq2Seq optimize_loss", "2. RETURNN Updater",
                 "NumericsError: phase='forward' module='1' op='aten.log' step=3"]),
])
def test_example_runs(script, expect):
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(trainop.__file__))}
    out = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    for line in expect:
        assert line in out.stdout
    assert "Warning" not in out.stderr
