"""#39: sharded checkpoints as FSDP2 users save them (``torch.distributed.checkpoint`` with
``get_optimizer_state_dict``/``set_optimizer_state_dict``), saved on 2 gloo ranks after 2 of 4
steps and resumed on 2, and resharded on 1 and 4: Adam, AdamW with HF's decay/no-decay groups,
LazyAdam, NovoGrad and the mixed-precision wrapper (a bfloat16 model, float32 masters under
Momentum; its own ``state_dict`` through DCP, the helpers refused in one line). The resumed
state equals the saved one exactly at every world size (slots, masters and counters gathered
whole), the resume at world size 2 equals the uninterrupted run bit for bit, and at 1 and 4 the
unsharded run on the whole batch (float32 tolerance; bfloat16's for the wrapper, whose model
gradients FSDP2 reduces in bfloat16)."""

from __future__ import annotations

import os

import pytest
import torch

import trainop
from trainop.bench._ranks import rank_group, spawn_ranks

STEPS, RESUME_AT, ROWS = 4, 2, 12
CASES = ("adam", "adamw", "lazyadam", "novograd", "mixed")


def _model(case: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 4))
    return model.to(torch.bfloat16) if case == "mixed" else model


def _sharded(model: torch.nn.Module) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def _optimizer(case: str, model: torch.nn.Module):
    from trainop.processing import MixedPrecisionOptimizerWrapper

    params = list(model.parameters())
    if case == "adamw":  # HF's split: the Linear weights decayed, biases and LayerNorm not
        decay = [p for n, p in model.named_parameters() if n in ("0.weight", "3.weight")]
        rest = [p for n, p in model.named_parameters() if n not in ("0.weight", "3.weight")]
        return trainop.AdamWOptimizer([{"params": decay, "weight_decay": 0.1},
                                       {"params": rest, "weight_decay": 0.0}], lr=0.05)
    if case == "lazyadam":
        return trainop.LazyAdamOptimizer(0.05, params=params)
    if case == "novograd":
        return trainop.NovoGrad(0.05, params=params)
    if case == "mixed":
        return MixedPrecisionOptimizerWrapper(
            trainop.MomentumOptimizer(0.05, 0.9, params=params), 64.0)
    return trainop.AdamOptimizer(0.05, params=params)


def _train(model, opt, steps, rank: int, world: int) -> None:
    n = ROWS // world
    for k in steps:
        g = torch.Generator().manual_seed(k)
        x, y = torch.randn(ROWS, 8, generator=g), torch.randn(ROWS, 4, generator=g)
        x, y = x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]
        dtype = next(model.parameters()).dtype
        loss = torch.nn.functional.mse_loss(model(x.to(dtype)).float(), y)
        (opt.scale_loss(loss) if hasattr(opt, "scale_loss") else loss).backward()
        opt.step()
        opt.zero_grad()


