"""A trainop schedule as the learning rate plus a torch LR scheduler on the same group
(issue #33): refused in one ``TypeError`` with advice, when the torch scheduler attaches itself
(StepLR, OneCycleLR, CyclicLR) or, for ReduceLROnPlateau (which does not attach itself), at its
first reduction; never a raw error from inside torch, never a silent replacement. The refused
optimizer is left as it was and keeps its schedule."""

from __future__ import annotations

import pytest
import torch
from torch.optim.lr_scheduler import CyclicLR, OneCycleLR, ReduceLROnPlateau, StepLR

import trainop
from trainop import schedules

ATTACH = (r"^AdamOptimizer: a torch LR scheduler cannot drive param group\(s\) \[0\]: their "
          r"learning rate is a trainop schedule \(ExponentialDecay\), evaluated at each update, "
          r"which the scheduler would replace or scale as a number; give the optimizer a float "
          r"learning rate for the torch scheduler \(trainop\.schedules\.PolicyScheduler")
NOT_A_NUMBER = (r"^ExponentialDecay is a trainop schedule \(a function of the step\), not a "
                r"number: a torch LR scheduler cannot scale or read it as a learning rate; ")


def build():
    w = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    policy = schedules.ExponentialDecay(0.1, 1, 0.5)
    return w, policy, trainop.AdamOptimizer([w], lr=policy)




@pytest.mark.parametrize("make", [
    lambda o: StepLR(o, step_size=1, gamma=0.1),
    lambda o: OneCycleLR(o, max_lr=0.1, total_steps=10),
    lambda o: CyclicLR(o, base_lr=0.01, max_lr=0.1),
], ids=["StepLR", "OneCycleLR", "CyclicLR"])
def test_refused_when_the_scheduler_attaches(make):
    w, policy, opt = build()
    with pytest.raises(TypeError, match=ATTACH):
        make(opt)
    group = opt.param_groups[0]
    assert group["lr"] is policy and group["betas"] == (0.9, 0.999)
    assert not {"initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"} & set(group)
    assert not hasattr(opt.step, "_wrapped_by_lr_sched")
    for _ in range(2):  # the schedule still drives the updates: 0.1, then 0.05
        w.grad = torch.ones(2, dtype=torch.float64)
        opt.step()
    torch.testing.assert_close(w.detach(), torch.full((2,), 1.0 - 0.1 - 0.05,
                                                      dtype=torch.float64), rtol=1e-6, atol=0)


def test_reduce_on_plateau_refused_at_its_first_reduction():
    w, policy, opt = build()
    sched = ReduceLROnPlateau(opt, patience=0)
    sched.step(1.0)
    with pytest.raises(TypeError, match=NOT_A_NUMBER):
        sched.step(2.0)  # not better: the first reduction reads float(lr)
    assert opt.param_groups[0]["lr"] is policy


def test_a_float_rate_with_policy_scheduler_composes():
    """The documented way: a float rate, the trainop schedule as a torch scheduler."""
    w = torch.nn.Parameter(torch.ones(2))
    opt = trainop.AdamOptimizer([w], lr=1.0)
    sched = schedules.PolicyScheduler(opt, schedules.ExponentialDecay(0.1, 1, 0.5))
    assert opt.param_groups[0]["lr"] == 0.1
    w.grad = torch.ones(2)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
