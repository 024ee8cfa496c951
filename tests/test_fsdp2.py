"""#15: every trainop optimizer under FSDP2 (``fully_shard`` per layer and root: DTensor
parameters, gradients and slots) and DDP, 2 gloo ranks each on half of every batch, equals one
process on the whole batch (float32, 1e-5 relative, 4 steps). Elementwise optimizers update the
local shards (the native kernels included); NovoGrad takes each whole tensor's norm through
DTensor and updates the local shards. Also TF-style registration with DTensor variables."""

from __future__ import annotations

import os

import pytest
import torch
from optimizer_kwargs import kwargs_for

import trainop
from trainop.bench._ranks import counted_all_reduces, rank_group, spawn_ranks
from trainop.registry import OPTIMIZER_CLASSES

NAMES = sorted(OPTIMIZER_CLASSES)
STEPS = 4


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _batch(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(k)
    return torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)


def _sharded(model: torch.nn.Module, layers=None) -> torch.nn.Module:
    """``fully_shard`` every Linear layer (of ``layers``, default the model's) and the root."""
    from torch.distributed.fsdp import fully_shard

    for layer in model if layers is None else layers:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def _optimizer(name: str, params):
    kwargs = kwargs_for(name)
    if name == "AdagradDAOptimizer":
        kwargs["global_step"] = torch.zeros((), dtype=torch.int64)
    return OPTIMIZER_CLASSES[name](params=params, **kwargs)


def _train(model, opt, rank: int | None, tf_style: bool = False) -> None:
    for k in range(STEPS):
        x, y = _batch(k)
        if rank is not None:
            x, y = x[rank * 3:(rank + 1) * 3], y[rank * 3:(rank + 1) * 3]
        loss = torch.nn.functional.mse_loss(model(x), y)
        if tf_style:  # (FSDP2 reduce-scatters the gradients in backward's hooks)
            loss.backward()
            opt.apply_gradients([(p.grad, p) for p in model.parameters()])
            for p in model.parameters():
                p.grad = None
        else:
            loss.backward()
            opt.step()
            opt.zero_grad()


def _optimizers(rank: int, out: str) -> None:
    """Every optimizer under FSDP2 and DDP, and TF-style registration: ``out/rank0.pt``."""
    from torch.nn.parallel import DistributedDataParallel

    results = {}
    for name in NAMES:
        for mode in ("fsdp2", "ddp"):
            model = _model()
            wrapped = _sharded(model) if mode == "fsdp2" else DistributedDataParallel(model)
            opt = _optimizer(name, model.parameters())
            _train(wrapped, opt, rank)
            params = [p.full_tensor() if hasattr(p, "full_tensor") else p
                      for p in model.parameters()]
            results[(name, mode)] = [p.detach().clone() for p in params]
            if name == "AdamOptimizer" and mode == "fsdp2":
                plan = opt._step_plan
                results["adam-fsdp2-implementations"] = [b.implementation
                                                         for b in plan.buckets]
    model = _sharded(_model())
    opt = trainop.AdamOptimizer(0.05)  # TF style: variables registered on first apply
    _train(model, opt, rank, tf_style=True)
    results[("tf-style", "fsdp2")] = [p.full_tensor().detach().clone()
                                      for p in model.parameters()]
    if rank == 0:
        torch.save(results, os.path.join(out, "rank0.pt"))


class _WithExtra(torch.nn.Module):
    """The model plus a layer whose gradient is all-zero after the first step (the all-zero
    filter keeps it as it is; Adam's momentum would move it otherwise)."""

    def __init__(self):
        super().__init__()
        self.body = _model()
        torch.manual_seed(1)
        self.extra = torch.nn.Linear(8, 4)

    def forward(self, x, k):
        return self.body(x) + (1.0 if k == 0 else 0.0) * self.extra(x)


def _pipeline(params, kind: str = "clip", implementation: str | None = None):
    """``clip``: ClipByGlobalNorm; ``larc``: LARC (whole-tensor variable norms too);
    ``logmax``: OpenSeq2Seq's LogMax loss scaler (reads ``max |g|``) and ClipByGlobalNorm;
    ``backoff``: the dynamic (backoff) loss scaler and ClipByGlobalNorm; each with
    SkipNonFinite and FilterZeroGradients, over Adam (``implementation``)."""
    from trainop.processing import (
        LARC,
        BackoffLossScaler,
        ClipByGlobalNorm,
        FilterZeroGradients,
        GradientPipeline,
        LogMaxLossScaler,
        LossScale,
        SkipNonFinite,
    )

    stages = {"larc": [LARC(larc_eta=0.002)], "clip": [ClipByGlobalNorm(0.1)],
              "logmax": [LossScale(LogMaxLossScaler()), ClipByGlobalNorm(0.1)],
              "backoff": [LossScale(BackoffLossScaler()), ClipByGlobalNorm(0.1)]}[kind]
    opt = trainop.AdamOptimizer(0.05, params=params, implementation=implementation)
    return GradientPipeline(opt, [*stages, SkipNonFinite(), FilterZeroGradients()])


