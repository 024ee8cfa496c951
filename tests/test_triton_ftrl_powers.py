"""FTRL's powers on Triton (issue #44, bandwidth): the learning-rate powers whose float32
result is one correctly rounded operation (0: 1, -0.5: sqrt, -1: x, -2: x*x) are compile-time
cases with no float64 work; every power matches TF's formula (written out here in float64)
and the reference path."""

from __future__ import annotations

import os

import pytest
import torch

import trainop
from trainop.kernels import triton as tk

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]


def _tf_ftrl(var, accum, linear, g, lr, power, l1, l2):
    """TF's ApplyFtrl in float64 (no shrinkage)."""
    new = accum + g * g
    p = (lambda x: x ** -power) if power != 0 else (lambda x: torch.ones_like(x))
    linear = linear + g - (p(new) - p(accum)) / lr * var
    quad = p(new) / lr + 2 * l2
    var = torch.where(linear.abs() > l1, (torch.sign(linear) * l1 - linear) / quad,
                      torch.zeros_like(var))
    return var, new, linear


def _run(power, implementation, steps=3):
    gen = torch.Generator().manual_seed(5)
    w = torch.nn.Parameter(torch.randn(1100, generator=gen))
    opt = trainop.FtrlOptimizer(0.5, learning_rate_power=power, l1_regularization_strength=0.01,
                                l2_regularization_strength=0.02, params=[w],
                                implementation=implementation)
    grads = [torch.randn(1100, generator=gen) for _ in range(steps)]
    for g in grads:
        w.grad = g
        opt.step()
    return w.detach().clone(), grads


@pytest.mark.parametrize("power", [0.0, -0.5, -1.0, -2.0, -0.25])
def test_each_power_is_tfs_formula(power, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from trainop.kernels.triton import launch as launch_module

    seen = []
    with tk._family("ftrl") as module:
        real = module.launch
        monkeypatch.setattr(module, "launch",
                            lambda *a, **k: seen.append(k["POWER"]) or real(*a, **k))
        ours, grads = _run(power, "triton")
    assert seen and launch_module  # (launched through the family's launch)
    exact = {0.0: module.ONE, -0.5: module.SQRT, -1.0: module.SAME, -2.0: module.SQUARE}
    assert set(seen) == {exact.get(power, module.GENERAL)}
    theirs, _ = _run(power, "reference")
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    gen = torch.Generator().manual_seed(5)
    var = torch.randn(1100, generator=gen).double()
    accum = torch.full_like(var, 0.1)
    linear = torch.zeros_like(var)
    for g in grads:
        var, accum, linear = _tf_ftrl(var, accum, linear, g.double(), 0.5, power, 0.01, 0.02)
    torch.testing.assert_close(ours.double(), var, rtol=1e-5, atol=1e-6)
    assert os.environ["TRITON_INTERPRET"] == "1"
