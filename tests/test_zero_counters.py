"""ZeRO (``ZeroRedundancyOptimizer`` around trainop) refuses a checkpoint whose groups lack the
counters ``non_slot`` as plain ``load_state_dict`` refuses it (#47 Z1: ZeRO copies only the
group keys a checkpoint has, so it loaded the slots and kept fresh counters: a restart of the
step count and of Adam's bias correction, silently). The refusal comes at the next step, before
anything is written: parameters, slots and counters stay as the load left them. 2 gloo ranks,
every class with slots, with and without steps taken before the load; one or both groups
stripped."""

from __future__ import annotations

import copy
import os

import torch
from optimizer_kwargs import kwargs_for

from trainop import OPTIMIZER_CLASSES
from trainop.bench._ranks import rank_group, spawn_ranks

# Optimizers without slots: ZeRO's load assigns them no state, so nothing shows that a load
# happened (their counters are the step only); not covered.
SLOTLESS = {"GradientDescentOptimizer", "ProximalGradientDescentOptimizer"}

# (steps the loading ZeRO takes first, which of the 2 groups lose non_slot)
CASES = [(0, (0, 1)), (2, (1,)), (0, (0,))]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def _groups(model):
    return [{"params": list(model[0].parameters())}, {"params": list(model[2].parameters())}]


def _train(model, opt, steps) -> None:
    for step in steps:
        gen = torch.Generator().manual_seed(100 + step)
        x, y = torch.randn(5, 3, generator=gen), torch.randn(5, 2, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def _everything(model, opt):
    """Every number a step could write: parameters, slots, counters of the local optimizer."""
    out = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        out += [t.clone() for _, t in sorted(opt.state.get(p, {}).items())
                if isinstance(t, torch.Tensor)]
    for g in opt.param_groups:
        out += [t.clone() for _, t in sorted(g["non_slot"].items())]
    return out


def _next_step(model, zero) -> tuple[str | None, bool]:
    """One more training step (step 3): the ``ValueError``'s message or None, and whether the
    parameters, slots and counters are all as they were (a refused step writes nothing)."""
    before = _everything(model, zero.optim)
    try:
        _train(model, zero, range(3, 4))
        error = None
    except ValueError as exc:
        error = str(exc)
    after = _everything(model, zero.optim)
    unchanged = len(before) == len(after) and all(
        torch.equal(a, b) for a, b in zip(before, after, strict=True))
    return error, unchanged


def _rank(rank: int, port: int, tmp: str) -> None:
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    results = {}
    with rank_group(rank, 2, port):
        for name in sorted(OPTIMIZER_CLASSES):
            kwargs = kwargs_for(name)
            cls, lr = OPTIMIZER_CLASSES[name], kwargs.pop("learning_rate")
            model = _model()
            zero = ZeroRedundancyOptimizer(_groups(model), optimizer_class=cls, lr=lr, **kwargs)
            _train(model, zero, range(3))
            zero.consolidate_state_dict(to=0)
            path = os.path.join(tmp, f"{name}.pt")
            if rank == 0:
                torch.save(zero.state_dict(), path)
            dist.barrier()
            saved = torch.load(path, weights_only=True)
            for first, stripped in CASES:
                bare = copy.deepcopy(saved)
                for g in stripped:
                    del bare["param_groups"][g]["non_slot"]
                plain = cls(_groups(_model()), lr=lr, **kwargs)  # what load_state_dict says
                try:
                    plain.load_state_dict(copy.deepcopy(bare))
                    wanted = None
                except ValueError as exc:
                    wanted = str(exc)
                resumed = _model()
                zero2 = ZeroRedundancyOptimizer(_groups(resumed), optimizer_class=cls, lr=lr,
                                                **kwargs)
                _train(resumed, zero2, range(first))
                zero2.load_state_dict(bare)
                got, unchanged = _next_step(resumed, zero2)
                results[(name, first, stripped)] = (wanted, got, unchanged)
        torch.save(results, os.path.join(tmp, f"rank{rank}.pt"))


def test_zero_refuses_a_checkpoint_without_counters_as_load_state_dict_does(tmp_path):
    assert spawn_ranks(_rank, (str(tmp_path),), timeout_s=500) == [0, 0]
    for rank in (0, 1):
        results = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert len(results) == len(OPTIMIZER_CLASSES) * len(CASES)
        for key, (wanted, got, unchanged) in results.items():
            first_group = min(key[2])
            assert wanted is not None, key  # plain load_state_dict refuses the file
            if key[0] in SLOTLESS:
                continue
            for message in (got,) if key[0] == "AdagradDAOptimizer" else (wanted, got):
                # (a plain AdagradDA refuses ZeRO's groups first for their `global_step`)
                assert message is not None, (rank, key)
                assert message.startswith(f"Invalid optimizer checkpoint, group {first_group}: "
                                          "Expected the group keys ["), (rank, key, message)
                assert message.endswith("], missing ['non_slot']"), (rank, key, message)
            assert unchanged, (rank, key)
