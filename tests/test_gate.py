"""The gate folded into the update: a gradient multiplier and a skip flag, on every path.

A skipped update (``found_inf`` nonzero) must leave params, slots and every counter (the
group's step, Adam's beta powers, ``global_step``) exactly as they were; a multiplier must give
the same result as multiplying the gradients first.
"""

from __future__ import annotations

import copy

import pytest
import torch
from optimizer_kwargs import kwargs_for

from trainop.registry import OPTIMIZER_CLASSES

CASES = [(name, impl) for name, cls in OPTIMIZER_CLASSES.items() for impl in cls.IMPLEMENTATIONS]


def make(name, implementation):
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=gen).requires_grad_() for s in [(5,), (2, 3)]]
    opt = OPTIMIZER_CLASSES[name](params=params, implementation=implementation,
                                  **kwargs_for(name))
    return params, opt, gen


def snapshot(params, opt):
    return copy.deepcopy(([p.detach() for p in params], [dict(opt.state[p]) for p in params],
                          [dict(g["non_slot"]) for g in opt.param_groups]))


def assert_same(a, b):
    (pa, sa, na), (pb, sb, nb) = a, b
    for x, y in zip(pa, pb, strict=True):
        assert torch.equal(x, y)
    for x, y in zip(sa, sb, strict=True):
        assert x.keys() == y.keys()
        for name in x:
            assert torch.equal(x[name], y[name]), name
    for x, y in zip(na, nb, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k


@pytest.mark.parametrize(("name", "implementation"), CASES, ids=str)
def test_skipped_update_changes_nothing(name, implementation):
    params, opt, gen = make(name, implementation)
    for _ in range(2):  # slots and counters exist and are non-trivial
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    before = snapshot(params, opt)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    opt.step(found_inf=torch.tensor(1.0))
    assert_same(snapshot(params, opt), before)
    global_step = torch.tensor(7)
    opt.apply_gradients([(p.grad, p) for p in params], global_step=global_step,
                        found_inf=torch.tensor(1.0))
    assert_same(snapshot(params, opt), before)
    assert int(global_step) == 7
    opt.apply_gradients([(p.grad, p) for p in params], global_step=global_step,
                        found_inf=torch.tensor(0.0))
    assert int(global_step) == 8
    assert int(opt.param_groups[0]["non_slot"]["step"]) == 3


@pytest.mark.parametrize(("name", "implementation"), CASES, ids=str)
def test_multiplier_equals_prescaled_gradients(name, implementation):
    params_a, opt_a, gen_a = make(name, implementation)
    params_b, opt_b, gen_b = make(name, implementation)
    multiplier = torch.tensor(0.375)
    for _ in range(3):
        grads = [torch.randn(p.shape, generator=gen_a) for p in params_a]
        for p, g in zip(params_a, grads, strict=True):
            p.grad = g.clone()
        opt_a.step(grad_multiplier=multiplier)
        for p, g in zip(params_b, grads, strict=True):
            p.grad = g * multiplier
        opt_b.step()
    rtol = 0 if implementation != "fused" else 1e-6
    for a, b in zip(params_a, params_b, strict=True):
        torch.testing.assert_close(a, b, rtol=rtol, atol=rtol)


def test_gate_arguments_are_validated():
    params, opt, _ = make("AdamOptimizer", None)
    for p in params:
        p.grad = torch.ones(p.shape)
    with pytest.raises(TypeError, match="grad_multiplier"):
        opt.step(grad_multiplier=0.5)
    with pytest.raises(TypeError, match="found_inf"):
        opt.step(found_inf=torch.zeros(2))


@pytest.mark.parametrize(("name", "implementation"), CASES, ids=str)
def test_widened_gradients_equal_float32_ones(name, implementation):
    """``apply_gradients(widen_gradients=True)``: a float16/bfloat16 gradient of a float32
    variable stands for its float32 widening on every path (bit for bit the update with the
    float32 gradient, under a multiplier too, one bucket holding both half dtypes); the half
    gradients are left as they are."""
    params_a, opt_a, gen = make(name, implementation)
    params_b, opt_b, _ = make(name, implementation)
    multiplier = torch.tensor(0.375)
    for dtypes in ((torch.float16, torch.bfloat16), (torch.bfloat16, torch.bfloat16)):
        grads = [torch.randn(p.shape, generator=gen).to(d) for p, d in zip(params_a, dtypes,
                                                                          strict=True)]
        given = [g.clone() for g in grads]
        opt_a.apply_gradients(zip(grads, params_a, strict=True), grad_multiplier=multiplier,
                              widen_gradients=True)
        opt_b.apply_gradients([(g.float(), p) for g, p in zip(grads, params_b, strict=True)],
                              grad_multiplier=multiplier)
        assert all(torch.equal(g, h) for g, h in zip(grads, given, strict=True))
    assert_same(snapshot(params_a, opt_a), snapshot(params_b, opt_b))


def test_widen_gradients_is_validated():
    """A half gradient of a float32 variable needs ``widen_gradients=True``; a sparse one, or
    one of a float64 variable, is refused even then (nothing changes)."""
    params, opt, _ = make("AdamOptimizer", None)
    before = snapshot(params, opt)
    half = torch.ones(5, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="dtype torch.float32, got torch.bfloat16"):
        opt.apply_gradients([(half, params[0])])
    with pytest.raises(TypeError, match="widen_gradients"):
        opt.apply_gradients([(half, params[0])], widen_gradients="yes")
    with pytest.raises(TypeError, match="dtype torch.float32, got torch.bfloat16"):
        opt.apply_gradients([(half.to_sparse(), params[0])], widen_gradients=True)
    w64 = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    with pytest.raises(TypeError, match="dtype torch.float64, got torch.bfloat16"):
        opt.apply_gradients([(half, w64)], widen_gradients=True)
    assert_same(snapshot(params, opt), before)
