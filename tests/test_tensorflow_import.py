"""TensorFlow and Triton in one process: Triton's LLVM must load first (``trainop.interfaces.
tensorflow_import``), else torch._dynamo's later ``import triton`` aborts the process."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("triton")
pytest.importorskip("tensorflow")

SCRIPT = """
import sys
import torch
from trainop.interfaces.tensorflow_import import import_tensorflow
tf = import_tensorflow()
assert "triton" in sys.modules
import torch._dynamo  # imports triton (already loaded): no second LLVM registration
print(float(tf.constant(2.0) * 3.0))
"""


def test_tensorflow_then_dynamo_in_one_process():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "6.0"
