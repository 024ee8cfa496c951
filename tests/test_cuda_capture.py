"""#31 on a GPU (skipped without CUDA and ``implementation="triton"``; CI has no GPU, and
``scripts/gpu_check.sh`` runs this file there): a whole training step captured in a CUDA graph
and replayed equals the eager step, bit for bit (``GradientPipeline`` with a dynamic loss
scaler, and ``optimize_loss``'s train op); a step on the Triton path makes no host
synchronisation (``torch.cuda.set_sync_debug_mode("error")`` raises on one); FSDP2's local
shards on one NCCL rank take the Triton kernels (Adam; NovoGrad with its whole-tensor norms)
and give the unsharded training's numbers, and a ``GradientPipeline``'s statistics there take
the Triton read pass and one all_reduce per step. (The FSDP2 tests ran on the CPU with gloo
and the interpreter in place of NCCL and CUDA, all passing; CPU tests with 2 ranks:
``tests/test_triton_fsdp2.py``.)

Issue #38: the whole-step captures set the gradients to None before each step, so the captured
backward puts them at new addresses (the graph's pool); the Triton path's tables are made at the
warm-up steps and the captured step only copies the new addresses into them from host rows the
capture keeps (``kernels/triton/tables.py``, ``staging.py``), so the capture records no
allocation and no cache miss (before, the read pass's table, keyed by the gradients' addresses,
missed inside the capture and raised). ``test_a_captured_step_makes_no_new_table`` checks that
directly; the CPU simulation of the same steps is ``tests/test_triton_tables.py``.

Not yet run on a GPU: no device was lent to the sessions that wrote it.
"""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from torch import nn

import trainop
from trainop.bench.gpu_capture import eager_and_captured
from trainop.bench.gpu_peers import triton_unavailable
from trainop.processing import BackoffLossScaler, ClipByGlobalNorm, GradientPipeline, LossScale

TRITON = "triton"


def _why_not() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA device"
    return triton_unavailable(torch.device("cuda"))


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 8)).cuda()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(1)
    return (torch.randn(16, 32, generator=g, device="cuda"),
            torch.randn(16, 8, generator=g, device="cuda"))


def test_pipeline_step_with_dynamic_loss_scale_replays_equal_to_eager():
    eager, graphed, equal = eager_and_captured(TRITON, width=64, depth=2, batch=16)
    assert equal()
    for a, b in zip(eager.pipe.optimizer.param_groups[0]["params"],
                    graphed.pipe.optimizer.param_groups[0]["params"], strict=True):
        for name in ("m", "v"):
            assert torch.equal(eager.pipe.optimizer.get_slot(a, name),
                               graphed.pipe.optimizer.get_slot(b, name))
    assert torch.equal(eager.pipe.loss_scaler.loss_scale, graphed.pipe.loss_scaler.loss_scale)


def _train_op(model: nn.Module, x, y):
    return trainop.optimize_loss(lambda: nn.functional.mse_loss(model(x), y), "Adam",
                                 {"implementation": TRITON}, 1e-3, model=model,
                                 clip_gradients=1.0, loss_scaling="Backoff",
                                 apply_loss_scaling=True)


def test_optimize_loss_train_op_replays_equal_to_eager():
    x, y = _batch()
    base = _model()
    eager_model, graph_model = copy.deepcopy(base), copy.deepcopy(base)
    eager_op, graph_op = _train_op(eager_model, x, y), _train_op(graph_model, x, y)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            graph_op()
    torch.cuda.current_stream().wait_stream(side)
    for _ in range(3):
        eager_op()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_op()
    for _ in range(5):
        eager_op()
        graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(eager_model.parameters(), graph_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_captured_step_makes_no_new_table():
    """After warm-up on a side stream, a captured step (gradients set to None first: new
    addresses) makes no layout, table or constant, keeps the layouts it copied into from
    eviction, and its replays equal the same steps run eagerly on a copy of the model."""
    from trainop.kernels.triton import tables

    x, y = _batch()
    base = _model()
    models = [copy.deepcopy(base), copy.deepcopy(base)]
    steps = []
    for model in models:
        opt = trainop.AdamOptimizer(1e-3, params=model.parameters(), implementation=TRITON)
        pipe = GradientPipeline(opt, [LossScale(BackoffLossScaler()), ClipByGlobalNorm(1.0)])

        def step(pipe=pipe, model=model):
            pipe.zero_grad(set_to_none=True)
            pipe.scale_loss(nn.functional.mse_loss(model(x), y)).backward()
            pipe.step()

        steps.append(step)
    eager, graphed = steps
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            graphed()
    torch.cuda.current_stream().wait_stream(side)
    for _ in range(3):
        eager()
    made = list(tables.layouts())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graphed()
    assert list(tables.layouts()) == made
    assert any(layout.pinned for layout in tables.layouts().values())
    for _ in range(4):  # (the capture itself ran nothing: replay it once more)
        eager()
        graph.replay()
    graph.replay()
    eager()
    torch.cuda.synchronize()
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_triton_step_makes_no_host_sync():
    model = _model()
    x, y = _batch()
    opt = trainop.AdamOptimizer(1e-3, params=model.parameters(), implementation=TRITON)
    pipe = GradientPipeline(opt, [LossScale(BackoffLossScaler()), ClipByGlobalNorm(1.0)])

    def step():
        opt.zero_grad(set_to_none=False)
        pipe.scale_loss(nn.functional.mse_loss(model(x), y)).backward()
        pipe.step()

    step()  # the first step creates the slots
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
        step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert [b.implementation for b in opt._step_plan.buckets] == [TRITON]


@contextlib.contextmanager
def _one_rank(tmp_path):
    """A one-rank NCCL process group (world size 1: FSDP2's local shards are whole tensors
    and its gradient reduction a sum over one rank, a copy) for the block."""
    import torch.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("needs NCCL")
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1,
                            device_id=torch.device("cuda", torch.cuda.current_device()))
    try:
        yield
    finally:
        dist.destroy_process_group()


