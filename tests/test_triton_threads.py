"""The Triton path's first use from several threads at once (issue #40): each thread its own
optimizer with ``implementation="triton"``, all stepping together, in a fresh interpreter (so
the kernel modules are imported by that first use). It raised ``AttributeError: partially
initialized module 'trainop.kernels.triton...'`` where one thread found another's half-done
import; now the import is made once under a lock, and each result is the reference path's
(within float32 rounding)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import trainop
from trainop.kernels import triton as tk

pytestmark = pytest.mark.skipif(not tk.available(), reason="Triton is not installed")

SCRIPT = textwrap.dedent("""
    import threading
    import torch
    import trainop

    CASES = [("AdamOptimizer", {}), ("MomentumOptimizer", {"momentum": 0.9}),
             ("RMSPropOptimizer", {}), ("GradientDescentOptimizer", {})]
    barrier = threading.Barrier(len(CASES))
    errors, results = [], {}

    def build(name, kwargs, implementation):
        w = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 5))
        w.grad = torch.linspace(0.5, -0.25, 5)
        cls = getattr(trainop, name)
        return w, cls([w], lr=0.1, implementation=implementation, **kwargs)

    def work(name, kwargs):
        w, opt = build(name, kwargs, "triton")
        barrier.wait()  # every thread's first step at once
        try:
            opt.step()
            results[name] = w.detach().clone()
        except Exception as error:
            errors.append(f"{name}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=work, args=case) for case in CASES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("errors", errors)
    for name, kwargs in CASES:
        w, opt = build(name, kwargs, "reference")
        opt.step()
        print(name, float((results[name] - w.detach()).abs().max()) <= 1e-7)
""")


def test_first_use_from_several_threads():
    src = os.path.abspath(os.path.join(os.path.dirname(trainop.__file__), os.pardir))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": src}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "errors []", lines[0]
    assert lines[1:] == [f"{name} True" for name in (
        "AdamOptimizer", "MomentumOptimizer", "RMSPropOptimizer", "GradientDescentOptimizer")]
