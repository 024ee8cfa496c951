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


class _Sqrt(nn.Module):
    def forward(self, x):
        return torch.sqrt(x)


def _sqrt_model():
    lin = nn.Linear(3, 3, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(3))
    return nn.Sequential(lin, _Sqrt())


# d sqrt(x)/dx = 1 / (2 sqrt(x)) is +inf at x = 0: the backward of sqrt makes the first
# non-finite gradient, which a replay of the call that saw x = 0 reproduces and names.
_ZERO = (0.0, 1.0, 4.0)


def test_a_no_grad_call_before_the_pending_backward_keeps_the_training_call_for_the_replay():
    model = _sqrt_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NumericsError) as info, trainop.check_numerics(model, opt):
        loss = model(torch.tensor(_ZERO)).sum()
        with torch.no_grad():  # e.g. an evaluation between forward and backward
            model(torch.ones(3))
        loss.backward()
        opt.step()
    e = info.value
    assert (e.phase, e.module, e.op, e.step) == ("backward", "1", "SqrtBackward0", 0)


def test_a_parameter_gradient_probe_replays_the_last_call_before_the_step():
    class Root(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))

        def forward(self, x):
            return torch.sqrt(x * self.w).sum()

    model = Root()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NumericsError) as info, trainop.check_numerics(model, opt):
        model(torch.ones(3)).backward()  # finite gradient
        model(torch.tensor(_ZERO)).backward()  # sqrt at 0: the gradient of w is non-finite
        opt.step()
    e = info.value
    assert (e.phase, e.parameter, e.op, e.step) == ("backward", "w", "SqrtBackward0", 0)
