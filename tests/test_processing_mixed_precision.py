"""MixedPrecisionOptimizerWrapper (openseq2seq.md §4, §8.2): the reference table, the
regularization-underflow tests, convergence of a float16 model, overflow skips, saturation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import trainop
from trainop.processing import (
    AutomaticLossScaler,
    BackoffLossScaler,
    ClipByGlobalNorm,
    GradientPipeline,
    MixedPrecisionOptimizerWrapper,
    StaticLossScaler,
)

F16 = torch.float16


def test_reference_table():
    """fp16 w = [1, -2], loss = sum(w * x), SGD 0.5, Backoff(scale_max=1024, step_window=2)."""
    w = torch.tensor([1.0, -2.0], dtype=F16, requires_grad=True)
    gs = torch.zeros((), dtype=torch.int64)
    opt = MixedPrecisionOptimizerWrapper(
        trainop.GradientDescentOptimizer(0.5),
        AutomaticLossScaler("Backoff", {"scale_max": 1024.0, "step_window": 2}))
    assert opt.get_name() == "GradientDescent-MP"
    rows = []
    for x in ([0.25, 0.5], [100.0, 1.0], [0.25, 0.5], [0.25, 0.5]):
        xt = torch.tensor(x, dtype=F16)
        r = opt.minimize(lambda xt=xt: (w * xt).sum(), global_step=gs, var_list=[w])
        rows.append((w.detach().tolist(), int(gs), float(opt.loss_scale), bool(r.applied)))
        assert torch.equal(opt.master(w).to(F16), w.detach())
    assert rows[0] == ([0.875, -2.25], 1, 1024.0, True)
    assert rows[1] == ([0.875, -2.25], 1, 512.0, False)
    assert rows[2][:2] == ([0.75, -2.5], 2) and rows[3][:2] == ([0.625, -2.75], 3)


def _reg_problem(dtype):
    x = torch.ones(3, 2, dtype=dtype) / 2
    y = torch.full((3, 1), 1e-4, dtype=dtype)
    w = torch.full((2, 1), 1e-4, dtype=dtype, requires_grad=True)
    return x, y, w


def l2(scale):
    return lambda w: scale * (w * w).sum() / 2


def test_regularization_normal():
    """Without master copies the float16 regularization gradient underflows to 0."""
    for dtype, expected in ((F16, 0.0), (torch.float32, 1e-8)):
        x, y, w = _reg_problem(dtype)
        reg = l2(1e-4)(w)
        loss = ((y - x @ w) ** 2).mean() + reg
        (grad,) = torch.autograd.grad(loss, w)
        if dtype == F16:
            assert float(reg) == 0.0 and bool((grad == 0).all())
        else:
            assert float(reg) == pytest.approx(1e-12, rel=1e-3)
            np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-3)


@pytest.mark.parametrize("loss_scale", [None, AutomaticLossScaler("Backoff")],
                         ids=["S=1", "backoff"])
def test_regularization_mixed(loss_scale):
    """The float32 master-copy path: the regularization gradient is 1e-8 (atol 1e-11)."""
    x, y, w = _reg_problem(F16)
    opt = MixedPrecisionOptimizerWrapper(trainop.AdamOptimizer(0.001), loss_scale)
    opt.add_regularizer(w, l2(1e-4))
    batch = opt.compute_gradients(lambda: ((y - x @ w) ** 2).float().mean(), var_list=[w])
    (grad, master), = list(batch)
    assert master.dtype == torch.float32 and master is opt.master(w)
    np.testing.assert_allclose(grad.numpy(), 1e-8, atol=1e-11)
    opt.apply_gradients(batch)
    assert opt.get_slot(w, "m").dtype == torch.float32
    assert float(opt.get_slot(w, "m").abs().max()) > 0  # the update saw the tiny gradient


def _least_squares(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((20, 3))
    y = rng.random((20, 1))
    w_star = np.linalg.solve(x.T @ x, x.T @ y)
    return x, y, w_star


@pytest.mark.parametrize("mode", ["mixed", "float32"])
def test_convergence(mode):
    """openseq2seq mp_wrapper_test.test_convergence: Adam 0.05, 6000 steps, atol 0.01."""
    x, y, w_star = _least_squares()
    dtype = F16 if mode == "mixed" else torch.float32
    xt, yt = torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype)
    w = torch.zeros(3, 1, dtype=dtype, requires_grad=True)
    inner = trainop.AdamOptimizer(0.05, params=[w])
    if mode == "mixed":
        opt = MixedPrecisionOptimizerWrapper(inner, AutomaticLossScaler("Backoff"))
        pipe = opt.pipeline
    else:
        pipe = GradientPipeline(inner)
    skipped = 0
    for _ in range(6000):
        w.grad = None
        loss = ((xt @ w - yt) ** 2).float().mean()
        pipe.scale_loss(loss).backward()
        skipped += int(not bool(pipe.step().applied))
    np.testing.assert_allclose(w.detach().double().numpy(), w_star, atol=0.01)
    if mode == "mixed":
        assert opt.get_slot(w, "v").dtype == torch.float32
        np.testing.assert_allclose(opt.master(w).double().numpy(), w_star, atol=0.01)
        assert float(opt.loss_scale) <= 2.0 ** 14 and skipped < 100


def test_overflow_moves_nothing_but_the_scale():
    w = torch.tensor([1.0, -2.0, 0.5], dtype=F16, requires_grad=True)
    b = torch.tensor([0.25], requires_grad=True)  # a float32 variable in a mixed model
    gs = torch.zeros((), dtype=torch.int64)
    opt = MixedPrecisionOptimizerWrapper(trainop.AdamOptimizer(0.1),
                                         BackoffLossScaler(scale_max=2.0 ** 12))
    pipe = GradientPipeline(opt, [ClipByGlobalNorm(1.0)])

    def loss(x):
        return (w * x).float().sum() + b.sum() * float(x[0])

    pipe.minimize(lambda: loss(torch.tensor([1.0, 1.0, 1.0], dtype=F16)), global_step=gs,
                  var_list=[w, b])
    state = (w.detach().clone(), opt.master(w).clone(), b.detach().clone(),
             opt.get_slot(w, "m").clone(), opt.get_slot(w, "v").clone(),
             opt.get_slot(b, "m").clone(), float(opt.optimizer.param_groups[0]["non_slot"][
                 "beta1_power"]), int(gs))
    r = pipe.minimize(lambda: loss(torch.tensor([60000.0, 1.0, 1.0], dtype=F16)),
                      global_step=gs, var_list=[w, b])
    assert not bool(r.applied) and float(opt.loss_scale) == 2.0 ** 11
    after = (w.detach(), opt.master(w), b.detach(), opt.get_slot(w, "m"),
             opt.get_slot(w, "v"), opt.get_slot(b, "m"),
             float(opt.optimizer.param_groups[0]["non_slot"]["beta1_power"]), int(gs))
    for a, c in zip(state, after, strict=True):
        assert torch.equal(a, c) if isinstance(a, torch.Tensor) else a == c


def test_saturating_copy_back_and_bfloat16():
    w = torch.tensor([60000.0, 1.0], dtype=F16, requires_grad=True)
    opt = MixedPrecisionOptimizerWrapper(trainop.GradientDescentOptimizer(1.0))
    opt.apply_gradients([(torch.tensor([-10000.0, 0.0], dtype=F16), w)])
    assert float(opt.master(w)[0]) == 70000.0 and float(w[0]) == 65504.0
    v = torch.tensor([1.0, 2.0], dtype=torch.bfloat16, requires_grad=True)
    opt = MixedPrecisionOptimizerWrapper(trainop.GradientDescentOptimizer(1e-3))
    for _ in range(10):
        opt.apply_gradients([(torch.tensor([1.0, 1.0], dtype=torch.bfloat16), v)])
    # bfloat16 alone would not move 1.0 by 1e-3 steps; the master accumulates them
    torch.testing.assert_close(opt.master(v), torch.tensor([0.99, 1.99]))
    assert v.dtype == torch.bfloat16 and float(v[0]) == float(torch.tensor(0.99).bfloat16())


def test_static_scale_never_skips():
    """Q9: a static scale does not check for overflow; an int scale is accepted."""
    w = torch.tensor([1.0], dtype=F16, requires_grad=True)
    opt = MixedPrecisionOptimizerWrapper(trainop.GradientDescentOptimizer(1.0), 512)
    assert isinstance(opt.loss_scaler, StaticLossScaler) and float(opt.loss_scale) == 512.0
    r = opt.apply_gradients([(torch.tensor([math.inf], dtype=F16), w)])
    assert bool(r.applied) and math.isinf(float(opt.master(w)))
    assert float(w) == -65504.0  # the copy back saturates, as OpenSeq2Seq's saturate_cast


def test_torch_style_and_state_dict():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).half()
    inner = trainop.AdamOptimizer(0.01, params=model.parameters())
    opt = MixedPrecisionOptimizerWrapper(inner, AutomaticLossScaler("Backoff"))
    assert all(p.dtype == torch.float32 for p in inner.param_groups[0]["params"])
    x = torch.randn(8, 3).half()
    for _ in range(3):
        opt.zero_grad()
        opt.scale_loss(model(x).float().pow(2).mean()).backward()
        assert model.weight.grad.dtype == F16
        assert bool(opt.step().applied)
    assert torch.equal(opt.master(model.weight).half(), model.weight.detach())
    sd = opt.state_dict()
    model2 = torch.nn.Linear(3, 1).half()
    opt2 = MixedPrecisionOptimizerWrapper(trainop.AdamOptimizer(0.01,
                                                                params=model2.parameters()),
                                          AutomaticLossScaler("Backoff"))
    opt2.load_state_dict(sd)
    assert torch.equal(model2.weight.detach(), model.weight.detach())
    assert torch.equal(opt2.get_slot(model2.weight, "m"), opt.get_slot(model.weight, "m"))


@pytest.mark.parametrize("entry", ["minimize", "step"])
def test_native_kernels_get_float32_gradients(entry, monkeypatch):
    """Off the Triton path a master's half gradient is widened to float32 before the update:
    the native C kernels (which trust dtypes) get float32 gradients, and the batch's pairs
    read as float32."""
    from trainop.kernels import native
    if not native.available():
        pytest.skip("the native kernels are not built here")
    seen = []
    real = native.run

    def spy(rule, lists, *args, **kwargs):
        seen.append({g.dtype for g in lists[1]})
        return real(rule, lists, *args, **kwargs)

    monkeypatch.setattr(native, "run", spy)
    w = torch.tensor([1.0, -2.0, 0.5], dtype=F16, requires_grad=True)
    opt = MixedPrecisionOptimizerWrapper(trainop.AdamOptimizer(0.1, params=[w]),
                                         AutomaticLossScaler("Backoff"))
    if entry == "minimize":
        batch = opt.compute_gradients(lambda: (w * w).sum(), var_list=[w])
        assert [g.dtype for g, _ in batch] == [torch.float32]
        opt.apply_gradients(batch)
    else:
        opt.scale_loss((w * w).sum()).backward()
        opt.step()
    assert seen == [{torch.float32}]


def test_widen_on_use():
    """A batch's half gradient of a float32 variable, marked widen-on-use: stored as it is
    until read as a tensor, then its float32 widening (once); a pair that is not a dense half
    gradient of a float32 variable is refused, and nothing is marked."""
    from trainop.processing import Gradients

    g16 = torch.tensor([0.1, -3.0, 65504.0], dtype=F16)
    batch = Gradients([(g16, torch.zeros(3)), (torch.ones(3), torch.zeros(3))])
    with pytest.raises(ValueError, match=r"`indices\[1\]` \(1\) to name a pair with a dense "
                       r"float16/bfloat16 gradient of a float32 variable, got a dense "
                       r"torch.float32 gradient"):
        batch.widen_on_use([0, 1])
    assert not batch.narrowed
    batch.widen_on_use([0])
    assert batch.narrowed and batch.stored_pairs()[0][0] is g16
    assert batch.amax().tolist() == [65504.0, 1.0]  # max |g| read from the half tensor
    (g, _), _ = batch.raw_pairs()
    assert g.dtype == torch.float32 and torch.equal(g, g16.float()) and not batch.narrowed
    assert g.tolist() == [0.0999755859375, -3.0, 65504.0]  # float16's 0.1: 1638 * 2**-14
    assert batch.present_grads()[0] is g