def _whole(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()


def _inner(opt):
    return getattr(opt, "optimizer", opt) if not isinstance(opt, torch.optim.Optimizer) else opt


def _state(opt) -> dict:
    """Every slot, master and counter, gathered whole (on every rank: collectives)."""
    inner = _inner(opt)
    params = [p for g in inner.param_groups for p in g["params"]]
    out = {f"{i}.{name}": _whole(t) for i, p in enumerate(params)
           for name, t in sorted(inner.state[p].items())}
    out.update({f"group{gi}.{k}": v.clone() for gi, g in enumerate(inner.param_groups)
                for k, v in g["non_slot"].items()})
    out.update({f"master{i}": _whole(p) for i, p in enumerate(params)})
    return out


def _save(model, opt, where: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    optim = opt.state_dict() if opt is not _inner(opt) else get_optimizer_state_dict(model, opt)
    dcp.save({"model": get_model_state_dict(model), "optim": optim}, checkpoint_id=where)


def _load(model, opt, where: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    _inner(opt).create_slots()  # (else DCP's lr = 0 step makes them, changing nothing)
    wrapped = opt is not _inner(opt)
    sd = {"model": get_model_state_dict(model),
          "optim": opt.state_dict() if wrapped else get_optimizer_state_dict(model, opt)}
    dcp.load(sd, checkpoint_id=where)
    set_model_state_dict(model, sd["model"])
    if wrapped:
        opt.load_state_dict(sd["optim"])
    else:
        set_optimizer_state_dict(model, opt, optim_state_dict=sd["optim"])


def _refusals(model, wrapper) -> list[str]:
    """torch's optimizer state-dict helpers on the wrapper or its optimizer (whose params are
    the masters, not the model's): the messages."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    out = []
    for opt in (wrapper, wrapper.optimizer):
        try:
            get_optimizer_state_dict(model, opt)
            out.append("accepted")
        except (TypeError, ValueError, KeyError) as err:
            out.append(f"{type(err).__name__}: {err}")
    return out


def _save_rank(rank: int, port: int, out: str) -> None:
    """World size 2: save after RESUME_AT steps; the uninterrupted run; a resume at 2."""
    results = {}
    with rank_group(rank, 2, port):
        for case in CASES:
            model = _sharded(_model(case))
            opt = _optimizer(case, model)
            _train(model, opt, range(RESUME_AT), rank, 2)
            where = os.path.join(out, case)
            _save(model, opt, where)
            saved = _state(opt)
            if case == "mixed":
                results["refused"] = _refusals(model, opt)
            _train(model, opt, range(RESUME_AT, STEPS), rank, 2)
            results[case] = {"saved": saved, "uninterrupted": _state(opt),
                             "params": [_whole(p) for p in model.parameters()]}
            resumed = _sharded(_model(case))
            opt2 = _optimizer(case, resumed)
            _load(resumed, opt2, where)
            results[case]["loaded"] = _state(opt2)
            _train(resumed, opt2, range(RESUME_AT, STEPS), rank, 2)
            results[case]["resumed"] = [_whole(p) for p in resumed.parameters()]
    if rank == 0:
        torch.save(results, os.path.join(out, "world2.pt"))


def _resume_rank(rank: int, port: int, out: str, world: int) -> None:
    results = {}
    with rank_group(rank, world, port):
        for case in CASES:
            model = _sharded(_model(case))
            opt = _optimizer(case, model)
            _load(model, opt, os.path.join(out, case))
            results[case] = {"loaded": _state(opt)}
            _train(model, opt, range(RESUME_AT, STEPS), rank, world)
            results[case]["resumed"] = [_whole(p) for p in model.parameters()]
    if rank == 0:
        torch.save(results, os.path.join(out, f"world{world}.pt"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("fsdp2_dcp")
    assert spawn_ranks(_save_rank, (str(out),), world=2, timeout_s=300) == [0, 0]
    for world in (1, 4):
        assert spawn_ranks(_resume_rank, (str(out), world), world=world,
                           timeout_s=300) == [0] * world
    return {w: torch.load(out / f"world{w}.pt", weights_only=True) for w in (1, 2, 4)}


def _unsharded(case: str) -> list[torch.Tensor]:
    model = _model(case)
    _train(model, _optimizer(case, model), range(STEPS), 0, 1)
    return [p.detach() for p in model.parameters()]


def test_the_helpers_refuse_the_mixed_precision_wrapper_in_one_line(runs):
    for message in runs[2]["refused"]:
        assert message.startswith("TypeError: Expected the optimizer of torch.distributed."
                                  "checkpoint's get_optimizer_state_dict"), message
        assert "save `wrapper.state_dict()` with dcp.save" in message and "\n" not in message


@pytest.mark.parametrize("case", CASES)
def test_a_dcp_checkpoint_resumes_and_reshards_exactly(runs, case):
    saved = runs[2][case]["saved"]
    for world in (1, 2, 4):
        loaded = runs[world][case]["loaded"]
        assert loaded.keys() == saved.keys(), (case, world)
        for key, value in saved.items():
            assert torch.equal(loaded[key], value), (case, world, key)
    for a, b in zip(runs[2][case]["resumed"], runs[2][case]["params"], strict=True):
        assert torch.equal(a, b), case
    tol = {"rtol": 1e-2, "atol": 1e-2} if case == "mixed" else {"rtol": 1e-5, "atol": 1e-6}
    want = _unsharded(case)
    for world in (1, 4):
        for got, ref in zip(runs[world][case]["resumed"], want, strict=True):
            torch.testing.assert_close(got, ref, **tol, msg=f"{case} world {world}")
