"""Fault injection: NaN and ±Inf in random gradients at random steps (250 steps, several
optimizers, float32 and mixed precision). A skipped step changes no param, slot, master copy or
counter (only the loss scale); training still converges afterwards."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

import trainop
from trainop.processing import (
    BackoffLossScaler,
    ClipByGlobalNorm,
    GradientPipeline,
    LossScale,
    MixedPrecisionOptimizerWrapper,
    SkipNonFinite,
)

STEPS = 250
OPTIMIZERS = {
    "gd": lambda params=None: trainop.GradientDescentOptimizer(0.2, params=params),
    "momentum": lambda params=None: trainop.MomentumOptimizer(0.05, 0.9, params=params),
    "adam": lambda params=None: trainop.AdamOptimizer(0.05, params=params),
    "adam_foreach": lambda params=None: trainop.AdamOptimizer(0.05, params=params,
                                                              implementation="foreach"),
    "rmsprop": lambda params=None: trainop.RMSPropOptimizer(0.02, params=params),
    "adagrad": lambda params=None: trainop.AdagradOptimizer(0.5, params=params),
}


def problem(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(64, 4)) + np.eye(64, 4) * 2
    w_true = rng.normal(size=(4, 1))
    return torch.tensor(x, dtype=torch.float32), torch.tensor(x @ w_true, dtype=torch.float32), \
        torch.tensor(w_true, dtype=torch.float32)


def state_of(opt, tensors) -> list[torch.Tensor]:
    out = [t.detach().clone() for t in tensors]
    for group in opt.param_groups:
        out.extend(v.clone() for _, v in sorted(group["non_slot"].items()))
        for p in group["params"]:
            out.extend(v.clone() for _, v in sorted(opt.state[p].items()))
    return out


def assert_same(before, after):
    assert len(before) == len(after)
    for a, b in zip(before, after, strict=True):
        assert torch.equal(a, b)


def inject(grads, rnd):
    g = grads[rnd.randrange(len(grads))]
    flat = g.view(-1)
    flat[rnd.randrange(flat.numel())] = rnd.choice([math.nan, math.inf, -math.inf])


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
def test_float32_faults(opt_name):
    x, y, w_true = problem()
    w = torch.zeros(4, 1, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = OPTIMIZERS[opt_name]()
    scaler = BackoffLossScaler(scale_max=2.0 ** 10, step_window=20)
    skip = SkipNonFinite()
    pipe = GradientPipeline(opt, [LossScale(scaler), ClipByGlobalNorm(5.0), skip])
    gs = torch.zeros((), dtype=torch.int64)
    rnd = random.Random(opt_name)
    faults = 0
    for step in range(STEPS):
        loss = ((x @ w + b - y) ** 2).mean()
        grads = list(torch.autograd.grad(loss, [w, b]))
        bad = step < STEPS - 50 and rnd.random() < 0.15
        if bad:
            faults += 1
            inject(grads, rnd)
        before = state_of(opt, [w, b, gs]) if step else None
        result = pipe.apply_gradients(list(zip(grads, [w, b], strict=True)), global_step=gs)
        assert bool(result.applied) == (not bad)
        if bad and before is not None:
            assert_same(before, state_of(opt, [w, b, gs]))
    assert faults > 20 and int(skip.total) == faults and int(pipe.skipped_steps) == faults
    assert int(gs) == STEPS - faults
    assert float(((x @ w + b - y) ** 2).mean()) < 1e-3
    torch.testing.assert_close(w.detach(), w_true, atol=0.02, rtol=0)


@pytest.mark.parametrize("opt_name", ["momentum", "adam", "rmsprop"])
def test_mixed_precision_faults(opt_name):
    x, y, w_true = problem(1)
    model = torch.nn.Linear(4, 1).half()
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    params = list(model.parameters())
    inner = OPTIMIZERS[opt_name](params)
    mp = MixedPrecisionOptimizerWrapper(inner, BackoffLossScaler(step_window=25))
    pipe = GradientPipeline(mp, [ClipByGlobalNorm(5.0)])
    xh, yh = x.half(), y.half()
    rnd = random.Random(opt_name)
    faults = natural = 0
    scales = []
    for step in range(STEPS):
        pipe.zero_grad()
        loss = ((model(xh) - yh).float() ** 2).mean()
        pipe.scale_loss(loss).backward()
        bad = step < STEPS - 50 and rnd.random() < 0.15
        if bad:
            faults += 1
            inject([p.grad for p in params], rnd)
        before = state_of(inner, params + mp.master_params())
        scale = float(mp.loss_scale)
        result = pipe.step()
        scales.append(float(mp.loss_scale))
        if bad:
            assert not bool(result.applied)
        if not bool(result.applied):
            natural += not bad
            assert_same(before, state_of(inner, params + mp.master_params()))
            assert float(mp.loss_scale) == max(scale / 2, 1.0)
    assert faults > 20 and natural < 20
    assert int(pipe.skipped_steps) == faults + natural
    assert min(scales) < 2.0 ** 14
    for p in inner.param_groups[0]["params"]:
        assert p.dtype == torch.float32
        for slot in inner.state[p].values():
            assert slot.dtype in (torch.float32, torch.int64)
    final = float(((model(xh) - yh).float() ** 2).mean())
    assert final < 5e-3
    torch.testing.assert_close(model.weight.detach().float().T, w_true, atol=0.03, rtol=0)


@pytest.mark.parametrize("opt_name", ["gd", "adam"])
def test_mixed_precision_faults_without_pipeline(opt_name):
    """The wrapper alone (its own loss scaler, no GradientPipeline): an injected NaN/Inf skips
    the step with params, masters, slots and counters unchanged; training converges after."""
    x, y, w_true = problem(2)
    w = torch.zeros(4, 1, dtype=torch.float16, requires_grad=True)
    inner = OPTIMIZERS[opt_name]([w])
    mp = MixedPrecisionOptimizerWrapper(inner, BackoffLossScaler(step_window=25))
    xh, yh = x.half(), y.half()
    rnd = random.Random(f"alone-{opt_name}")
    faults = 0
    for step in range(STEPS):
        mp.zero_grad()
        mp.scale_loss(((xh @ w - yh).float() ** 2).mean()).backward()
        bad = step < STEPS - 50 and rnd.random() < 0.15
        if bad:
            faults += 1
            inject([w.grad], rnd)
        before = state_of(inner, [w, *mp.master_params()]) if step else None
        result = mp.step()
        if bad:
            assert not bool(result.applied)
            if before is not None:
                assert_same(before, state_of(inner, [w, *mp.master_params()]))
    assert faults > 20
    assert float(((xh @ w - yh).float() ** 2).mean()) < 5e-3
    torch.testing.assert_close(w.detach().float(), w_true, atol=0.03, rtol=0)

