"""ZeRO (``ZeroRedundancyOptimizer`` around trainop) refuses counters that differ across ranks
(#47 Z3): rank 0 loads the checkpoint of step 2, rank 1 that of step 3. Each rank's local
optimizer keeps its own copy of every group's counters and updates its share of the
parameters with it, so the ranks trained on with different steps and bias corrections,
silently. ZeRO's load bypasses the optimizer's ``load_state_dict``; the check comes with the
validation of that load at the next step (``contract/outside_load.py``): one ``all_gather``,
a ``ValueError`` on both ranks naming the group and the counter, before anything is written
(parameters, slots and counters stay as the load left them). The same files loaded alike on
both ranks still resume. 2 gloo ranks, Adam (beta powers), Momentum and AdagradDA."""

from __future__ import annotations

import os

import torch
from optimizer_kwargs import kwargs_for
from test_zero_counters import _model, _next_step, _train

from trainop import OPTIMIZER_CLASSES
from trainop.bench._ranks import rank_group, spawn_ranks

NAMES = ("AdagradDAOptimizer", "AdamOptimizer", "MomentumOptimizer")


def _zero(name: str, model):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    kwargs = kwargs_for(name)
    lr = kwargs.pop("learning_rate")
    return ZeroRedundancyOptimizer(list(model.parameters()),
                                   optimizer_class=OPTIMIZER_CLASSES[name], lr=lr, **kwargs)


def _save(zero, rank: int, path: str) -> None:
    import torch.distributed as dist

    zero.consolidate_state_dict(to=0)
    if rank == 0:
        torch.save(zero.state_dict(), path)
    dist.barrier()


def _rank(rank: int, port: int, tmp: str) -> None:
    results = {}
    with rank_group(rank, 2, port):
        for name in NAMES:
            model = _model()
            zero = _zero(name, model)
            paths = [os.path.join(tmp, f"{name}{k}.pt") for k in (2, 3)]
            _train(model, zero, range(2))
            _save(zero, rank, paths[0])
            _train(model, zero, range(2, 3))
            _save(zero, rank, paths[1])
            for case, path in (("disagree", paths[rank]), ("agree", paths[1])):
                resumed = _model()
                zero2 = _zero(name, resumed)
                zero2.load_state_dict(torch.load(path, weights_only=True))
                results[(name, case)] = _next_step(resumed, zero2)
    torch.save(results, os.path.join(tmp, f"rank{rank}.pt"))


def test_zero_refuses_counters_that_differ_across_ranks(tmp_path):
    assert spawn_ranks(_rank, (str(tmp_path),), timeout_s=300) == [0, 0]
    for rank in (0, 1):
        results = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        for name in NAMES:
            error, unchanged = results[(name, "disagree")]
            assert error is not None, (rank, name)
            assert error.startswith("Invalid optimizer checkpoint, group 0: Expected `"), error
            assert "to be the same on every rank" in error, error
            assert unchanged, (rank, name)
            error, unchanged = results[(name, "agree")]
            assert error is None and not unchanged, (rank, name, error)