def _fully_sharded(model: nn.Module) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    return fully_shard(model)


def _whole(model: nn.Module) -> list[torch.Tensor]:
    """The parameters, gathered where sharded (inside the group: ``full_tensor`` may return
    before its collective finished; the copy waits for it)."""
    return [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
            for p in model.parameters()]


@pytest.mark.parametrize(("name", "rule"), [("AdamOptimizer", "adam"), ("NovoGrad", "novograd")])
def test_fsdp2_local_shards_on_one_rank_take_the_triton_kernels(tmp_path, monkeypatch, name,
                                                                 rule):
    """The Triton kernels run on FSDP2's local shards (a spy on ``kernels.triton.run``, which
    refuses a DTensor: a fallback to ``foreach`` fails), bit-equal to the unsharded model.
    NovoGrad reads the whole tensors' squared norms, summed by one all_reduce (on one rank, and
    at most two blocks per tensor, the same float64 sums as the unsharded kernel's)."""
    from triton_table import spy_runs

    x, y = _batch()
    plain = _model()
    ran = spy_runs(monkeypatch)
    results, runs = [], []
    with _one_rank(tmp_path):
        sharded = _fully_sharded(copy.deepcopy(plain))
        for model in (plain, sharded):
            opt = getattr(trainop, name)(1e-3, params=model.parameters(),
                                         implementation=TRITON)
            ran.clear()
            for _ in range(4):
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                opt.zero_grad()
            results.append(_whole(model))
            runs.append(list(ran))
    assert runs == [[rule] * 4] * 2
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_fsdp2_pipeline_statistics_take_one_all_reduce_on_the_triton_path(tmp_path,
                                                                          monkeypatch):
    """``GradientPipeline`` (dynamic loss scale, clip by global norm) over Adam on the Triton
    path under FSDP2 (one rank): the Triton read pass measures the local shards, the
    statistics of a step take ONE all_reduce, and the training equals the unsharded one (the
    norms go through float32 squares and back: within 1e-6)."""
    from triton_table import spy_runs

    from trainop.bench._ranks import counted_all_reduces
    from trainop.kernels import triton as tk

    x, y = _batch()
    plain = _model()
    ran = spy_runs(monkeypatch)
    read = []
    real = tk.l2_norms
    monkeypatch.setattr(tk, "l2_norms", lambda t: read.append(len(t)) or real(t))
    results, all_reduces = [], []
    with _one_rank(tmp_path):
        sharded = _fully_sharded(copy.deepcopy(plain))
        for model in (plain, sharded):
            opt = trainop.AdamOptimizer(1e-3, params=model.parameters(), implementation=TRITON)
            pipe = GradientPipeline(opt, [LossScale(BackoffLossScaler()), ClipByGlobalNorm(0.1)])
            ran.clear()
            read.clear()
            for _ in range(3):
                pipe.scale_loss(nn.functional.mse_loss(model(x), y)).backward()
                with counted_all_reduces() as calls:
                    pipe.step()
                all_reduces.append(len(calls))
                pipe.zero_grad()
            assert ran == ["adam"] * 3 and read == [4] * 3
            results.append(_whole(model))
    assert all_reduces == [0] * 3 + [1] * 3
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=0)
