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


def _run(script):
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=240)


TF_FIRST = """
import warnings
warnings.simplefilter("always")
import tensorflow as tf
import torch
import trainop
import sys
w = torch.nn.Parameter(torch.ones(2))
opt = trainop.AdamOptimizer([w], lr=0.1)
w.grad = torch.ones(2)
opt.step()
print(sys.modules["triton"] is None, float(tf.constant(2.0) * 3.0),
      [round(float(x), 4) for x in w.detach()])
try:
    trainop.MomentumOptimizer([w], lr=0.1, momentum=0.9, implementation="triton")
except RuntimeError as error:
    print(error)
"""


def test_tensorflow_imported_first_switches_triton_off_and_works():
    """Issue #40: a script that imported TensorFlow before anything loaded Triton aborted at
    its first optimizer (torch's add_param_group imports torch._dynamo, then Triton) with
    LLVM's "registered more than once" and no traceback; issue #46: rather than refuse every
    optimizer, trainop blocks Triton for the process (one warning), and refuses only what
    needs Triton."""
    out = _run(TF_FIRST)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == "True 6.0 [0.9, 0.9]"
    assert lines[-1] == (
        "MomentumOptimizer: implementation='triton' is unavailable in this process: "
        "TensorFlow was imported before Triton, and with TensorFlow's LLVM loaded, loading "
        "Triton's (torch._dynamo imports it when an optimizer is built) would abort this "
        "process (\"CommandLine Error: Option ... registered more than once\"), so trainop "
        "switched Triton off; import trainop (or torch._dynamo) before tensorflow in your "
        "script to have both, or use another implementation")
    assert out.stderr.count("RuntimeWarning: trainop: TensorFlow was imported before "
                            "Triton") == 1
    assert "Triton is switched off in this process" in out.stderr


TRAINOP_FIRST = """
import sys
import torch
import trainop
import tensorflow as tf
assert "triton" in sys.modules  # loaded ahead of TensorFlow by trainop's import hook
# the hook is one-shot: gone from sys.meta_path after that import
assert not any(type(f).__name__ == "_TritonFirst" for f in sys.meta_path)
w = torch.nn.Parameter(torch.ones(2))
opt = trainop.AdamOptimizer([w], lr=0.1)
w.grad = torch.ones(2)
opt.step()
print(float(tf.constant(2.0) * 3.0), [round(float(x), 4) for x in w])
"""


def test_trainop_imported_before_tensorflow_works():
    out = _run(TRAINOP_FIRST)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "6.0 [0.9, 0.9]"
