"""``torch.distributed.optim.ZeroRedundancyOptimizer`` with every trainop optimizer as its
``optimizer_class`` (torch-style construction ``cls(param_groups, lr=..., **kwargs)``), over 2
gloo ranks: the sharded run equals one unsharded optimizer bit for bit, the consolidated
checkpoint holds the unsharded optimizer's slots and counters, and a fresh ZeRO that loads it
continues identically."""

from __future__ import annotations

import os

import torch
from optimizer_kwargs import kwargs_for

from trainop import OPTIMIZER_CLASSES
from trainop.bench._ranks import rank_group, spawn_ranks

STEPS, RESUME_AT = 6, 3


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def _train(model, opt, steps) -> None:
    """The whole batch on every rank (ZeRO shards the optimizer, not the data); a Sequential
    model from a Linear to a Linear."""
    for step in steps:
        gen = torch.Generator().manual_seed(100 + step)
        x = torch.randn(5, model[0].in_features, generator=gen)
        y = torch.randn(5, model[-1].out_features, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def _args(name):
    kwargs = kwargs_for(name)
    return OPTIMIZER_CLASSES[name], kwargs.pop("learning_rate"), kwargs


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


def _save_consolidated(zero, rank: int, path: str) -> str:
    """ZeRO's checkpoint: consolidated on rank 0, saved there; every rank waits for it."""
    import torch.distributed as dist

    zero.consolidate_state_dict(to=0)
    if rank == 0:
        torch.save(zero.state_dict(), path)
    dist.barrier()
    return path


def _rank(rank: int, port: int, tmp: str) -> None:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    results = {}
    with rank_group(rank, 2, port):
        for name in sorted(OPTIMIZER_CLASSES):
            cls, lr, kwargs = _args(name)
            model = _model()
            zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=cls, lr=lr,
                                           **kwargs)
            assert isinstance(zero.optim, cls)
            _train(model, zero, range(RESUME_AT))
            path = _save_consolidated(zero, rank, os.path.join(tmp, f"{name}.pt"))
            resumed = _model()
            resumed.load_state_dict(model.state_dict())
            zero2 = ZeroRedundancyOptimizer(resumed.parameters(), optimizer_class=cls, lr=lr,
                                            **kwargs)
            zero2.load_state_dict(torch.load(path, weights_only=True))
            _train(resumed, zero2, range(RESUME_AT, STEPS))
            results[name] = {"mid": _params(model), "final": _params(resumed),
                             "local_params": sum(len(g["params"])
                                                 for g in zero.optim.param_groups)}
        if rank == 0:
            torch.save(results, os.path.join(tmp, "results.pt"))
        else:
            torch.save({k: v["local_params"] for k, v in results.items()},
                       os.path.join(tmp, "rank1.pt"))


def test_zero_redundancy_optimizer_equals_unsharded_and_resumes(tmp_path):
    assert spawn_ranks(_rank, (str(tmp_path),), timeout_s=240) == [0, 0]
    results = torch.load(tmp_path / "results.pt", weights_only=True)
    rank1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    assert sorted(results) == sorted(OPTIMIZER_CLASSES)
    for name, got in results.items():
        # The optimizer state really is sharded: each rank steps only part of the 4 tensors.
        assert 0 < got["local_params"] < 4 and got["local_params"] + rank1[name] == 4, name
        cls, lr, kwargs = _args(name)
        model = _model()
        opt = cls(model.parameters(), lr=lr, **kwargs)
        _train(model, opt, range(RESUME_AT))
        for a, b in zip(got["mid"], _params(model), strict=True):
            assert torch.equal(a, b), name
        saved = torch.load(tmp_path / f"{name}.pt", weights_only=True)
        reference = opt.state_dict()
        assert saved["state"].keys() == reference["state"].keys(), name
        for index, slots in reference["state"].items():
            assert saved["state"][index].keys() == slots.keys(), (name, index)
            for slot, value in slots.items():
                assert torch.equal(saved["state"][index][slot], value), (name, index, slot)
        for key, value in reference["param_groups"][0]["non_slot"].items():
            assert torch.equal(saved["param_groups"][0]["non_slot"][key], value), (name, key)
        _train(model, opt, range(RESUME_AT, STEPS))
        for a, b in zip(got["final"], _params(model), strict=True):
            assert torch.equal(a, b), name
        assert not torch.equal(got["final"][0], _params(_model())[0]), name  # it trained
