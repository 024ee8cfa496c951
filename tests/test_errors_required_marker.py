"""torch's ``required`` marker is a constructor default only (a value every param group
gives): in a param group or a checkpoint's group it is rejected like any value that is not a
hyperparameter, naming the argument, and nothing changes. (A checkpoint whose group held it
used to load, and the optimizer then failed at every step.)"""

from __future__ import annotations

import pytest
import torch
from torch.optim.optimizer import required

import trainop


def _momentum_by_groups():
    a, b = (torch.nn.Parameter(torch.ones(2)) for _ in range(2))
    return trainop.MomentumOptimizer([{"params": [a], "momentum": 0.9},
                                      {"params": [b], "momentum": 0.5}], lr=0.1)


def _step(opt):
    for group in opt.param_groups:
        for p in group["params"]:
            p.grad = torch.ones_like(p)
    opt.step()


def test_checkpoint_group_with_the_marker_is_rejected_unchanged():
    opt = _momentum_by_groups()
    _step(opt)
    sd = opt.state_dict()
    before = opt.state_dict()
    sd["param_groups"][0]["momentum"] = required
    with pytest.raises(TypeError, match=r"^Invalid optimizer checkpoint, group 0: Expected "
                                        r"`momentum` to be a real number, got <required "
                                        r"parameter> \(_RequiredParameter\)$"):
        opt.load_state_dict(sd)
    after = opt.state_dict()
    assert after["param_groups"] == before["param_groups"]
    for key, slots in before["state"].items():
        for name, value in slots.items():
            torch.testing.assert_close(after["state"][key][name], value, rtol=0, atol=0)
    _step(opt)  # still steps


def test_param_group_giving_the_marker_is_rejected():
    opt = trainop.MomentumOptimizer([torch.nn.Parameter(torch.ones(2))], lr=0.1, momentum=0.9)
    with pytest.raises(TypeError, match=r"^Expected `momentum` to be a real number, got "
                                        r"<required parameter> \(_RequiredParameter\)$"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(2))],
                             "momentum": required})
    assert len(opt.param_groups) == 1


def test_group_edited_to_the_marker_raises_at_the_step_unchanged():
    opt = _momentum_by_groups()
    opt.param_groups[1]["lr"] = required
    params = [p for g in opt.param_groups for p in g["params"]]
    with pytest.raises(TypeError, match=r"^Expected `learning_rate` to evaluate to a real "
                                        r"number or a 1-element floating-point tensor, got "
                                        r"<required parameter> \(_RequiredParameter\)$"):
        _step(opt)
    for p in params:
        torch.testing.assert_close(p.detach(), torch.ones(2), rtol=0, atol=0)
    assert not opt.state
