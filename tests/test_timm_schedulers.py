"""timm's LR schedulers over trainop's optimizers.

A float learning rate: timm's scheduler drives it (the cosine rate, computed here from its
formula, lands in the group at each update). A trainop schedule as the learning rate: the
scheduler is refused as it attaches, before it writes ``initial_lr`` or a rate, and the group
stays as it was (``contract/scheduled_lr.py``); one assigned after the scheduler attached is
refused at the scheduler's next step, before it writes. The same holds through timm's
``Lookahead`` around the trainop optimizer, the way timm's ``train.py`` builds it
(``opt_lookahead``): the scheduler then reads the groups from the wrapper.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from timm_client import import_timm

import trainop
from trainop.schedules import ExponentialDecay

timm = import_timm()
from timm import scheduler as timm_scheduler  # noqa: E402

SCHEDULERS = {
    "cosine": lambda opt, per_update: timm_scheduler.CosineLRScheduler(
        opt, t_initial=10, t_in_epochs=not per_update),
    "step": lambda opt, per_update: timm_scheduler.StepLRScheduler(
        opt, decay_t=2, t_in_epochs=not per_update),
    "multistep": lambda opt, per_update: timm_scheduler.MultiStepLRScheduler(
        opt, decay_t=[2, 4], t_in_epochs=not per_update),
    "poly": lambda opt, per_update: timm_scheduler.PolyLRScheduler(
        opt, t_initial=10, t_in_epochs=not per_update),
    "tanh": lambda opt, per_update: timm_scheduler.TanhLRScheduler(
        opt, t_initial=10, t_in_epochs=not per_update),
    "plateau": lambda opt, per_update: timm_scheduler.PlateauLRScheduler(opt),
}
REFUSED = (r"^AdamOptimizer: a timm LR scheduler cannot drive param group\(s\) \[1\]: their "
           r"learning rate is a trainop schedule \(ExponentialDecay\)")


WRAPS = {"bare": lambda opt: opt, "lookahead": lambda opt: timm.optim.Lookahead(opt, k=2)}


def _optimizer(second_lr):
    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    return trainop.AdamOptimizer([{"params": [a]}, {"params": [b], "lr": second_lr}], lr=0.1)


def _groups(opt) -> list[dict]:
    return [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]


@pytest.mark.parametrize("wrap", sorted(WRAPS))
@pytest.mark.parametrize("per_update", [False, True], ids=["per-epoch", "per-update"])
@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_a_trainop_schedule_is_refused_when_the_scheduler_attaches(name, per_update, wrap):
    policy = ExponentialDecay(0.1, 10, 0.5)
    opt = _optimizer(policy)
    driven = WRAPS[wrap](opt)
    before = copy.deepcopy(_groups(opt))
    with pytest.raises(TypeError, match=REFUSED):
        SCHEDULERS[name](driven, per_update)
    after = _groups(opt)
    assert [sorted(g) for g in after] == [sorted(g) for g in before]
    assert "initial_lr" not in after[0] and "initial_lr" not in after[1]
    assert after[1]["lr"] is policy and after[0]["lr"] == 0.1


@pytest.mark.parametrize("wrap", sorted(WRAPS))
@pytest.mark.parametrize("per_update", [False, True], ids=["per-epoch", "per-update"])
def test_a_schedule_assigned_later_is_refused_before_the_scheduler_writes(per_update, wrap):
    opt = _optimizer(0.05)
    sched = SCHEDULERS["cosine"](WRAPS[wrap](opt), per_update)
    policy = ExponentialDecay(0.1, 10, 0.5)
    opt.param_groups[1]["lr"] = policy
    with pytest.raises(TypeError, match=REFUSED):
        sched.step_update(1) if per_update else sched.step(1)
    assert opt.param_groups[1]["lr"] is policy and opt.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_a_float_rate_is_driven_by_timms_cosine_schedule(wrap):
    opt = _optimizer(0.05)
    driven = WRAPS[wrap](opt)
    sched = SCHEDULERS["cosine"](driven, True)
    for t in range(1, 6):
        for group in opt.param_groups:
            group["params"][0].grad = torch.ones_like(group["params"][0])
        driven.step()
        sched.step_update(t)
        for group, base in zip(opt.param_groups, (0.1, 0.05), strict=True):
            assert group["lr"] == pytest.approx(0.5 * base * (1 + math.cos(math.pi * t / 10)),
                                                rel=1e-12)


def test_a_torch_scheduler_over_lookahead_is_refused_when_it_attaches():
    policy = ExponentialDecay(0.1, 10, 0.5)
    opt = _optimizer(policy)
    driven = WRAPS["lookahead"](opt)
    before = copy.deepcopy(_groups(opt))
    with pytest.raises(TypeError, match=REFUSED.replace("a timm", "a torch")):
        torch.optim.lr_scheduler.StepLR(driven, step_size=2)
    after = _groups(opt)
    assert [sorted(g) for g in after] == [sorted(g) for g in before]
    assert after[1]["lr"] is policy and after[0]["lr"] == 0.1
