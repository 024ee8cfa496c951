"""``MomentumOptimizer`` against ``torch.optim.SGD(momentum=m, dampening=0)``, as its docstring
states: equal to the bit with ``implementation="fused"`` (torch's fused SGD kernel), over many
steps, Nesterov included (float64: for values float32 holds exactly); the other implementations
keep TF's order of operations and differ by rounding, within 1 ulp of the larger of ``|var|``
before and after per step (a few with Nesterov)."""

from __future__ import annotations

import pytest
import torch

import trainop

LR, M, N = 0.1, 0.9, 4096


def _data(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(N, generator=g, dtype=torch.float64).to(dtype) for _ in range(3)]


def _run(make, dtype, steps=20):
    g = torch.Generator().manual_seed(1)
    w = torch.nn.Parameter(torch.randn(N, generator=g, dtype=torch.float64).to(dtype))
    opt = make([w])
    for _ in range(steps):
        w.grad = torch.randn(N, generator=g, dtype=torch.float64).to(dtype)
        opt.step()
    return w.detach()


# float64: values float32 holds exactly (TF, and so trainop, round a Python lr and momentum to
# float32 first; torch takes them as they are)
@pytest.mark.parametrize("dtype, lr, m", [(torch.float32, LR, M),
                                          (torch.float64, 0.125, 0.875)])
@pytest.mark.parametrize("nesterov", [False, True])
def test_fused_equals_torch_sgd_to_the_bit(nesterov, dtype, lr, m):
    ours = _run(lambda p: trainop.MomentumOptimizer(p, lr=lr, momentum=m, use_nesterov=nesterov,
                                                    implementation="fused"), dtype)
    for fused in (None, True):  # torch's default (foreach) and its fused kernel agree
        theirs = _run(lambda p, f=fused: torch.optim.SGD(p, lr=lr, momentum=m,
                                                           nesterov=nesterov, fused=f), dtype)
        assert torch.equal(ours, theirs)


def _one_step(make, w0, b0, g0, slot):
    """One step from the weights ``w0`` and the momentum ``b0`` (set as the state ``slot``)."""
    w = torch.nn.Parameter(w0.clone())
    opt = make([w])
    w.grad = torch.zeros_like(w)
    opt.step()  # makes the state
    with torch.no_grad():
        w.copy_(w0)
        opt.state[w][slot].copy_(b0)
    w.grad = g0.clone()
    opt.step()
    return w.detach()


@pytest.mark.parametrize("nesterov, bound", [(False, 1.0), (True, 16.0)])
@pytest.mark.parametrize("implementation", ["native", "foreach", "reference", None])
def test_other_implementations_differ_from_torch_sgd_by_rounding(implementation, nesterov,
                                                                 bound):
    w0, b0, g0 = _data(torch.float32)
    theirs = _one_step(lambda p: torch.optim.SGD(p, lr=LR, momentum=M, nesterov=nesterov),
                       w0, b0, g0, "momentum_buffer")
    ours = _one_step(lambda p: trainop.MomentumOptimizer(
        p, lr=LR, momentum=M, use_nesterov=nesterov, implementation=implementation),
        w0, b0, g0, "momentum")
    # the rule in float64: both are float32 roundings of it
    accum = M * b0.double() + g0.double()
    step = LR * (g0.double() + M * accum) if nesterov else LR * accum
    exact = w0.double() - step
    assert float((ours.double() - exact).abs().max()) < 1e-5
    assert not torch.equal(ours, theirs)  # TF's order rounds otherwise than torch's
    scale = torch.maximum(w0.abs(), theirs.abs())
    ulp = torch.nextafter(scale, torch.full_like(scale, float("inf"))) - scale
    assert float(((ours - theirs).abs() / ulp).max()) <= bound
