"""torch's optimizer hooks over the contract table: step pre/post hooks (per optimizer and
global), state_dict pre/post hooks and load_state_dict pre/post hooks run once each, in
torch's order, with what torch hands them, and their changes take effect."""

from __future__ import annotations

import pytest
import torch
from contract_table import INFOS, assert_same, info_ids, params, set_grads, snapshot, train
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)


@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_step_hooks(info):
    ps = params()
    opt = info.make(ps)
    calls = []
    handles = [
        opt.register_step_pre_hook(lambda o, a, k: calls.append(("pre", o, snapshot(o)))),
        opt.register_step_post_hook(lambda o, a, k: calls.append(("post", o, snapshot(o)))),
        register_optimizer_step_pre_hook(lambda o, a, k: calls.append(("global-pre", o, None))),
        register_optimizer_step_post_hook(lambda o, a, k: calls.append(("global-post", o, None))),
    ]
    try:
        before = snapshot(opt)
        train(opt, ps, 1)
    finally:
        for handle in handles:
            handle.remove()
    assert [c[0] for c in calls] == ["global-pre", "pre", "post", "global-post"]
    assert all(c[1] is opt for c in calls)
    assert_same(calls[1][2], before)  # the pre hook saw the parameters before the update
    assert_same(calls[2][2], snapshot(opt))
    train(opt, ps, 1, start=1)
    assert len(calls) == 4  # removed hooks do not run


@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_a_pre_hook_may_change_the_gradients(info):
    """What a pre hook writes to ``p.grad`` is what the step applies (torch's contract)."""
    ps, twin = params(), params()
    opt, plain = info.make(ps), info.make(twin)
    def halve(o, args, kwargs):
        for p in ps:
            p.grad.mul_(0.5)

    opt.register_step_pre_hook(halve)
    set_grads(ps, 0)
    set_grads(twin, 0)
    for p in twin:
        p.grad.mul_(0.5)
    opt.step()
    plain.step()
    assert_same(snapshot(opt), snapshot(plain))


@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_state_dict_hooks(info):
    ps = params()
    opt = info.make(ps)
    train(opt, ps, 2)
    seen = []
    opt.register_state_dict_pre_hook(lambda o: seen.append(("pre", o)))

    def post(o, sd):
        seen.append(("post", o))
        sd["note"] = "saved by a hook"
        return sd

    opt.register_state_dict_post_hook(post)
    sd = opt.state_dict()
    assert seen == [("pre", opt), ("post", opt)] and sd["note"] == "saved by a hook"


@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_load_state_dict_hooks(info):
    ps = params()
    opt = info.make(ps)
    train(opt, ps, 2)
    sd = opt.state_dict()
    ps2 = params()
    resumed = info.make(ps2)
    seen = []

    def pre(o, state_dict):
        seen.append(("pre", o))
        state_dict = dict(state_dict)
        state_dict["param_groups"] = [dict(g, lr=g["lr"] / 4) for g in state_dict["param_groups"]]
        return state_dict

    def post(o):
        seen.append(("post", o, o.param_groups[0]["lr"]))

    resumed.register_load_state_dict_pre_hook(pre)
    resumed.register_load_state_dict_post_hook(post)
    resumed.load_state_dict(sd)
    assert seen == [("pre", resumed), ("post", resumed, info.lr / 4)]
    assert sd["param_groups"][0]["lr"] == info.lr  # the caller's dict is unchanged
    # The state itself loaded as saved.
    with torch.no_grad():
        for p, q in zip(ps, ps2, strict=True):
            q.copy_(p)
    saved, loaded = snapshot(opt), snapshot(resumed)
    assert_same(saved, loaded)
