"""optimize_loss across processes and restarts: on_horovod=True over 2 gloo ranks equals one
process on the whole batch; a run saved at any micro-step resumes bit-identically in a fresh
process (one of ``spawn_ranks``' processes: forked from its fork server, a fresh interpreter
that imported torch and trainop and ran nothing else; nothing of the saving process)."""

from __future__ import annotations

import os
import random

import pytest
import torch
import training_scenarios as S

import trainop
from trainop.bench._ranks import rank_group, spawn_ranks

# "updater": horovod_avg_grad=True; "updater-sum": unset, RETURNN's default (is_true: the sum)
FRONTS = [("optimize_loss", 1), ("optimize_loss", 3), ("updater", 2), ("updater-sum", 2)]
STEPS = 7


def _rank(rank: int, port: int, out: str) -> None:
    """Each case of ``FRONTS`` in turn in one 2-rank group (each its own model and training
    op; the group is all they share): ``out/FRONT-ITER_SIZE.pt``."""
    world = 2
    with rank_group(rank, world, port):
        for front, iter_size in FRONTS:
            net = S.model()
            if front.startswith("updater"):
                average = {"horovod_avg_grad": True} if front == "updater" else {}
                updater = trainop.Updater({**S.UPDATER_CONFIG, "use_horovod": True, **average},
                                          net)
                S.run_updater(net, updater, 0, STEPS, rank=rank, world=world)
            else:
                op = S.build(net, mode="float32", iter_size=iter_size, on_horovod=True)
                S.run(net, op, 0, STEPS, rank=rank, world=world)
            if rank == 0:
                torch.save({n: p.detach().clone() for n, p in net.named_parameters()},
                           os.path.join(out, f"{front}-{iter_size}.pt"))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> str:
    """The folder of ``_rank``'s results (one spawn for every case)."""
    out = str(tmp_path_factory.mktemp("gloo"))
    assert spawn_ranks(_rank, (out,), timeout_s=240) == [0, 0]
    return out


@pytest.mark.parametrize("front,iter_size", FRONTS)
def test_two_gloo_ranks_equal_one_process_on_the_whole_batch(two_ranks, front, iter_size):
    """optimize_loss(on_horovod=True) and the Updater (use_horovod, accumulation) over 2 gloo
    ranks, each on half of every batch, equal one process on the whole batch; the Updater
    without horovod_avg_grad sums the ranks' gradients (RETURNN's is_true: unset is False),
    one process on the whole batch with the loss times 2."""
    steps = STEPS
    distributed = torch.load(os.path.join(two_ranks, f"{front}-{iter_size}.pt"),
                             weights_only=True)
    net = S.model()
    if front.startswith("updater"):
        S.run_updater(net, trainop.Updater(S.UPDATER_CONFIG, net), 0, steps,
                      scale=1.0 if front == "updater" else 2.0)
    else:
        op = S.build(net, mode="float32", iter_size=iter_size)
        S.run(net, op, 0, steps)
        assert int(op.global_step) == len(range(0, steps, iter_size))
    for n, p in net.named_parameters():
        torch.testing.assert_close(distributed[n], p.detach(), rtol=1e-5, atol=1e-7)
        assert not torch.equal(p.detach(), S.model().state_dict()[n])  # it trained


def _resume(rank: int, port: int, mode: str, iter_size: int, start: int, stop: int,
            ckpt: str, out: str) -> None:
    """The run of ``ckpt`` resumed at micro-step ``start`` up to ``stop``: ``out``."""
    net = S.model(torch.bfloat16 if mode == "mixed" else torch.float32)
    op = S.build(net, mode=mode, iter_size=iter_size)
    state = torch.load(ckpt, weights_only=True)
    net.load_state_dict(state["model"])
    op.load_state_dict(state["train_op"])
    S.run(net, op, start, stop)
    torch.save({"params": {n: p.detach().clone() for n, p in net.named_parameters()},
                "global_step": op.global_step.clone(), "train_op": op.state_dict()}, out)


@pytest.mark.parametrize("mode,iter_size", [("float32", 3), ("mixed", 3), ("mixed", 1)])
def test_resume_at_a_random_micro_step_in_a_fresh_process(tmp_path, mode, iter_size):
    stop = 11
    start = random.Random(f"{mode}{iter_size}").randrange(1, stop - 1)
    if iter_size > 1 and start % iter_size == 1:
        start += 1  # mid-accumulation: gradients waiting in the accumulators
    dtype = torch.bfloat16 if mode == "mixed" else torch.float32
    net = S.model(dtype)
    op = S.build(net, mode=mode, iter_size=iter_size)
    S.run(net, op, 0, start)
    ckpt = str(tmp_path / "ckpt.pt")
    torch.save({"model": net.state_dict(), "train_op": op.state_dict()}, ckpt)
    S.run(net, op, start, stop)
    out = str(tmp_path / "resumed.pt")
    assert spawn_ranks(_resume, (mode, iter_size, start, stop, ckpt, out), world=1,
                       timeout_s=300) == [0]
    resumed = torch.load(out, weights_only=True)
    for n, p in net.named_parameters():
        assert torch.equal(resumed["params"][n], p.detach()), n
    assert torch.equal(resumed["global_step"], op.global_step)
    mine = op.state_dict()
    if mode == "mixed":
        assert torch.equal(resumed["train_op"]["optimizer"]["loss_scaler"]["loss_scale"],
                           mine["optimizer"]["loss_scaler"]["loss_scale"])
    assert resumed["train_op"]["step"]["micro_steps"] == mine["step"]["micro_steps"] == stop


def test_state_dict_loads_with_weights_only(tmp_path):
    net = S.model(torch.bfloat16)
    op = S.build(net, mode="mixed", iter_size=2)
    S.run(net, op, 0, 4)  # Q5: updates at micro-steps 0 and 2; micro-step 3 waits
    path = tmp_path / "s.pt"
    torch.save(op.state_dict(), path)
    state = torch.load(path, weights_only=True)
    assert state["step"]["accumulator"]["micro_steps"] == 1
    assert state["step"]["micro_steps"] == 4 and int(state["step"]["global_step"]) == 2
