"""torch's momentum-cycling schedulers (``OneCycleLR``, ``CyclicLR(cycle_momentum=True)``) on
trainop's Adam family and RMSProp (issue #33): the schedule they write is the one they write
on ``torch.optim.Adam``/``RMSprop`` (the same floats), and the momentum they set is the one the
next update uses: parameters after six steps equal TF's update rule written out by hand with
that schedule (float64 variables, hyperparameters rounded to float32 as TF does, beta powers
float32 products, as ``tf.train.AdamOptimizer``'s ``beta1_power`` variable)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch.optim.lr_scheduler import CyclicLR, OneCycleLR

import trainop

STEPS = 6
GRADS = [torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64) * (1 + 0.25 * t)
         for t in range(STEPS)]
START = torch.tensor([1.0, -0.5, 0.25], dtype=torch.float64)


def f32(x: float) -> float:
    return float(np.float32(x))


def schedulers(opt):
    return {"onecycle": lambda: OneCycleLR(opt, max_lr=0.05, total_steps=STEPS + 1),
            "cyclic": lambda: CyclicLR(opt, base_lr=0.001, max_lr=0.05, step_size_up=2)}


def momentum_of(group) -> float:
    return group["betas"][0] if "betas" in group else group["momentum"]


def run(opt, w, which):
    """Steps ``opt`` under the scheduler; returns the (lr, momentum) each step used."""
    sched = schedulers(opt)[which]()
    used = []
    for g in GRADS:
        used.append((opt.param_groups[0]["lr"], momentum_of(opt.param_groups[0])))
        w.grad = g.clone()
        opt.step()
        sched.step()
    return used


def adam_reference(schedule, *, nadam=False, decay=0.0, beta2=0.999, eps=1e-8):
    var, m, v = START.clone(), torch.zeros(3, dtype=torch.float64), torch.zeros(3,
                                                                               dtype=torch.float64)
    b1p, b2p = np.float32(schedule[0][1]), np.float32(beta2)
    for (lr, b1), g in zip(schedule, GRADS, strict=True):
        var = var - lr * decay * var  # decoupled decay: torch's lr * wd, lr not rounded
        lr, b1_, b2_ = f32(lr), f32(b1), f32(beta2)
        alpha = lr * math.sqrt(1 - float(b2p)) / (1 - float(b1p))
        m = b1_ * m + (1 - b1_) * g
        v = b2_ * v + (1 - b2_) * g * g
        direction = b1_ * m + (1 - b1_) * g if nadam else m
        var = var - alpha * direction / (v.sqrt() + f32(eps))
        b1p, b2p = b1p * np.float32(b1), b2p * np.float32(beta2)
    return var


def rmsprop_reference(schedule, *, decay=0.9, eps=1e-10):
    var, ms, mom = START.clone(), torch.ones(3, dtype=torch.float64), torch.zeros(
        3, dtype=torch.float64)
    for (lr, momentum), g in zip(schedule, GRADS, strict=True):
        ms = ms + (g * g - ms) * (1 - f32(decay))
        mom = f32(momentum) * mom + f32(lr) * g / (ms + f32(eps)).sqrt()
        var = var - mom
    return var


CASES = {
    "AdamOptimizer": (lambda p: trainop.AdamOptimizer(p, lr=0.01), torch.optim.Adam,
                      lambda s: adam_reference(s)),
    "AdamWOptimizer": (lambda p: trainop.AdamWOptimizer(p, lr=0.01, weight_decay=0.1),
                       torch.optim.Adam, lambda s: adam_reference(s, decay=0.1)),
    "NadamOptimizer": (lambda p: trainop.NadamOptimizer(p, lr=0.01), torch.optim.Adam,
                       lambda s: adam_reference(s, nadam=True)),
    "LazyAdamOptimizer": (lambda p: trainop.LazyAdamOptimizer(p, lr=0.01), torch.optim.Adam,
                          lambda s: adam_reference(s)),
    "RMSPropOptimizer": (lambda p: trainop.RMSPropOptimizer(p, lr=0.01, momentum=0.9),
                         lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.9),
                         lambda s: rmsprop_reference(s)),
}


@pytest.mark.parametrize("which", ["onecycle", "cyclic"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_scheduled_momentum_is_the_one_the_update_uses(name, which):
    build, torch_cls, reference = CASES[name]
    w_torch = torch.nn.Parameter(START.clone())
    expected_schedule = run(torch_cls([w_torch]), w_torch, which)
    w = torch.nn.Parameter(START.clone())
    schedule = run(build([w]), w, which)
    assert schedule == expected_schedule  # the same floats as on torch.optim
    assert len({m for _, m in schedule}) > 2  # the momentum really moves
    torch.testing.assert_close(w.detach(), reference(schedule), rtol=1e-12, atol=1e-15)
    # the update with a constant momentum is far from it: the test would see a missed write
    constant = [(lr, schedule[0][1]) for lr, _ in schedule]
    assert not torch.allclose(w.detach(), reference(constant), rtol=1e-6, atol=0)


def test_betas_and_beta1_beta2_are_one_value():
    """A write to either spelling is seen by the other and by the next step; state_dict saves
    them reconciled, load_state_dict takes beta1/beta2 (a checkpoint without betas loads)."""
    w = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    opt = trainop.AdamOptimizer([w], lr=0.1)
    group = opt.param_groups[0]
    assert opt.defaults["betas"] == (0.9, 0.999) and group["betas"] == (0.9, 0.999)
    group["betas"] = (0.5, 0.99)
    w.grad = torch.ones(2, dtype=torch.float64)
    opt.step()
    assert (group["beta1"], group["beta2"]) == (0.5, 0.99)
    assert float(group["non_slot"]["beta1_power"]) == f32(0.5) * f32(0.5)
    group["beta1"] = 0.7
    sd = opt.state_dict()
    assert sd["param_groups"][0]["betas"] == (0.7, 0.99) and group["betas"] == (0.7, 0.99)
    del sd["param_groups"][0]["betas"]
    other = trainop.AdamOptimizer([torch.nn.Parameter(torch.ones(2, dtype=torch.float64))],
                                  lr=0.1)
    other.load_state_dict(sd)
    assert other.param_groups[0]["betas"] == (0.7, 0.99)
    group["betas"] = (1.5, 0.99)
    before = w.detach().clone()
    with pytest.raises(ValueError, match=r"^Expected `beta1` in \[0, 1\), got 1\.5 "
                                         r"\(param_groups\[0\]\['betas'\] = \(1\.5, 0\.99\)\)$"):
        opt.step()
    assert torch.equal(w.detach(), before) and group["beta1"] == 0.7


def _two_groups():
    a, b = (torch.nn.Parameter(torch.ones(2, dtype=torch.float64)) for _ in range(2))
    opt = trainop.AdamOptimizer([{"params": [a]}, {"params": [b]}], lr=0.1)
    for p in (a, b):
        p.grad = torch.ones(2, dtype=torch.float64)
    opt.step()
    return opt, a, b


def test_an_invalid_betas_in_one_group_changes_no_group():
    """Issue #40: group 1's invalid ``betas`` refused the update after group 0's valid one had
    been taken into its beta1/beta2; and state_dict() raised the same error, so no checkpoint
    could be saved. Now every group is checked first, and state_dict saves."""
    opt, a, b = _two_groups()
    g0, g1 = opt.param_groups
    g0["betas"], g1["betas"] = (0.5, 0.99), (1.5, 0.99)
    params = [a.detach().clone(), b.detach().clone()]
    for call in (opt.step, lambda: opt.apply_gradients([(torch.ones(2, dtype=torch.float64),
                                                         a)])):
        with pytest.raises(ValueError, match=r"^Expected `beta1` in \[0, 1\), got 1\.5 "
                                             r"\(param_groups\[1\]\['betas'\]"):
            call()
        assert (g0["beta1"], g0["beta2"], g0["betas"]) == (0.9, 0.999, (0.5, 0.99))
        assert (g1["beta1"], g1["beta2"], g1["betas"]) == (0.9, 0.999, (1.5, 0.99))
        assert torch.equal(a, params[0]) and torch.equal(b, params[1])
    with pytest.warns(UserWarning, match=r"state_dict\(\): Expected `beta1` in \[0, 1\), got "
                                         r"1\.5 \(param_groups\[1\]\['betas'\] = "
                                         r"\(1\.5, 0\.99\)\); saved beta1/beta2 = "
                                         r"\(0\.9, 0\.999\)"):
        sd = opt.state_dict()
    saved = [(g["beta1"], g["beta2"], g["betas"]) for g in sd["param_groups"]]
    assert saved == [(0.5, 0.99, (0.5, 0.99)), (0.9, 0.999, (0.9, 0.999))]
    assert g1["betas"] == (1.5, 0.99)  # the live group is left for the user to fix
    fresh, _, _ = _two_groups()
    fresh.load_state_dict(sd)
    assert [g["betas"] for g in fresh.param_groups] == [(0.5, 0.99), (0.9, 0.999)]


def test_a_checkpoint_whose_betas_differ_loads_them_as_its_next_update_would():
    """A checkpoint saved where ``betas`` was written after the last update (by code that does
    not reconcile, e.g. a wrapper's own groups): loading takes ``betas``, the value the saved
    optimizer's next update would have used; an invalid ``betas`` is refused whole."""
    opt, _, _ = _two_groups()
    sd = copy.deepcopy(opt.state_dict())
    sd["param_groups"][1]["betas"] = (0.5, 0.99)  # beta1/beta2 still 0.9/0.999
    target, a, b = _two_groups()
    target.load_state_dict(sd)
    g0, g1 = target.param_groups
    assert (g1["beta1"], g1["beta2"], g1["betas"]) == (0.5, 0.99, (0.5, 0.99))
    assert (g0["beta1"], g0["beta2"]) == (0.9, 0.999)
    power = float(g1["non_slot"]["beta1_power"])
    target.step()  # TF: beta1_power *= beta1 at each update, in float32
    assert float(g1["non_slot"]["beta1_power"]) == float(torch.tensor(power) * f32(0.5))
    sd["param_groups"][1]["betas"] = (0.5, 1.0)
    with pytest.raises(ValueError, match=r"^Invalid optimizer checkpoint, group 1: "
                                         r"Expected `beta2` in \[0, 1\), got 1\.0 \(in `betas`"):
        target.load_state_dict(sd)


def test_group_gives_betas():
    w, u = (torch.nn.Parameter(torch.ones(2)) for _ in range(2))
    opt = trainop.NovoGrad([{"params": [w], "betas": (0.8, 0.9)}, {"params": [u]}], lr=0.1)
    g0, g1 = opt.param_groups
    assert (g0["beta1"], g0["beta2"], g0["betas"]) == (0.8, 0.9, (0.8, 0.9))
    assert g1["betas"] == (g1["beta1"], g1["beta2"])
