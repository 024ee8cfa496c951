"""trainop's Triton kernels on CUDA (skipped without a GPU): the interpreter tests' table
(every optimizer and variant, odd sizes, zero/NaN/Inf gradients with the gate's multiplier and
skip flag) on a CUDA device, against ``implementation="reference"`` on the same device, within
the documented CUDA bound (``CUDA_RTOL``: Triton contracts a*b + c into fused multiply-adds).
"""

from __future__ import annotations

import pytest
import torch
from triton_table import (
    CASES,
    CUDA_RTOL,
    IDS,
    MIXED_STAGE_IDS,
    MIXED_STAGES,
    SPARSE_CASES,
    SPARSE_IDS,
    HalfGradients,
    assert_matches_reference,
    assert_mixed_matches,
    assert_same_training,
    eager_widening,
    run,
    sparse_rule,
    spy_runs,
    spy_sparse,
    train_mixed,
    train_sparse,
    ulps,
)

from trainop.kernels import triton as tk

pytestmark = pytest.mark.skipif(not (torch.cuda.is_available() and tk.available()),
                                reason="needs a CUDA device and Triton")
BASE = {info.name: info for info, kwargs in CASES if not kwargs}


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the real compiler


@pytest.fixture
def calls(monkeypatch):
    """The rules the Triton path ran (``triton_table.spy_runs``)."""
    return spy_runs(monkeypatch)


@pytest.mark.parametrize(("info", "kwargs"), CASES, ids=IDS)
def test_cuda_dense_matches_reference(info, kwargs, calls):
    cuda = torch.device("cuda")
    ours = run(info, kwargs, "triton", cuda)
    assert calls, "the Triton kernels did not run"
    assert_matches_reference(info.name, ours, run(info, kwargs, "reference", cuda),
                             rtol=CUDA_RTOL)


@pytest.mark.parametrize("name", sorted(BASE))
def test_cuda_nonfinite_gradients_and_skip(name, calls):
    cuda = torch.device("cuda")

    def grads(step, g):
        if step == 0:
            return torch.zeros_like(g)
        g = g.clone()
        if step == 1 and g.numel() > 2:
            g.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
        return g

    def gate(step):
        return {"grad_multiplier": torch.tensor(0.5, device=cuda),
                "found_inf": torch.tensor(1.0 if step == 3 else 0.0, device=cuda)}

    shapes = [(1,), (5,), (3, 4)]
    ours = run(BASE[name], {}, "triton", cuda, grads=grads, steps=4, shapes=shapes,
               step_kwargs=gate)
    assert calls
    theirs = run(BASE[name], {}, "reference", cuda, grads=grads, steps=4, shapes=shapes,
                 step_kwargs=gate)
    assert_matches_reference(name, ours, theirs, rtol=CUDA_RTOL)


@pytest.mark.parametrize(("info", "kwargs"), SPARSE_CASES, ids=SPARSE_IDS)
def test_cuda_sparse_rows(info, kwargs, monkeypatch):
    """Every class's sparse update by its Triton sparse rule (rows, TF's sparse forms, the
    every-row Adam/Nadam, NovoGrad densified), against the reference on the device; a
    skipped step (the flag on the device) changes nothing."""
    cuda = torch.device("cuda")
    ran = spy_sparse(monkeypatch)
    ours = train_sparse(info, "triton", cuda, kwargs)
    assert ran == [(sparse_rule(info.name, kwargs), True)] * 3
    assert_matches_reference(info.name, ours, train_sparse(info, "reference", cuda, kwargs),
                             rtol=CUDA_RTOL)
    (table,), opt = ours
    before = [x.clone() for x in (table.detach(), *opt.state[table].values())]
    table.grad = torch.sparse_coo_tensor([[2, 2, 6]], torch.ones(3, 3), (7, 3)).to(cuda)
    opt.step(grad_multiplier=torch.tensor(0.5, device=cuda),
             found_inf=torch.tensor(1.0, device=cuda))
    after = [table.detach(), *opt.state[table].values()]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["AdamOptimizer", "MomentumOptimizer",
                                  "GradientDescentOptimizer", "NovoGrad"])
def test_cuda_mixed_precision_in_one_pass(name, dtype, calls):
    cuda = torch.device("cuda")
    ours = train_mixed(BASE[name], dtype, "triton", cuda)
    assert calls
    assert_mixed_matches(name, ours, train_mixed(BASE[name], dtype, "reference", cuda), dtype,
                         rtol=CUDA_RTOL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("entry", ["step", "minimize", "optimize_loss"])
def test_cuda_mixed_precision_update_reads_the_half_gradients(entry, dtype):
    """As the interpreter's test: the update kernel reads the half gradients (no float32 copy
    of a gradient), bit for bit what it gave reading float32 ones, near the reference."""
    cuda, info = torch.device("cuda"), BASE["AdamOptimizer"]
    with pytest.MonkeyPatch.context() as mp:
        spy = HalfGradients(mp)
        ours = train_mixed(info, dtype, "triton", cuda, entry=entry, watch=spy.watch)
    assert spy.kernel == [{dtype}] * 3 and spy.widened == []
    with pytest.MonkeyPatch.context() as mp:
        eager_widening(mp)
        assert_same_training(ours, train_mixed(info, dtype, "triton", cuda, entry=entry))
    assert_mixed_matches("AdamOptimizer", ours, train_mixed(
        info, dtype, "reference", cuda, entry=entry), dtype, rtol=CUDA_RTOL)


@pytest.mark.parametrize(("case", "kernel_dtypes"), MIXED_STAGES, ids=MIXED_STAGE_IDS)
def test_cuda_mixed_precision_float32_where_needed(case, kernel_dtypes):
    """As the interpreter's test: float32 gradients where a regularizer or stage needs them
    (bit for bit the float32 path), the half ones elsewhere (a global clip, the masters
    without a regularizer)."""
    cuda, info, dtype = torch.device("cuda"), BASE["AdamOptimizer"], torch.bfloat16
    with pytest.MonkeyPatch.context() as mp:
        spy = HalfGradients(mp)
        ours = train_mixed(info, dtype, "triton", cuda, watch=spy.watch, **case)
    assert all(len(k) == 1 for k in spy.kernel) and set().union(*spy.kernel) == kernel_dtypes
    assert bool(spy.widened) == (torch.float32 in kernel_dtypes)
    with pytest.MonkeyPatch.context() as mp:
        eager_widening(mp)
        assert_same_training(ours, train_mixed(info, dtype, "triton", cuda, **case))
    assert_mixed_matches("AdamOptimizer", ours,
                         train_mixed(info, dtype, "reference", cuda, **case), dtype,
                         rtol=CUDA_RTOL)


def test_cuda_read_pass_norms_without_synchronisation():
    """The pipeline's read pass on CUDA: every tensor's norm from one launch over the list,
    within 1 ulp of the float64 sums rounded, half gradients read as they are (the norms of
    their float32 widening), and no synchronisation once the block table is cached."""
    cuda = torch.device("cuda")
    tensors = [torch.randn(s, device=cuda) for s in [(1,), (1023,), (1025,), (0,), (7, 9),
                                                      (300_001,)]]
    tensors[1][5] = float("inf")
    expected = torch.stack([t.double().square().sum().sqrt().float() for t in tensors])
    assert ulps(tk.l2_norms(tensors), expected) <= 1
    for dtype in (torch.float16, torch.bfloat16):
        halves = [t.to(dtype) for t in tensors]
        assert torch.equal(tk.l2_norms(halves), tk.l2_norms([h.float() for h in halves]))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        norms = tk.l2_norms(tensors)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert ulps(norms, expected) <= 1