def _train_pipeline(model, pipe, rank: int | None,
                    all_reduces: list[int] | None = None) -> list[tuple[float, bool, float]]:
    """Per step: the global norm, whether it was applied, the loss scale after it (1 without a
    scaler); ``all_reduces`` gets the ``all_reduce`` calls of each ``pipe.step()``."""
    out = []
    for k in range(STEPS):
        x, y = _batch(k)
        if rank is not None:
            x, y = x[rank * 3:(rank + 1) * 3], y[rank * 3:(rank + 1) * 3]
        loss = torch.nn.functional.mse_loss(model(x, k), y)
        if k == 2 and rank in (None, 1):  # a NaN on one rank: both ranks skip the step
            loss = loss * float("nan")
        pipe.scale_loss(loss).backward()
        with counted_all_reduces() as calls:
            result = pipe.step()
        if all_reduces is not None:
            all_reduces.append(len(calls))
        scaler = pipe.loss_scaler
        out.append((float(result.global_norm), bool(result.applied),
                    1.0 if scaler is None else float(scaler.loss_scale)))
        pipe.zero_grad()
    return out


KINDS = ("clip", "larc", "logmax")


def _pipelines(rank: int, out: str) -> None:
    """Each kind in turn (its own model, pipeline and counts; the models seed themselves):
    ``out/KIND.pt``."""
    for kind in KINDS:
        model = _WithExtra()
        _sharded(model, [*model.body, model.extra])
        pipe = _pipeline(model.parameters(), kind)
        per_step: list[int] = []
        results = _train_pipeline(model, pipe, rank, per_step)
        full = [p.full_tensor().detach().clone() for p in model.parameters()]
        if rank == 0:
            torch.save({"results": results, "params": full, "all_reduces": per_step},
                       os.path.join(out, f"{kind}.pt"))


def _checkpoints(rank: int, out: str, world: int = 2) -> None:
    """Save (world size 2) after 2 steps, or load (world size 1) and take the next 2, with
    torch.distributed.checkpoint's optimizer state-dict helpers, for every optimizer: the
    checkpoints ``out/NAME``, the resumed parameters ``out/resumed.pt``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    resumed = {}
    for name in NAMES:
        model = _sharded(_model())
        opt = _optimizer(name, model.parameters())
        where = os.path.join(out, name)
        n = 6 // world
        steps = range(2) if world == 2 else range(2, STEPS)
        if world == 1:
            opt.create_slots()  # (else DCP's lr = 0 step makes them, changing nothing)
            sd = {"model": get_model_state_dict(model),
                  "optim": get_optimizer_state_dict(model, opt)}
            dcp.load(sd, checkpoint_id=where)
            set_model_state_dict(model, sd["model"])
            set_optimizer_state_dict(model, opt, optim_state_dict=sd["optim"])
        for k in steps:
            x, y = _batch(k)
            torch.nn.functional.mse_loss(model(x[rank * n:(rank + 1) * n]),
                                         y[rank * n:(rank + 1) * n]).backward()
            opt.step()
            opt.zero_grad()
        if world == 2:
            dcp.save({"model": get_model_state_dict(model),
                      "optim": get_optimizer_state_dict(model, opt)}, checkpoint_id=where)
        else:
            resumed[name] = [p.full_tensor().detach().clone() for p in model.parameters()]
    if world == 1:
        torch.save(resumed, os.path.join(out, "resumed.pt"))


def _resume_at_world_size_one(rank: int, port: int, out: str) -> None:
    with rank_group(rank, 1, port):
        _checkpoints(rank, out, world=1)


def _rank(rank: int, port: int, out: str) -> None:
    """Every check of this file at world size 2 in one 2-rank group (each start of a rank and
    each group cost seconds): each scenario builds its own models and optimizers, so none sees
    another's state; the group's collectives are all they share."""
    with rank_group(rank, 2, port):
        _optimizers(rank, out)
        _pipelines(rank, out)
        _checkpoints(rank, out)
        _ddp_no_sync(rank, out)


@pytest.fixture(scope="module")
def world2(tmp_path_factory) -> str:
    """The folder of ``_rank``'s results (its one spawn, for the whole file)."""
    out = str(tmp_path_factory.mktemp("fsdp2"))
    _spawn(_rank, out)
    return out


def test_a_sharded_checkpoint_at_world_size_2_resumes_at_world_size_1(world2):
    _spawn(_resume_at_world_size_one, world2, world=1)
    resumed = torch.load(os.path.join(world2, "resumed.pt"), weights_only=False)
    for name in NAMES:
        model = _model()
        _train(model, _optimizer(name, model.parameters()), None)
        for got, want in zip(resumed[name], model.parameters(), strict=True):
            torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6, msg=name)


def _spawn(target, out: str, world: int = 2) -> None:
    assert spawn_ranks(target, (out,), world=world) == [0] * world


