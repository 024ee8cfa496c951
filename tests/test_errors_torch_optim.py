"""torch.optim <-> trainop conversions given hostile or mismatched state (#34): each refused
with a clear error before anything changes, or (a huge step) computed without a loop."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import trainop
import trainop.checkpoints as ckpt


def _params():
    return [torch.nn.Parameter(torch.randn(3)), torch.nn.Parameter(torch.randn(2))]


def _torch_adam(params, **kwargs):
    opt = torch.optim.Adam(params, lr=0.1, **kwargs)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    return opt


def _adam(params, **kwargs):
    opt = trainop.AdamOptimizer(0.1, params=params, **kwargs)
    opt.apply_gradients([(torch.ones_like(p), p) for p in params])
    return opt


def _slots(opt):
    return [{k: v.clone() for k, v in opt.state[p].items()} for g in opt.param_groups
            for p in g["params"]] + [{k: v.clone() for k, v in g["non_slot"].items()}
                                     for g in opt.param_groups]


def _unchanged(before, after):
    return all(a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
               for a, b in zip(before, after, strict=True))


def _with_step(sd, step):
    sd = {"state": {k: {**v, "step": torch.tensor(step)} for k, v in sd["state"].items()},
          "param_groups": sd["param_groups"]}
    return sd


def _nadam(params):
    opt = torch.optim.NAdam(params, lr=0.1)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    return opt.state_dict()


def _stray_ids(params):
    sd = _torch_adam(params).state_dict()
    return {"state": {k + 10: v for k, v in sd["state"].items()},
            "param_groups": sd["param_groups"]}


FROM_CASES = [
    ("fractional_step", lambda ps: _with_step(_torch_adam(ps).state_dict(), 3.5), ValueError,
     r"Expected the torch state's `step` \(group 0\) to be a whole number in \[0, 2\*\*62\], "
     r"got 3.5"),
    ("step_past_limit", lambda ps: _with_step(_torch_adam(ps).state_dict(), 2.0 ** 63),
     ValueError, r"`step` \(group 0\) to be a whole number in \[0, 2\*\*62\], got "
                 r"9.223372036854776e\+18"),
    ("nan_step", lambda ps: _with_step(_torch_adam(ps).state_dict(), float("nan")),
     ValueError, r"to be a whole number in \[0, 2\*\*62\], got nan"),
    ("stray_ids", _stray_ids, ValueError,
     r"Expected the torch state's keys to be the parameter ids of its param_groups \(\[0, 1\] "
     r"\(list\)\), got \[10, 11\] \(list\): nothing would be loaded for them"),
    ("other_betas", lambda ps: _torch_adam(ps, betas=(0.8, 0.999)), ValueError,
     r"Cannot map torch.optim.Adam with betas\[0\]=0.8 \(group 0\): the trainop optimizer has "
     r"beta1=0.9; the state depends on it"),
    ("nadam_state_dict", _nadam, ValueError,
     r"Cannot map group 0 to AdamOptimizer: its option 'momentum_decay' belongs to another "
     r"torch optimizer"),
]


@pytest.mark.parametrize("case", FROM_CASES, ids=[c[0] for c in FROM_CASES])
def test_from_torch_refuses(case):
    _, make, error, pattern = case
    params = _params()
    source = make(params)
    ours = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt = _adam(ours)
    before = _slots(opt)
    with pytest.raises(error, match=pattern):
        ckpt.from_torch_optim(source, opt)
    assert _unchanged(before, _slots(opt))


def test_nadam_state_without_its_group_option_is_refused_too():
    params = _params()
    sd = _nadam(params)
    sd["param_groups"] = [{k: v for k, v in g.items() if k != "momentum_decay"}
                          for g in sd["param_groups"]]
    with pytest.raises(ValueError, match=r"it also holds \['mu_product'\]: another optimizer's "
                                         r"state"):
        ckpt.from_torch_optim(sd, _adam([torch.nn.Parameter(p.detach()) for p in params]))


def test_sgd_nesterov_must_agree_both_ways():
    params = _params()
    torch_sgd = torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True)
    opt = trainop.MomentumOptimizer(0.1, 0.9, params=params)
    with pytest.raises(ValueError, match=r"Cannot map torch.optim.SGD with nesterov=True "
                                         r"\(group 0\): the trainop optimizer has "
                                         r"use_nesterov=False"):
        ckpt.from_torch_optim(torch_sgd, opt)
    with pytest.raises(ValueError, match=r"with nesterov=True"):
        ckpt.to_torch_optim(opt, torch_sgd)


def test_a_huge_step_needs_no_loop():
    """Step 1e9 looped once per step (minutes); beyond 2**16 steps the power is float64's
    ``beta ** step`` rounded to float32 (torch's own bias correction is float64's)."""
    params = _params()
    sd = _with_step(_torch_adam(params, betas=(0.9, 0.99999)).state_dict(), 1e9)
    opt = trainop.AdamOptimizer(0.1, beta2=0.99999, params=[torch.nn.Parameter(p.detach())
                                                           for p in params])
    start = time.monotonic()
    ckpt.from_torch_optim(sd, opt)
    assert time.monotonic() - start < 30  # a backstop only (#39)
    non_slot = opt.param_groups[0]["non_slot"]
    assert int(non_slot["step"]) == 10**9
    b2 = float(np.float32(0.99999))
    assert float(non_slot["beta2_power"]) == float(np.float32(b2 ** (10**9 + 1)))
    assert float(non_slot["beta1_power"]) == 0.0


def test_to_torch_refuses_another_models_shapes():
    opt = _adam(_params())
    target = torch.optim.Adam([torch.nn.Parameter(torch.randn(3)),
                               torch.nn.Parameter(torch.randn(5))], lr=0.1)
    with pytest.raises(ValueError, match=r"Expected parameter 1 of group 0 to have the same "
                                         r"shape in both optimizers, got \(5,\) \(torch\) and "
                                         r"\(2,\) \(trainop\): not the same model"):
        ckpt.to_torch_optim(opt, target)
    assert target.state_dict()["state"] == {}


def test_to_torch_refuses_other_betas():
    opt = _adam(_params())
    target = torch.optim.Adam(_params(), lr=0.1, betas=(0.9, 0.99))
    with pytest.raises(ValueError, match=r"betas\[1\]=0.99 \(group 0\): the trainop optimizer "
                                         r"has beta2=0.999"):
        ckpt.to_torch_optim(opt, target)


def test_to_torch_refuses_a_step_that_disagrees_with_the_powers():
    """TF's global_step need not be Adam's count: loaded as the step, it disagrees with the
    beta powers, and torch (which keeps only the step) would bias-correct differently."""
    opt = _adam(_params())
    opt.apply_gradients([(torch.ones_like(p), p) for p in opt.param_groups[0]["params"]])
    sd = opt.state_dict()
    sd["param_groups"][0]["non_slot"]["step"] = torch.tensor(7)
    opt.load_state_dict(sd)
    target = torch.optim.Adam(_params(), lr=0.1)
    want = float(np.float32(np.float32(0.9) ** 8))
    with pytest.raises(ValueError, match=rf"its beta1_power 0.72\d* is not beta1\^\(step \+ 1\)"
                                         rf" = {want!r} for its step 7"):
        ckpt.to_torch_optim(opt, target)
    assert target.state_dict()["state"] == {}
