"""The prepared hyperparameters a step reuses (``Optimizer._step_hyper``): reused only while
every hyperparameter of the group is the same plain value; any change takes effect at the next
step, exactly as if nothing had been cached."""

from __future__ import annotations

import pytest
import torch

import trainop
from trainop.contract.hyper import plain_snapshot


def two_steps(make, change, implementation=None):
    """Two steps of SGD-with-momentum on a fixed gradient, ``change(group)`` in between."""
    p = torch.ones(1000, dtype=torch.float64, requires_grad=True)
    opt = make([p], implementation)
    for step in range(3):
        p.grad = torch.full_like(p, 0.5)
        opt.step()
        if step == 0:
            change(opt.param_groups[0])
    return p.detach().clone(), opt.state[p]["momentum"].clone()


def momentum(params, implementation, lr=0.1, mom=0.9):
    return trainop.MomentumOptimizer(lr, mom, params=params, implementation=implementation)


@pytest.mark.parametrize("implementation", [None, "foreach", "reference"])
@pytest.mark.parametrize(("key", "value"), [("lr", 0.25), ("momentum", 0.0),
                                            ("use_nesterov", True)])
def test_a_changed_plain_value_takes_effect_at_the_next_step(key, value, implementation):
    def change(group):
        group[key] = value
    ours = two_steps(momentum, change, implementation)

    # The same run with a fresh optimizer built with the new value from the second step on.
    p = torch.ones(1000, dtype=torch.float64, requires_grad=True)
    first = momentum([p], "reference")
    p.grad = torch.full_like(p, 0.5)
    first.step()
    kwargs = {"lr": 0.1, "mom": 0.9}
    kwargs = {**kwargs, **({"lr": value} if key == "lr" else {"mom": value} if key == "momentum"
                           else {})}
    second = trainop.MomentumOptimizer(kwargs["lr"], kwargs["mom"], params=[p],
                                       implementation="reference",
                                       use_nesterov=value if key == "use_nesterov" else False)
    second.load_state_dict({**second.state_dict(), "state": {0: {
        "momentum": first.state[p]["momentum"].clone()}}})
    for _ in range(2):
        p.grad = torch.full_like(p, 0.5)
        second.step()
    torch.testing.assert_close(ours[0], p.detach(), rtol=1e-13, atol=0)
    torch.testing.assert_close(ours[1], second.state[p]["momentum"], rtol=1e-13, atol=0)


def test_a_tensor_changed_in_place_and_a_callable_are_read_at_every_step():
    rate = torch.tensor(0.1)
    calls = []

    def momentum_value():
        calls.append(1)
        return 0.5

    p = torch.zeros(3, requires_grad=True)
    opt = trainop.MomentumOptimizer(rate, momentum_value, params=[p])
    for lr in (0.1, 0.2, 0.4):
        rate.fill_(lr)
        p.grad = torch.ones(3)
        before = p.detach().clone()
        accum = opt.state[p]["momentum"].clone() if opt.state[p] else torch.zeros(3)
        opt.step()
        expected = before - (accum * 0.5 + 1) * torch.tensor(lr)
        torch.testing.assert_close(p.detach(), expected)
    assert len(calls) == 3


def test_snapshot_compares_floats_by_bits_and_declines_non_plain_values():
    skip = ("params",)
    assert plain_snapshot({"lr": 0.0}, skip) != plain_snapshot({"lr": -0.0}, skip)
    assert plain_snapshot({"lr": float("nan")}, skip) == plain_snapshot({"lr": float("nan")},
                                                                         skip)
    assert plain_snapshot({"lr": 1}, skip) != plain_snapshot({"lr": 1.0}, skip)
    assert plain_snapshot({"lr": 0.1, "params": [torch.zeros(1)]}, skip) is not None
    assert plain_snapshot({"lr": torch.tensor(0.1)}, skip) is None
    assert plain_snapshot({"lr": lambda: 0.1}, skip) is None


@pytest.mark.parametrize("name", ["AdamOptimizer", "MomentumOptimizer", "FtrlOptimizer"])
def test_reading_the_state_before_the_first_step_is_harmless(name):
    # torch's state is a defaultdict: reading opt.state[p] leaves an empty entry behind.
    p, q = torch.ones(4, requires_grad=True), torch.ones(4, requires_grad=True)
    kwargs = {"momentum": 0.9} if name == "MomentumOptimizer" else {}
    opt = getattr(trainop, name)(0.1, params=[p], **kwargs)
    ref = getattr(trainop, name)(0.1, params=[q], **kwargs)
    assert opt.state[p] == {}
    for _ in range(2):
        p.grad, q.grad = torch.full((4,), 0.5), torch.full((4,), 0.5)
        opt.step()
        ref.step()
    assert torch.equal(p, q)
    assert opt.state[p].keys() == ref.state[q].keys()
