"""Stepping over the contract table: ``step(closure)``, param groups added later, every
``torch.optim.lr_scheduler`` scheduler, and every implementation a class offers (``foreach``,
``fused``, ``native`` against the per-tensor ``reference``, on parameters and slots)."""

from __future__ import annotations

import warnings

import pytest
import torch
from contract_table import (
    IMPLEMENTATION_CASES,
    INFOS,
    assert_same,
    ids,
    info_ids,
    params,
    set_grads,
    snapshot,
    train,
)

S = torch.optim.lr_scheduler


@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_step_with_a_closure(info):
    ps, twin = params(), params()
    opt, plain = info.make(ps), info.make(twin)
    calls = []

    def closure():
        calls.append(torch.is_grad_enabled())
        opt.zero_grad()
        loss = sum((p * p).sum() for p in ps)
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert calls == [True]  # called once, with autograd on (step itself runs without)
    torch.testing.assert_close(loss, sum((p * p).sum() for p in twin))
    for p in twin:
        p.grad = 2 * p.detach()
    plain.step()
    assert_same(snapshot(opt), snapshot(plain))
    assert opt.step() is None  # no closure: None, as torch's optimizers return


@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_add_param_group(info):
    """A group added mid-training trains with its own values, as an optimizer of its own."""
    ps, twin = params(), params()
    opt = info.make(ps[:1])
    train(opt, ps[:1], 1)
    opt.add_param_group({"params": [ps[1]], "lr": info.lr / 2})
    assert opt.param_groups[1]["lr"] == info.lr / 2
    assert opt.param_groups[1].keys() == opt.param_groups[0].keys()
    alone = info.make([twin[1]], lr=info.lr / 2)
    for step in range(1, 3):
        set_grads(ps, step)
        twin[1].grad = ps[1].grad.clone()
        opt.step()
        alone.step()
    assert torch.equal(ps[1].detach(), twin[1].detach())
    for name, slot in opt.state[ps[1]].items():
        assert torch.equal(slot, alone.state[twin[1]][name]), name
    with pytest.raises(ValueError, match="some parameters appear in more than one"):
        opt.add_param_group({"params": [ps[0]]})
    assert len(opt.param_groups) == 2


def _schedulers(opt):
    """Every scheduler in ``torch.optim.lr_scheduler`` that applies to a trainop optimizer
    (``CyclicLR``/``OneCycleLR`` cycle a group's ``momentum`` where the class has one)."""
    cycle = "momentum" in opt.defaults
    return {
        "LambdaLR": lambda: S.LambdaLR(opt, lambda s: 0.5 ** s),
        "MultiplicativeLR": lambda: S.MultiplicativeLR(opt, lambda s: 0.9),
        "StepLR": lambda: S.StepLR(opt, step_size=2, gamma=0.5),
        "MultiStepLR": lambda: S.MultiStepLR(opt, milestones=[1, 3], gamma=0.5),
        "ConstantLR": lambda: S.ConstantLR(opt, factor=0.5, total_iters=2),
        "LinearLR": lambda: S.LinearLR(opt, start_factor=0.25, total_iters=3),
        "ExponentialLR": lambda: S.ExponentialLR(opt, gamma=0.8),
        "PolynomialLR": lambda: S.PolynomialLR(opt, total_iters=3, power=2.0),
        "CosineAnnealingLR": lambda: S.CosineAnnealingLR(opt, T_max=3),
        "CosineAnnealingWarmRestarts": lambda: S.CosineAnnealingWarmRestarts(opt, T_0=2),
        "CyclicLR": lambda: S.CyclicLR(opt, base_lr=opt.defaults["lr"] / 10,
                                       max_lr=opt.defaults["lr"], step_size_up=2,
                                       cycle_momentum=cycle),
        "OneCycleLR": lambda: S.OneCycleLR(opt, max_lr=opt.defaults["lr"], total_steps=5,
                                           cycle_momentum=cycle),
        "ReduceLROnPlateau": lambda: S.ReduceLROnPlateau(opt, patience=0, factor=0.5),
        "SequentialLR": lambda: S.SequentialLR(
            opt, [S.ConstantLR(opt, factor=0.5, total_iters=1), S.ExponentialLR(opt, 0.9)],
            milestones=[2]),
        "ChainedScheduler": lambda: S.ChainedScheduler(
            [S.ExponentialLR(opt, 0.9), S.StepLR(opt, step_size=2, gamma=0.5)]),
    }


