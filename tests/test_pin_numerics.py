"""Pins of the numerics checker's phases (issue #34): a NaN made only in a parameter's gradient
(a hook on the parameter) or only by the update (an infinite learning rate) is reported under
its own phase and only when that phase is checked."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import trainop
from trainop.training.numerics.errors import NumericsError


def _run(phases, *, lr=0.1, nan_grad=False, steps=1):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2))
    if nan_grad:
        model[0].weight.register_hook(lambda g: g * float("nan"))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    with trainop.check_numerics(model, opt, phases=phases, replay=False) as checker:
        for _ in range(steps):
            opt.zero_grad()
            model(torch.ones(4, 3)).sum().backward()
            opt.step()
    return checker


def test_a_nan_parameter_gradient_is_a_backward_error_only_when_backward_is_checked():
    with pytest.raises(NumericsError) as info:
        _run(("backward",), nan_grad=True)
    assert info.value.phase == "backward" and info.value.step == 0
    _run(("forward",), nan_grad=True)  # not checked: no error


def test_an_update_that_overflows_is_an_update_error_only_when_update_is_checked():
    with pytest.raises(NumericsError) as info:
        _run(("update",), lr=float("inf"))
    assert info.value.phase == "update" and info.value.step == 0
    _run(("forward", "backward"), lr=float("inf"))


def test_the_step_counts_optimizer_steps():
    assert _run(("forward", "backward", "update"), steps=2).step == 2
