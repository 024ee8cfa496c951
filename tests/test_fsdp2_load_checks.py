"""An FSDP2 optimizer refuses, at ``set_optimizer_state_dict``, what used to load and go wrong
later (#47), on every rank and with nothing changed (parameters, slots, counters):

- Z3: counters that differ across ranks (rank 0 loads the state of step 2, rank 1 that of
  step 3): each rank updated its shards with its own copy, silently (parameters 0.018 off);
  now one ``all_gather`` at the load refuses it with a ``ValueError`` naming the group and the
  counter, on both ranks;
- Z4: a plain tensor where a DTensor slot belongs (the slot gathered whole) loaded, and the
  next step failed inside torch with "mixed Tensor and DTensor"; now a ``TypeError`` names
  the slot and the parameter at the load. When only rank 0's slot is plain, rank 0 raises that
  and rank 1 a ``ValueError`` saying rank 0 refused its checkpoint (no rank waits forever).

2 gloo ranks, Adam (beta powers), Momentum, NovoGrad (0-dim per-tensor slots, plain on every
rank, still accepted) and AdagradDA."""

from __future__ import annotations

import copy
import os

import torch
from fsdp2_small import everything, model, optimizer, same, train

from trainop.bench._ranks import rank_group, spawn_ranks

NAMES = ("AdagradDAOptimizer", "AdamOptimizer", "MomentumOptimizer", "NovoGrad")


def _outcome(net, opt, load) -> tuple[str | None, bool]:
    """``load()``'s error (``"Type: message"``, or None) and whether nothing changed."""
    before = everything(net, opt)
    try:
        load()
        error = None
    except (TypeError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    return error, same(before, everything(net, opt))


def _plain_slot(sd: dict) -> dict:
    """A copy of ``sd`` with the first parameter's first non-scalar slot gathered into a
    plain tensor (``sd`` itself unchanged)."""
    key = sorted(sd["state"])[0]
    slots = sd["state"][key]
    name = next(n for n in sorted(slots) if slots[n].dim() > 0)
    return {**sd, "state": {**sd["state"], key: {**slots, name: slots[name].full_tensor()}}}


def _rank(rank: int, port: int, out: str) -> None:
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    results = {}
    with rank_group(rank, 2, port):
        for name in NAMES:
            net = model()
            opt = optimizer(name, net)
            train(net, opt, rank, range(2))
            at2 = copy.deepcopy(get_optimizer_state_dict(net, opt))  # (it holds the live tensors)
            train(net, opt, rank, range(2, 3))
            at3 = get_optimizer_state_dict(net, opt)
            mine, plain = (at2 if rank == 0 else at3), _plain_slot(at2)  # (a collective)
            for case, sd in (("counters", mine), ("plain", plain),
                             ("plain on rank 0", plain if rank == 0 else at2)):
                fresh = model()
                target = optimizer(name, fresh)
                train(fresh, target, rank, range(1))

                def load(fresh=fresh, target=target, sd=sd):
                    set_optimizer_state_dict(fresh, target, optim_state_dict=sd)
                results[(name, case)] = _outcome(fresh, target, load)
            fresh = model()  # the same state on both ranks loads
            target = optimizer(name, fresh)
            set_optimizer_state_dict(fresh, target, optim_state_dict=at3)
            n = len(list(net.parameters()))  # (the slots and counters; the model not loaded)
            results[(name, "agreeing")] = same(everything(fresh, target)[n:],
                                               everything(net, opt)[n:])
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))


def test_fsdp2_load_refuses_disagreeing_counters_and_plain_slots(tmp_path):
    assert spawn_ranks(_rank, (str(tmp_path),), timeout_s=300) == [0, 0]
    for rank in (0, 1):
        r = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        for name in NAMES:
            assert r[(name, "agreeing")], (rank, name)
            error, unchanged = r[(name, "counters")]
            assert unchanged, (rank, name)
            assert error is not None and error.startswith(
                "ValueError: Invalid optimizer checkpoint, group 0: Expected `"), error
            assert "to be the same on every rank" in error and "rank 0: " in error, error
            error, unchanged = r[(name, "plain")]
            assert unchanged, (rank, name)
            assert error is not None and error.startswith(
                "TypeError: Invalid optimizer checkpoint, group 0, parameter index "), error
            assert "Expected slot `" in error and "to be a DTensor like its parameter, got a " \
                "plain tensor" in error, error
            error, unchanged = r[(name, "plain on rank 0")]
            assert unchanged, (rank, name)
            if rank == 0:
                assert error is not None and error.startswith("TypeError:"), error
            else:
                assert error == ("ValueError: Invalid optimizer checkpoint: rank(s) [0] refused "
                                 "the state they were given (their error says why), so every "
                                 "rank refuses it"), error
