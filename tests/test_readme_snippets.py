"""Every ```python block of the README (and of the training-step docs) runs as written, in a
fresh interpreter: the front door must not show code that fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import trainop

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/training.md", "docs/numerics.md", "docs/updater.md",
         "docs/recipes.md"]


def _blocks():
    for page in PAGES:
        text = (ROOT / page).read_text()
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, re.S)):
            yield pytest.param(block, id=f"{page}#{i}")


@pytest.mark.parametrize("code", list(_blocks()))
def test_block_runs_as_written(code, tmp_path):
    src = os.path.dirname(os.path.dirname(trainop.__file__))
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
