"""Issue #44, item 1: NovoGrad on Triton over a tensor of at least 2^20 elements
(``launch.SPLIT_AT``) whose count is not a multiple of 16. Such a unit is launched as a head
(a multiple of 16 elements) and a tail;
the split used to cut NovoGrad's one-element per-tensor denominator too, so the tail kernel
read an empty view one element past its end (the interpreter segfaulted; a GPU would divide
the last few weights by whatever lies there). Dense and sparse (densified) paths, each in a
child interpreter so that a crash fails the test instead of killing pytest; the expectation
is NovoGrad's first step in float64 (ema = 0, so v = |g|^2 and the denominator is
sqrt(v) + eps; m = d; var -= lr * m), element by element, the tail included."""

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
    import sys
    import torch
    import trainop
    from interpreter_shortcuts import nested_calls_unpatched

    from trainop.kernels.triton import launch

    nested_calls_unpatched().__enter__()  # (the same numbers, fewer Python calls)
    launch.SPLIT_AT = int(sys.argv[2])  # (the interpreter is too slow for 2^20 elements here)

    n = int(sys.argv[1])
    g64 = torch.linspace(-1.0, 2.0, n, dtype=torch.float64).sin()
    g = g64.float().double()
    expected = 0.5 - 0.1 * (g / (g.square().sum().sqrt().float().double() + 1e-8))
    for kind in ("dense", "sparse"):
        w = torch.nn.Parameter(torch.full((n, 1), 0.5))
        opt = trainop.NovoGrad(0.1, params=[w], implementation="triton")
        if kind == "dense":
            w.grad = g64.float().reshape(n, 1)
        else:  # every row touched once: the densified gradient is the same tensor
            rows = torch.arange(n)
            w.grad = torch.sparse_coo_tensor(rows[None], g64.float()[:, None], (n, 1))
        opt.step()
        error = ((w.detach().double().reshape(-1) - expected).abs() / expected.abs()).max()
        print(kind, float(error), flush=True)
""")


def test_novograd_tail_reads_its_own_denominator():
    """At the real sizes a GPU check runs (``scripts/gpu_check.sh``); here the split point is
    lowered to 1024 elements (the interpreter takes minutes per 2^20 elements of NovoGrad):
    the same split, the same cut, 1041 elements (65 blocks of 16 and a tail of 1)."""
    n, split_at = 1041, 1024
    src = os.path.abspath(os.path.join(os.path.dirname(trainop.__file__), os.pardir))
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join((src, here))}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(n), str(split_at)],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    found = dict(line.split() for line in done.stdout.splitlines())
    assert sorted(found) == ["dense", "sparse"], done.stdout
    assert all(float(error) < 1e-6 for error in found.values()), done.stdout
