"""Reading a state dict changes nothing (#47 Z2). ``get_optimizer_state_dict`` on an optimizer
that has not stepped runs torch's state-initialising step (every ``lr`` set to 0, zero
gradients, ``step()``): contrib-style ``AdamWOptimizer``/``MomentumWOptimizer`` shrank every
parameter by their decay (not scaled by the learning rate) and every class's counters advanced
to step 1. Now the parameters and counters are bit for bit what they were, the slots are their
initial values (as ``create_slots`` makes them), and a run resumed from that state dict equals
the run that never read it. Every class, an FSDP2 model on 2 gloo ranks."""

from __future__ import annotations

import os

import torch
from fsdp2_small import model as _model
from fsdp2_small import optimizer as _optimizer
from fsdp2_small import train, whole

from trainop import OPTIMIZER_CLASSES
from trainop.bench._ranks import rank_group, spawn_ranks

STEPS = 2


def _params(model) -> list[torch.Tensor]:
    return [whole(p) for p in model.parameters()]


def _counters(opt) -> dict[str, torch.Tensor]:
    return {f"{gi}.{k}": v.clone() for gi, g in enumerate(opt.param_groups)
            for k, v in g.get("non_slot", {}).items()}


def _slots(opt) -> dict[str, torch.Tensor]:
    params = [p for g in opt.param_groups for p in g["params"]]
    return {f"{i}.{k}": whole(t) for i, p in enumerate(params)
            for k, t in sorted(opt.state.get(p, {}).items())}


def _rank(rank: int, port: int, out: str) -> None:
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    results = {}
    with rank_group(rank, 2, port):
        for name in sorted(OPTIMIZER_CLASSES):
            model = _model()
            opt = _optimizer(name, model)
            made = _optimizer(name, _model())  # the slots and counters create_slots makes
            made.create_slots()
            params, counters = _params(model), _counters(made)
            sd = get_optimizer_state_dict(model, opt)
            read = {"params": _params(model), "counters": _counters(opt),
                    "slots": _slots(opt), "made": _slots(made)}
            resumed = _model()
            opt2 = _optimizer(name, resumed)
            set_optimizer_state_dict(resumed, opt2, optim_state_dict=sd)
            train(resumed, opt2, rank, range(STEPS))
            plain = _model()
            train(plain, _optimizer(name, plain), rank, range(STEPS))
            results[name] = {"params": params, "counters": counters, "read": read,
                             "resumed": _params(resumed), "uninterrupted": _params(plain)}
    if rank == 0:
        torch.save(results, os.path.join(out, "read.pt"))


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_get_optimizer_state_dict_leaves_params_slots_and_counters_as_they_were(tmp_path):
    assert spawn_ranks(_rank, (str(tmp_path),), timeout_s=400) == [0, 0]
    results = torch.load(tmp_path / "read.pt", weights_only=True)
    assert sorted(results) == sorted(OPTIMIZER_CLASSES)
    for name, r in results.items():
        read = r["read"]
        assert _equal(read["params"], r["params"]), name
        assert _equal(read["counters"], r["counters"]), (name, read["counters"])
        assert all(int(v) == 0 for k, v in read["counters"].items() if k.endswith(".step"))
        assert _equal(read["slots"], read["made"]), name
        assert _equal(r["resumed"], r["uninterrupted"]), name


def test_the_read_makes_the_state_a_step_would_make_and_nothing_else():
    """Without a process group too: a frozen parameter (torch gives it no gradient) gets no
    slots, as a step would give it none; a first step of the user's at ``lr = 0`` with real
    gradients is an update (TF's counters advance), not the initialisation; so is one with
    every gradient zero, the very state torch's helper makes (only torch's helper calls it)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    import trainop

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    net[1].bias.requires_grad_(False)
    opt = trainop.AdamOptimizer(0.1, params=list(net.parameters()))
    get_optimizer_state_dict(net, opt)
    assert [bool(opt.state.get(p)) for p in net.parameters()] == [True, True, True, False]
    assert int(opt.param_groups[0]["non_slot"]["step"]) == 0
    user = trainop.AdamOptimizer(0.0, params=list(net.parameters()))
    net(torch.ones(1, 3)).sum().backward()
    user.step()
    assert int(user.param_groups[0]["non_slot"]["step"]) == 1
    zeros = trainop.AdamWOptimizer(0.5, 0.0, params=list(net.parameters()))
    for p in net.parameters():
        p.grad = None if not p.requires_grad else torch.zeros_like(p)
    before = [p.detach().clone() for p in net.parameters()]
    zeros.step()
    assert int(zeros.param_groups[0]["non_slot"]["step"]) == 1
    # contrib's decoupled decay, not scaled by lr: var -= weight_decay * var, frozen bias kept
    for p, b in zip(net.parameters(), before, strict=True):
        expected = b if not p.requires_grad else b - 0.5 * b
        assert torch.equal(p.detach(), expected)


def test_a_users_first_step_near_the_bottom_of_a_thread_is_an_update():
    """Only torch's helper is taken for the initialisation, however few frames lie above the
    step: a bare thread's first step (``_thread``: the stack ends right above the step) of
    AdamW at ``lr = 0`` with zero gradients is a TF step: the counter advances and the decay
    applies (TF's rule: ``var -= weight_decay * var``)."""
    import _thread

    import trainop

    w = torch.nn.Parameter(torch.tensor([2.0, -4.0]))
    w.grad = torch.zeros(2)
    opt = trainop.AdamWOptimizer(0.25, 0.0, params=[w])
    done = _thread.allocate_lock()
    done.acquire()

    def step():
        try:
            opt.step()
        finally:
            done.release()

    _thread.start_new_thread(step, ())
    assert done.acquire(timeout=120)
    assert int(opt.param_groups[0]["non_slot"]["step"]) == 1
    assert w.detach().tolist() == [1.5, -3.0]


def test_a_tensor_learning_rate_is_read_as_torch_left_it():
    """torch's helper sets a tensor ``lr`` to a new ``tensor(0.0)`` for its step and puts the
    old one back: the read leaves the parameters and the counters as they were, the ``lr``
    the very tensor given (a following step uses it: TF's Adam, first step, ``w -= lr``
    times the gradient's sign, within float32)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    import trainop

    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    net = torch.nn.Module()
    net.w = w
    lr = torch.tensor(0.5)
    opt = trainop.AdamOptimizer(lr, params=[w])
    get_optimizer_state_dict(net, opt)
    assert opt.param_groups[0]["lr"] is lr
    assert w.detach().tolist() == [1.0, 2.0] and w.grad is None
    assert int(opt.param_groups[0]["non_slot"]["step"]) == 0
    w.grad = torch.tensor([3.0, -1.0])
    opt.step()
    assert torch.allclose(w.detach(), torch.tensor([0.5, 2.5]), rtol=0, atol=1e-6)
