"""Pins of the torch-style construction (issue #40, round-5 audit): which call shape gets torch's
``weight_decay`` (``w -= lr * wd * w``, torch's ``AdamW``) and which contrib's (``w -= wd * w``,
``tf.contrib.opt.DecoupledWeightDecayExtension``), a learning rate given positionally where
the TF signature starts with ``weight_decay``, and a required argument only some groups give.
With a zero gradient Adam's and Momentum's own steps are 0, so the decay alone moves ``w``."""

from __future__ import annotations

import pytest
import torch
from admitted import admitted

import trainop

WD, LR = 0.1, 0.5


def _tf_style_step(cls, **kwargs):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    opt = admitted(cls, WD, learning_rate=LR, **kwargs)  # TF's signature: weight_decay first
    opt.apply_gradients([(torch.zeros(2), w)])
    return w.detach()


def _torch_style_step(cls, **kwargs):
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = admitted(cls, [w], lr=LR, weight_decay=WD, **kwargs)
    w.grad = torch.zeros(2)
    opt.step()
    return w.detach()


@pytest.mark.parametrize("cls, kwargs", [(trainop.AdamWOptimizer, {}),
                                         (trainop.MomentumWOptimizer, {"momentum": 0.9})],
                         ids=["AdamW", "MomentumW"])
def test_the_call_shape_decides_what_weight_decay_means(cls, kwargs):
    contrib = torch.tensor([1.0, 2.0]) * (1 - WD)        # var -= wd * var
    torchs = torch.tensor([1.0, 2.0]) * (1 - LR * WD)    # var -= lr * wd * var
    torch.testing.assert_close(_tf_style_step(cls, **kwargs), contrib, rtol=1e-6, atol=0)
    torch.testing.assert_close(_torch_style_step(cls, **kwargs), torchs, rtol=1e-6, atol=0)


@pytest.mark.parametrize("cls", [trainop.AdamWOptimizer, trainop.MomentumWOptimizer])
def test_a_positional_rate_after_the_parameters_of_a_weight_decay_class_is_refused(cls):
    w = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(TypeError):
        cls([w], 0.01)


def test_a_required_argument_only_some_groups_give_is_the_constructors_type_error():
    a, b = (torch.nn.Parameter(torch.ones(2)) for _ in range(2))
    with pytest.raises(TypeError, match="momentum"):
        trainop.MomentumOptimizer([{"params": [a], "momentum": 0.9}, {"params": [b]}], lr=0.1)
    opt = admitted(trainop.MomentumOptimizer, [{"params": [a], "momentum": 0.9},
                                               {"params": [b], "momentum": 0.5}], lr=0.1)
    assert [g["momentum"] for g in opt.param_groups] == [0.9, 0.5]


# ---- who reads param_groups (contract/scheduled_lr.py): H02, H04, H05 of the rewritten round 5
class _Forwarding(torch.optim.Optimizer):
    """accelerate's AcceleratedOptimizer's shape (accelerate/optimizer.py): a torch Optimizer
    whose ``param_groups`` property forwards to the wrapped optimizer's."""

    def __init__(self, optimizer):  # no torch Optimizer.__init__, as accelerate
        self.optimizer = optimizer

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, groups):
        self.optimizer.param_groups = groups


def _scheduled():
    from trainop.schedules import tf1

    w = torch.nn.Parameter(torch.ones(2))
    policy = tf1.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    return trainop.GradientDescentOptimizer([w], learning_rate=policy), policy


REFUSED = r"a torch LR scheduler cannot drive param group\(s\) \[0\]"


@pytest.mark.parametrize("levels", [1, 2])
def test_a_scheduler_over_forwarding_wrappers_is_refused_as_over_the_optimizer(levels):
    opt, policy = _scheduled()
    wrapped = opt
    for _ in range(levels):  # accelerate's wrapper around another forwarding one
        wrapped = _Forwarding(wrapped)
    with pytest.raises(TypeError, match=REFUSED):
        torch.optim.lr_scheduler.StepLR(wrapped, step_size=1)
    assert opt.param_groups[0]["lr"] is policy and "initial_lr" not in opt.param_groups[0]


class _Restart(torch.optim.lr_scheduler.LRScheduler):
    """A user's scheduler whose own step() (only self) writes the rate."""

    def step(self):
        for group in self.optimizer.param_groups:
            group["lr"] = 0.01


def test_a_user_schedulers_own_step_is_refused_over_a_schedule_assigned_later():
    w = torch.nn.Parameter(torch.ones(2))
    opt = trainop.GradientDescentOptimizer([w], learning_rate=0.5)
    scheduler = _Restart(opt)
    _, policy = _scheduled()
    opt.param_groups[0]["lr"] = policy
    with pytest.raises(TypeError, match=REFUSED):
        scheduler.step()
    assert opt.param_groups[0]["lr"] is policy


class _Logger:
    def rates(self, optimizer):
        return [group["lr"] for group in optimizer.param_groups]


def test_other_code_reading_the_groups_of_a_scheduled_optimizer_is_not_refused():
    # a callback or a logger (a method, outside torch and trainop) is no torch scheduler
    opt, policy = _scheduled()
    assert admitted(_Logger().rates, opt) == [policy]