@pytest.fixture(scope="module")
def pipelines(world2) -> dict:
    return {kind: torch.load(os.path.join(world2, f"{kind}.pt"), weights_only=False)
            for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_pipeline_statistics_are_whole_tensor_in_one_all_reduce_per_step(pipelines, kind):
    """ClipByGlobalNorm (or LARC: whole-tensor norms of gradients and variables; or the LogMax
    loss scaler, which reads ``max |g|``), SkipNonFinite (a NaN on one rank skips the step on
    both) and FilterZeroGradients (``max |g|``) under FSDP2 equal the unsharded run; every
    statistic of a step (gradient norms, ``max |g|``, variable norms) costs ONE all_reduce."""
    got = pipelines[kind]
    model = _WithExtra()
    want = _train_pipeline(model, _pipeline(model.parameters(), kind), None)
    assert [r[1] for r in got["results"]] == [r[1] for r in want] == [True, True, False, True]
    for (g, _, gs), (w, _, ws) in zip(got["results"], want, strict=True):
        assert g == pytest.approx(w, rel=1e-5, nan_ok=True)
        assert gs == pytest.approx(ws, rel=1e-5)
    if kind == "logmax":  # the scale moved with log2(max |g|): the maxima were whole-tensor
        assert len({s for _, _, s in want}) > 1
    for a, b in zip(got["params"], model.parameters(), strict=True):
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-6)
    assert got["all_reduces"] == [1] * STEPS


@pytest.fixture(scope="module")
def distributed(world2) -> dict:
    return torch.load(os.path.join(world2, "rank0.pt"), weights_only=False)


@pytest.mark.parametrize("mode", ["fsdp2", "ddp"])
@pytest.mark.parametrize("name", NAMES)
def test_two_ranks_equal_one_process(distributed, name, mode):
    model = _model()
    _train(model, _optimizer(name, model.parameters()), None)
    for got, want in zip(distributed[(name, mode)], model.parameters(), strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
    assert not torch.equal(distributed[(name, mode)][0], _model()[0].weight)  # it trained


@pytest.mark.native
def test_fsdp2_runs_the_native_kernels_on_the_local_shards(distributed):
    assert set(distributed["adam-fsdp2-implementations"]) == {"native"}


def test_tf_style_registration_with_dtensor_variables(distributed):
    model = _model()
    _train(model, trainop.AdamOptimizer(0.05), None, tf_style=True)
    for got, want in zip(distributed[("tf-style", "fsdp2")], model.parameters(), strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.native
def test_bench_fsdp2_runs_and_counts_one_all_reduce():
    from trainop.bench.fsdp2 import render_fsdp2, run_fsdp2_benchmark

    result = run_fsdp2_benchmark(layers=2, width=64, rounds=2, steps=1, warmup=1)
    assert result["implementations"] == ["native"]
    assert result["pipeline_all_reduces"] == 1
    assert result["median_s"]["trainop"] > 0 and result["median_s"]["torch"] > 0
    assert "trainop / torch" in render_fsdp2(result)


def _accumulate(model, pipe, rank: int | None, ddp=None) -> None:
    """2 micro-batches per update, gradients summed in ``.grad`` (DDP: ``no_sync`` on the
    first, so the ranks communicate once per update)."""
    import contextlib

    for k in range(STEPS):
        x, y = _batch(k)
        if rank is not None:
            x, y = x[rank * 3:(rank + 1) * 3], y[rank * 3:(rank + 1) * 3]
        quiet = ddp.no_sync() if ddp is not None and k % 2 == 0 else contextlib.nullcontext()
        with quiet:
            torch.nn.functional.mse_loss((ddp or model)(x), y).backward()
        if k % 2 == 1:
            pipe.step()
            pipe.zero_grad()


def _ddp_no_sync(rank: int, out: str) -> None:
    """DDP's accumulation with ``no_sync``: ``out/ddp.pt``."""
    from torch.nn.parallel import DistributedDataParallel

    from trainop.processing import ClipByGlobalNorm, GradientPipeline

    model = _model()
    ddp = DistributedDataParallel(model)
    pipe = GradientPipeline(trainop.AdamOptimizer(0.05, params=model.parameters()),
                            [ClipByGlobalNorm(0.1)])
    _accumulate(model, pipe, rank, ddp)
    if rank == 0:
        torch.save([p.detach().clone() for p in model.parameters()],
                   os.path.join(out, "ddp.pt"))


def test_ddp_accumulation_with_no_sync_equals_one_process(world2):
    model = _model()
    from trainop.processing import ClipByGlobalNorm, GradientPipeline

    _accumulate(model, GradientPipeline(trainop.AdamOptimizer(0.05, params=model.parameters()),
                                        [ClipByGlobalNorm(0.1)]), None)
    for got, want in zip(torch.load(os.path.join(world2, "ddp.pt"), weights_only=True),
                         model.parameters(), strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
