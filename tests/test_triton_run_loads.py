"""Issue #44, NovoGrad's moment and the read pass's per-tensor level: a tensor's runs' sums
(one float64 sum per run of partial sums) are added in parallel, one vector load and a tree,
not one dependent load per run, nor a loop over 1,024 of them at a time. Counted under
Triton's interpreter: the loads one program of ``norms._tensor_sums`` and of
``novograd._moment`` issues are the same for a tensor of one run and of several (past 1,024
for the read pass). The runs are made one block long here (``tables._chunks`` patched), so a
tensor of a few blocks has several runs (their real length, 1,024 blocks, takes a tensor of
millions of elements: ``test_triton_run_sums``); the norms and NovoGrad's update are the
float64 formula's and the reference's all the same."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interpreter_mode import interpreter_for_the_module as _interpreter  # noqa: F401
from interpreter_shortcuts import nested_calls_unpatched
from triton_table import CASES, assert_matches_reference, run

from trainop.kernels import triton as tk

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]

#: Elements of one block of float32 (``launch.BLOCK``, repeated: a count, not the constant).
BLOCK = 1024


@pytest.fixture
def loads(monkeypatch):
    """Runs of one block each; and per launch of ``_tensor_sums`` or ``_moment`` the loads
    its programs issued (a list of counts, in launch order)."""
    from triton.runtime import interpreter

    from trainop.kernels.triton import tables

    def single_block_runs(first):  # run r is block r; tensor t's first run its first block
        blocks = np.arange(first[-1], dtype=np.int64)
        return np.stack([blocks, blocks + 1], axis=1), first.astype(np.int64)

    monkeypatch.setattr(tables, "_chunks", single_block_runs)
    counts: list[int] = []
    watching = []
    real_run = interpreter.InterpretedFunction.run

    def run(self, *args, **kwargs):
        watch = self.fn.__name__ in ("_tensor_sums", "_moment")
        if watch:
            counts.append(0)
            watching.append(True)
        try:
            return real_run(self, *args, **kwargs)
        finally:
            if watch:
                watching.pop()

    for name in ("create_load", "create_masked_load"):
        real = getattr(interpreter.InterpreterBuilder, name)

        def counted(self, *args, _real=real, **kwargs):
            if watching:
                counts[-1] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(interpreter.InterpreterBuilder, name, counted)
    monkeypatch.setattr(interpreter.InterpretedFunction, "run", run)
    with nested_calls_unpatched():
        yield counts


def _formula(t: torch.Tensor) -> torch.Tensor:
    return torch.tensor([np.float32(np.sqrt(np.sum(t.double().numpy() ** 2)))])


def test_the_read_pass_adds_a_tensors_runs_in_one_load(loads, monkeypatch):
    """One run, and more runs than one program's 1,024-wide load (there were two loads then,
    in a loop): the read pass's blocks made 16 elements long (``norms.READ_BYTES``) so that a
    tensor of 1,025 runs stays small."""
    from trainop.kernels.triton import norms

    monkeypatch.setattr(norms, "READ_BYTES", 16 * 4)
    gen = torch.Generator().manual_seed(0)
    per_runs = {}
    for runs in (1, 1025):
        x = torch.randn(runs * 16 - 5, generator=gen)
        loads.clear()
        assert torch.equal(tk.l2_norms([x]), _formula(x))
        (per_runs[runs],) = loads  # one launch of one program
    assert per_runs[1] == per_runs[1025], per_runs


def test_novograds_moment_adds_a_tensors_runs_in_one_load(loads):
    info = next(info for info, kwargs in CASES if info.name == "NovoGrad" and not kwargs)
    per_runs = {}
    for runs in (1, 3):
        shapes = [(runs * BLOCK - 5,)]
        loads.clear()
        ours = run(info, {}, "triton", torch.device("cpu"), shapes=shapes, steps=1)
        (per_runs[runs],) = loads
        assert_matches_reference("NovoGrad", ours, run(info, {}, "reference",
                                                       torch.device("cpu"), shapes=shapes,
                                                       steps=1))
    assert per_runs[1] == per_runs[3], per_runs
