"""A trainop schedule as the learning rate plus a torch LR scheduler on the same group
(issues #33, #40): refused in one ``TypeError`` with advice when the torch scheduler is built
(every one, ReduceLROnPlateau included) or, for a schedule assigned after it was built, at its
next step; never a raw error from inside torch, never a silent replacement. Nothing is written
before the refusal: every group is left exactly as it was, keys included, and keeps its
schedule."""

from __future__ import annotations

import pytest
import torch
from torch.optim.lr_scheduler import CyclicLR, LambdaLR, OneCycleLR, ReduceLROnPlateau, StepLR

import trainop
from trainop import schedules

ATTACH = (r"^AdamOptimizer: a torch LR scheduler cannot drive param group\(s\) \[0\]: their "
          r"learning rate is a trainop schedule \(ExponentialDecay\), evaluated at each update, "
          r"which the scheduler would replace or scale as a number; give the optimizer a float "
          r"learning rate for the torch scheduler \(trainop\.schedules\.PolicyScheduler")


def build():
    w = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    policy = schedules.ExponentialDecay(0.1, 1, 0.5)
    return w, policy, trainop.AdamOptimizer([w], lr=policy)




SCHEDULERS = {
    "StepLR": lambda o: StepLR(o, step_size=1, gamma=0.1),
    "LambdaLR": lambda o: LambdaLR(o, lambda step: 1.0),
    "OneCycleLR": lambda o: OneCycleLR(o, max_lr=0.1, total_steps=10),
    "CyclicLR": lambda o: CyclicLR(o, base_lr=0.01, max_lr=0.1),
    "ReduceLROnPlateau": lambda o: ReduceLROnPlateau(o, patience=0),
}


def _groups(opt):
    """Each group's keys and values (the objects themselves: ``is`` for the schedule)."""
    return [{k: v for k, v in group.items() if k != "non_slot"} for group in opt.param_groups]


def _same(before, opt):
    after = _groups(opt)
    assert [sorted(g) for g in after] == [sorted(g) for g in before]
    for old, new in zip(before, after, strict=True):
        for key, value in old.items():
            assert new[key] is value or (key == "params" and new[key] == value), key


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_refused_when_the_scheduler_is_built(name):
    w, policy, opt = build()
    before = _groups(opt)
    with pytest.raises(TypeError, match=ATTACH):
        SCHEDULERS[name](opt)
    _same(before, opt)
    assert opt.param_groups[0]["lr"] is policy
    assert not hasattr(opt.step, "_wrapped_by_lr_sched")
    for _ in range(2):  # the schedule still drives the updates: 0.1, then 0.05
        w.grad = torch.ones(2, dtype=torch.float64)
        opt.step()
    torch.testing.assert_close(w.detach(), torch.full((2,), 1.0 - 0.1 - 0.05,
                                                      dtype=torch.float64), rtol=1e-6, atol=0)


MIXED = (r"^{}: a torch LR scheduler cannot drive param group\(s\) \[1\]: their learning "
         r"rate is a trainop schedule \(ExponentialDecay\)")


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
@pytest.mark.parametrize("cls", ["AdamOptimizer", "MomentumOptimizer"])
def test_a_mixed_optimizer_is_left_exactly_as_it_was(cls, name):
    """Issue #40: a float group before the scheduled one, holding keys a scheduler writes
    (an earlier scheduler's ``initial_lr``, OneCycleLR's bounds): CyclicLR used to set its lr
    0.5 -> 0.01, OneCycleLR its momentum (``betas``/``momentum``) to 0.95, and the refusal
    deleted the keys it already held."""
    a, b = (torch.nn.Parameter(torch.ones(2)) for _ in range(2))
    extra = {"momentum": 0.5} if cls == "MomentumOptimizer" else {}
    opt = getattr(trainop, cls)([
        {"params": [a], "lr": 0.5, "initial_lr": 0.7, "max_lr": 0.9, "base_momentum": 0.3},
        {"params": [b], "lr": schedules.ExponentialDecay(0.1, 1, 0.5)}], **extra)
    before = _groups(opt)
    with pytest.raises(TypeError, match=MIXED.format(cls)):
        SCHEDULERS[name](opt)
    _same(before, opt)
    assert opt.param_groups[0]["lr"] == 0.5 and opt.param_groups[0]["initial_lr"] == 0.7


@pytest.mark.parametrize("cls", ["AdamOptimizer", "MomentumOptimizer"])
def test_one_cycle_leaves_the_momentum_of_a_single_scheduled_group(cls):
    w = torch.nn.Parameter(torch.ones(2))
    extra = {"momentum": 0.5} if cls == "MomentumOptimizer" else {}
    opt = getattr(trainop, cls)([w], lr=schedules.ExponentialDecay(0.1, 1, 0.5), **extra)
    before = _groups(opt)
    with pytest.raises(TypeError, match=r"cannot drive param group\(s\) \[0\]"):
        OneCycleLR(opt, max_lr=0.1, total_steps=10)
    _same(before, opt)
    key, value = ("momentum", 0.5) if extra else ("betas", (0.9, 0.999))
    assert opt.param_groups[0][key] == value


def test_a_schedule_assigned_after_the_scheduler_is_refused_at_its_next_step():
    """Issue #40: LambdaLR attached over a float rate, then ``group["lr"] = schedule``: the
    scheduler's next step used to replace the schedule by a number without a word."""
    a, b = (torch.nn.Parameter(torch.ones(2)) for _ in range(2))
    opt = trainop.AdamOptimizer([{"params": [a]}, {"params": [b]}], lr=0.5)
    sched = LambdaLR(opt, lambda step: 0.5 ** step)
    a.grad, b.grad = torch.ones(2), torch.ones(2)
    opt.step()
    policy = schedules.ExponentialDecay(0.1, 1, 0.5)
    opt.param_groups[1]["lr"] = policy
    before = _groups(opt)
    with pytest.raises(TypeError, match=MIXED.format("AdamOptimizer")):
        sched.step()
    _same(before, opt)  # neither group written: group 0 keeps 0.5, group 1 its schedule
    assert opt.param_groups[1]["lr"] is policy and opt.param_groups[0]["lr"] == 0.5


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