SCHEDULER_NAMES = sorted(_schedulers(torch.optim.SGD([torch.zeros(1)], lr=0.1, momentum=0.9)))


def test_every_scheduler_is_listed():
    from torch.optim.lr_scheduler import LRScheduler

    shipped = {name for name, obj in vars(S).items() if isinstance(obj, type)
               and issubclass(obj, LRScheduler | S.ReduceLROnPlateau) and obj is not LRScheduler
               and not name.startswith("_")}
    assert shipped <= set(SCHEDULER_NAMES), shipped - set(SCHEDULER_NAMES)


@pytest.mark.parametrize("scheduler", SCHEDULER_NAMES)
@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_schedulers(info, scheduler):
    """Each step uses the group's lr (and momentum) as the scheduler left it: the result
    equals a twin whose values are written by hand; the scheduler's state saves and loads."""
    ps, twin = params(), params()
    opt, manual = info.make(ps), info.make(twin)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "lr_scheduler.step() before optimizer.step()"
        # torch 2.6's SequentialLR itself calls step(0) on its schedulers, which warns that
        # the epoch argument is deprecated: torch's own warning, not one trainop causes
        warnings.filterwarnings("ignore", "The epoch parameter in `scheduler.step", UserWarning)
        sched = _schedulers(opt)[scheduler]()
        lrs = []
        for step in range(5):
            lrs.append(opt.param_groups[0]["lr"])
            for key in ("lr", "momentum"):
                if key in manual.param_groups[0]:
                    manual.param_groups[0][key] = opt.param_groups[0][key]
            set_grads(ps, step)
            set_grads(twin, step)
            opt.step()
            manual.step()
            if scheduler == "ReduceLROnPlateau":
                sched.step(1.0)  # no improvement: the lr halves
            else:
                sched.step()
    assert len(set(lrs)) > 1, lrs  # the schedule did change the rate
    assert_same(snapshot(opt), snapshot(manual))
    resumed = _schedulers(info.make(params()))[scheduler]()
    resumed.load_state_dict(sched.state_dict())
    assert resumed.state_dict().keys() == sched.state_dict().keys()


@pytest.mark.parametrize("info", [i for i in INFOS if i.name in (
    "AdamOptimizer", "FtrlOptimizer", "MomentumOptimizer")], ids=lambda i: i.name)
def test_schedulers_with_a_tensor_lr(info):
    """torch's schedulers write a tensor lr in place; each step reads the written value."""
    ps, twin = params(), params()
    lr = torch.tensor(info.lr)
    opt, manual = info.make(ps, lr=lr), info.make(twin)
    sched = S.ExponentialLR(opt, gamma=0.5)
    for step in range(3):
        manual.param_groups[0]["lr"] = float(opt.param_groups[0]["lr"])
        set_grads(ps, step)
        set_grads(twin, step)
        opt.step()
        manual.step()
        sched.step()
    assert opt.param_groups[0]["lr"] is lr and float(lr) == pytest.approx(info.lr / 8)
    assert_same(snapshot(opt), snapshot(manual), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("info", "implementation"), IMPLEMENTATION_CASES,
                         ids=ids(IMPLEMENTATION_CASES))
def test_implementations_agree_with_the_reference(info, implementation):
    """Every implementation against the per-tensor reference: parameters, slots, counters,
    over three steps, two groups, dense and (where the class has a sparse rule) sparse."""
    for sparse in (False, True):
        results = []
        for impl in ("reference", implementation):
            ps = params()
            opt = info.make([{"params": ps[:1]}, {"params": ps[1:], "lr": info.lr / 2}],
                            implementation=impl)
            train(opt, ps, 3, sparse=sparse)
            results.append(snapshot(opt))
        assert_same(*results, rtol=1e-5, atol=1e-6)
