"""#31 on a GPU (skipped without CUDA and ``implementation="triton"``; CI has no GPU, and
``scripts/gpu_check.sh`` runs this file there): a whole training step captured in a CUDA graph
and replayed equals the eager step, bit for bit (``GradientPipeline`` with a dynamic loss
scaler, and ``optimize_loss``'s train op); a step on the Triton path makes no host
synchronisation (``torch.cuda.set_sync_debug_mode("error")`` raises on one); FSDP2's local
shards on one rank take the Triton kernels and give the unsharded step's numbers.

Not yet run on a GPU: no device was lent to the session that wrote it.
"""

from __future__ import annotations

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


def test_fsdp2_local_shards_on_one_rank_take_the_triton_kernels(tmp_path):
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    x, y = _batch()
    plain = _model()
    sharded = copy.deepcopy(plain)
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        for layer in sharded:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(sharded)
        results = []
        for model in (plain, sharded):
            opt = trainop.AdamOptimizer(1e-3, params=model.parameters(), implementation=TRITON)
            for _ in range(4):
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                opt.zero_grad()
            results.append([p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
                            for p in model.parameters()])
            assert {b.implementation for b in opt._step_plan.buckets} == {TRITON}
    finally:
        dist.destroy_process_group()
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
