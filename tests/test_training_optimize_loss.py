"""trainop.optimize_loss: OpenSeq2Seq's training step, against the spec's reference values and
against the same pieces (optimizer, wrapper, pipeline) driven by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import trainop
from trainop.processing import (
    AutomaticLossScaler,
    ClipByGlobalNorm,
    GradientPipeline,
    MixedPrecisionOptimizerWrapper,
)


def _f(t: torch.Tensor) -> list[float]:
    return t.detach().double().flatten().tolist()


# ---------------------------------------------------------------- iter_size (spec §2.6, §8.1)
def test_iter_size_trajectory_spec_2_6():
    """iter_size 3, SGD lr 1, gradients 1..8 at micro-steps 0..7 (a scalar variable, which
    upstream cannot clip: Q7): w = -1/3 at once (Q5), -3.333 at micro-step 3, -9.333 at 6."""
    w = torch.zeros((), requires_grad=True)
    op = trainop.optimize_loss(lambda k: w * k, "SGD", {}, 1.0, var_list=[w], iter_size=3,
                               clip_gradients=100.0)
    seen = []
    for k in range(8):
        op(float(k + 1))
        seen.append((round(w.item(), 3), int(op.global_step)))
    assert seen == [(-0.333, 1), (-0.333, 1), (-0.333, 1), (-3.333, 2), (-3.333, 2),
                    (-3.333, 2), (-9.333, 3), (-9.333, 3)]
    assert w.item() == pytest.approx(-1 / 3 - 9 / 3 - 18 / 3, rel=1e-6)


def test_accumulate_first_schedule():
    w = torch.zeros((), requires_grad=True)
    op = trainop.optimize_loss(lambda k: w * k, "SGD", {}, 1.0, var_list=[w], iter_size=3,
                               accumulate_first=True)
    for k in range(6):
        op(float(k + 1))
    assert int(op.global_step) == 2  # updates at micro-steps 2 and 5
    assert w.item() == pytest.approx(-(1 + 2 + 3) / 3 - (4 + 5 + 6) / 3, rel=1e-6)


def test_upstream_iter_size_test_8_1():
    """OpenSeq2Seq's IterSizeTests.test_updates: 3 skip steps accumulate 1x, 2x, 3x true_g,
    the 4th updates with 4 of 8 micro-steps (no renormalization) and clears."""
    rng = np.random.RandomState(0)
    x = torch.tensor(rng.rand(10, 10), dtype=torch.float32)
    y = torch.tensor(rng.rand(10, 1), dtype=torch.float32)
    dense = nn.Linear(10, 1, bias=False)
    op = trainop.optimize_loss(lambda: ((dense(x) - y) ** 2).mean(), "SGD", {},
                               lambda gs: trainop.schedules.fixed_lr(gs, 0.1), model=dense,
                               iter_size=8, on_horovod=True, skip_update_ph=True)

    def accumulator():
        accs = op.state_dict()["step"]["accumulator"]["accumulators"]
        return accs.get(0, torch.zeros_like(dense.weight))

    for _ in range(3):
        assert torch.count_nonzero(accumulator()) == 0
        v = dense.weight.detach().clone().double()
        true_g = 2 * (x.double().T @ x.double() @ v.T - x.double().T @ y.double()) / 10 / 8
        for k in range(1, 4):
            op(skip_update=True)
            np.testing.assert_allclose(accumulator().double().T, k * true_g, atol=1e-7)
            assert torch.equal(dense.weight.double(), v)
        op(skip_update=False)
        assert torch.count_nonzero(accumulator()) == 0
        np.testing.assert_allclose(dense.weight.detach().double(), v - 0.1 * 4 * true_g.T,
                                   atol=1e-7)


def test_skip_update_feed_is_required_with_placeholder():
    w = torch.zeros(2, requires_grad=True)
    op = trainop.optimize_loss(lambda: w.sum(), "SGD", {}, 0.1, var_list=[w], iter_size=2,
                               skip_update_ph=True)
    with pytest.raises(ValueError, match="Expected `skip_update` on every call"):
        op()
    assert op.micro_step == 0 and w.grad is None


# ---------------------------------------------------------------- clipping (spec §2.5)
@pytest.mark.parametrize("clip,factor", [(0.5, 0.5 / math.sqrt(2)), (10.0, 1.0)])
def test_global_norm_clipping_reference(clip, factor):
    w1 = torch.zeros(2, requires_grad=True)
    w2 = torch.zeros(2, requires_grad=True)
    g1, g2 = torch.tensor([0.6, 0.8]), torch.tensor([1.0, 0.0])
    op = trainop.optimize_loss(lambda: (w1 * g1).sum() + (w2 * g2).sum(), "SGD", {}, 1.0,
                               var_list=[w1, w2], clip_gradients=clip)
    op()
    if clip == 0.5:
        assert factor == pytest.approx(0.353553, abs=1e-6)
    np.testing.assert_allclose(_f(w1), [-0.6 * factor, -0.8 * factor], rtol=1e-6)
    np.testing.assert_allclose(_f(w2), [-1.0 * factor, 0.0], rtol=1e-6)
    result = op.last_result
    assert float(result.global_norm) == pytest.approx(math.sqrt(2), rel=1e-6)
    assert float(result.clipped_global_norm) == pytest.approx(math.sqrt(2) * factor, rel=1e-6)


# ---------------------------------------------------------------- LARC (spec §3)
@pytest.mark.parametrize("params,dw,dw2", [
    ({"larc_eta": 0.002}, [-0.006, -0.008], [-1e-8, 0.0]),
    ({"larc_eta": 0.002, "larc_mode": "scale"}, [-0.0006, -0.0008], None),
    ({"larc_eta": 1.0}, [-0.06, -0.08], None),
    ({"larc_eta": 0.002, "min_update": 0.5}, [-0.03, -0.04], [-0.05, 0.0]),
])
def test_larc_reference_table(params, dw, dw2):
    w = torch.tensor([3.0, 4.0], requires_grad=True)
    w2 = torch.zeros(2, requires_grad=True)
    g, g2 = torch.tensor([0.6, 0.8]), torch.tensor([1.0, 0.0])
    op = trainop.optimize_loss(lambda: (w * g).sum() + (w2 * g2).sum(), "SGD", {}, 0.1,
                               var_list=[w, w2], larc_params=params)
    op()
    # w is float32 around 3-4: compare the new values at float32 precision (ulp 4.8e-7)
    np.testing.assert_allclose(_f(w), np.add([3.0, 4.0], dw), rtol=2e-7)
    if dw2 is not None:
        np.testing.assert_allclose(_f(w2), dw2, rtol=1e-5, atol=1e-12)


def test_clip_with_larc_is_an_error():
    w = torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="clip_gradients and larc_params"):
        trainop.optimize_loss(lambda: w.sum(), "SGD", {}, 0.1, var_list=[w],
                              clip_gradients=1.0, larc_params={"larc_eta": 0.001})


# ---------------------------------------------------------------- mixed precision (spec §4, §5)
def _mixed_op(loss_scaling, params=None, dtype=torch.float16):
    w = torch.tensor([0.5, -0.25], dtype=dtype, requires_grad=True)
    xs = {}
    op = trainop.optimize_loss(lambda x: (w * x).sum(), "Adam", {}, 1e-3, var_list=[w],
                               dtype="mixed", loss_scaling=loss_scaling,
                               loss_scaling_params=params)
    return w, op, xs


def _snapshot(w, op):
    master = op.optimizer.master(w)
    return (w.detach().clone(), master.clone(), op.optimizer.get_slot(w, "m").clone(),
            op.optimizer.get_slot(w, "v").clone(), op.global_step.clone())


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_backoff_trajectory_with_injected_overflows():
    w, op, _ = _mixed_op("Backoff", {"scale_max": 1024.0, "step_window": 2})
    clean = torch.tensor([1.0, 2.0], dtype=torch.float16)
    inf = torch.tensor([1.0, float("inf")], dtype=torch.float16)
    nan = torch.tensor([float("nan"), 1.0], dtype=torch.float16)
    # Backoff (read before increment): overflow -> /2; else x2 when (i - last) % W == 0
    feeds = [clean, inf, clean, clean, nan, inf, clean, clean, clean]
    expected_scales = [1024, 512, 512, 1024, 512, 256, 256, 512, 512]
    scales, steps = [], []
    for x in feeds:
        before = _snapshot(w, op) if op.micro_step > 0 else None
        op(x)
        overflow = not torch.isfinite(x).all()
        if overflow:
            assert _same(before, _snapshot(w, op))  # nothing moved, global_step included
            assert not bool(op.last_result.applied)
        scales.append(float(op.optimizer.loss_scale))
        steps.append(int(op.global_step))
    assert scales == expected_scales
    assert steps == [1, 1, 2, 3, 3, 3, 4, 5, 6]


def _logmax_upstream(amaxes):
    """The spec's LogMax rule (§5.3, upstream quirks: x = 2**16 on overflow, literal 16), in
    float32 as TF computes it (sigma subtracts nearly equal numbers: float64 differs by 1e-5),
    from the amax each call sees."""
    f = np.float32
    b1, b2 = f(0.99), f(0.999)
    xh = sh = qh = f(0.0)
    c1 = c2 = f(1.0)
    scales = []
    for amax in amaxes:
        x = f(2.0 ** 16) if not math.isfinite(amax) else np.log2(f(amax))
        xh = b1 * xh + f(1 - 0.99) * x
        c1 = c1 * b1
        mu = xh / (f(1) - c1)
        sh = b2 * sh + f(1 - 0.999) * x
        qh = b2 * qh + f(1 - 0.999) * x * x
        c2 = c2 * b2
        slow = sh / (f(1) - c2)
        sigma = np.sqrt(np.maximum(qh / (f(1) - c2) - slow * slow, f(0)))
        cutoff = mu + f(3.09) * sigma
        scales.append(float(np.clip(np.exp2(f(16) - cutoff), f(1.0), f(2.0 ** 14))))
    return scales


def test_logmax_trajectory_through_fp16_gradients():
    """LogMax's amax is max |g| of the unscaled gradients, which in mixed mode were computed in
    float16 from loss * S: with S = 15853.2 the gradient 4*S rounds to 63424 (float16 spacing
    32), so the third amax is 63424 / S, not 4 (upstream's mixed mode rounds the same way).
    Fed exact amaxes 1, 2, 4 the spec's reference is 16384, 15853.195, 5674.749."""
    ref = _logmax_upstream([1.0, 2.0, 4.0])
    np.testing.assert_allclose(ref, [16384.0, 15853.195, 5674.749], rtol=1e-6)
    w, op, _ = _mixed_op("LogMax", {"upstream_quirks": True})
    scales, amaxes, scale = [], [], 1.0
    for amax in (1.0, 2.0, 4.0):
        x = torch.tensor([amax, amax / 2], dtype=torch.float16)
        seen = float((x.float() * torch.tensor(scale, dtype=torch.float32)).half().float()
                     .max() * torch.reciprocal(torch.tensor(scale, dtype=torch.float32)))
        amaxes.append(seen)
        op(x)
        scale = float(op.optimizer.loss_scale)
        scales.append(scale)
    assert amaxes[:2] == [1.0, 2.0] and amaxes[2] == pytest.approx(63424 / 15853.2, rel=1e-5)
    np.testing.assert_allclose(scales, _logmax_upstream(amaxes), rtol=2e-6)
    before = _snapshot(w, op)
    op(torch.tensor([float("inf"), 1.0], dtype=torch.float16))
    assert float(op.optimizer.loss_scale) == 1.0  # upstream: one inf step pins scale_min
    assert _same(before, _snapshot(w, op))


def test_regularization_mixed_spec_8_2():
    """fp16 kernel 1e-4, residual 0, l2(1e-4): the regularization gradient 1e-8 survives in
    float32 through the master (in fp16 it underflows to 0)."""
    x = torch.ones(3, 2, dtype=torch.float16) / 2
    y = torch.full((3, 1), 1e-4, dtype=torch.float16)
    dense = nn.Linear(2, 1, bias=False).half()
    with torch.no_grad():
        dense.weight.fill_(1e-4)
    trainop.apply_regularization(dense, trainop.l2_regularizer(1e-4))
    assert float(trainop.get_regularization_loss(dense, mixed=True)) == 0.0
    lr = 1e3

    def loss():
        return ((y.float() - dense(x).float()) ** 2).mean() \
            + trainop.get_regularization_loss(dense, mixed=True)

    op = trainop.optimize_loss(loss, "SGD", {}, lr, model=dense, dtype="mixed")
    master0 = op.optimizer.master(dense.weight).clone()
    op()
    grad = (master0 - op.optimizer.master(dense.weight)) / lr
    np.testing.assert_allclose(grad.double().numpy(), 1e-8, atol=1e-11)


def test_regularization_float32_through_the_loss():
    dense = nn.Linear(2, 1, bias=False)
    trainop.apply_regularization(dense, trainop.l2_regularizer(0.5))
    w0 = dense.weight.detach().clone()
    op = trainop.optimize_loss(lambda: trainop.get_regularization_loss(dense), "SGD", {}, 0.1,
                               model=dense)
    op()
    torch.testing.assert_close(dense.weight.detach(), w0 - 0.1 * 0.5 * w0)


# ---------------------------------------------------------------- AdamW by name (spec §7.2, Q8)
def test_adamw_by_name_multiplies_weight_decay_by_lr_without_mutating():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    ref = nn.Linear(3, 2)
    ref.load_state_dict(model.state_dict())
    x = torch.randn(4, 3)
    params = {"weight_decay": 0.01, "beta2": 0.98}
    lr_fn = trainop.schedules.policy("exp_decay", learning_rate=0.1, decay_steps=1,
                                     decay_rate=0.5, use_staircase_decay=False)
    op = trainop.optimize_loss(lambda: model(x).pow(2).mean(), "AdamW", params, lr_fn,
                               model=model)
    gs = torch.zeros((), dtype=torch.int64)
    hand = trainop.AdamWOptimizer(lambda: 0.01 * lr_fn(gs), learning_rate=lambda: lr_fn(gs),
                                  beta2=0.98, params=ref.parameters())
    for _ in range(3):
        op()
        hand.zero_grad()
        ref(x).pow(2).mean().backward()
        hand.step()
        gs += 1
    assert params == {"weight_decay": 0.01, "beta2": 0.98}
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- a real model, every name
OPENSEQ2SEQ_OPTIMIZERS = [
    ("Adam", {}), ("SGD", {}), ("Momentum", {"momentum": 0.9}), ("RMSProp", {}),
    ("Adagrad", {}), ("Ftrl", {}), ("AdamW", {"weight_decay": 1e-3}),
    (trainop.NovoGrad, {"beta2": 0.98}), (trainop.LazyAdamOptimizer, {}),
]


def _transformer(dtype):
    torch.manual_seed(3)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return model.to(dtype)


@pytest.mark.parametrize("mode", ["float32", "mixed", "mixed-float16"])
@pytest.mark.parametrize("name,params", OPENSEQ2SEQ_OPTIMIZERS,
                         ids=[n if isinstance(n, str) else n.__name__
                              for n, _ in OPENSEQ2SEQ_OPTIMIZERS])
def test_transformer_equals_the_pieces_driven_by_hand(name, params, mode):
    half = mode != "float32"  # "mixed": bfloat16 parameters; "mixed-float16": OpenSeq2Seq's
    dtype = {"float32": torch.float32, "mixed": torch.bfloat16,
             "mixed-float16": torch.float16}[mode]
    model, ref = _transformer(dtype), _transformer(dtype)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, 16, generator=g).to(dtype)
    y = torch.randn(4, 5, 16, generator=g)
    lr_fn = trainop.schedules.policy("poly_decay", learning_rate=0.01, decay_steps=10,
                                     power=2.0)

    def loss_of(m):
        return lambda: (m(x).float() - y).pow(2).mean()

    op = trainop.optimize_loss(loss_of(model), name, dict(params), lr_fn, model=model,
                               dtype="mixed" if half else torch.float32, clip_gradients=1.0,
                               loss_scaling="Backoff" if half else 1.0)
    cls = trainop.get_optimizer_class(name) if isinstance(name, str) else name
    gs = torch.zeros((), dtype=torch.int64)
    hand_params = dict(params)
    if name == "AdamW":
        hand_params["weight_decay"] = lambda: params["weight_decay"] * lr_fn(gs)
    opt = cls(learning_rate=lambda: lr_fn(gs), params=list(ref.parameters()), **hand_params)
    front = MixedPrecisionOptimizerWrapper(opt, AutomaticLossScaler("Backoff")) if half else opt
    pipe = GradientPipeline(front, [ClipByGlobalNorm(1.0)])
    for _ in range(3):
        op()
        pipe.scale_loss(loss_of(ref)()).backward()
        result = pipe.step()
        gs += result.applied.to(torch.int64)
        pipe.zero_grad()
    assert int(op.global_step) == int(gs) == 3
    for (n, a), b in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b), n
    losses = [float(op()) for _ in range(3)]
    assert losses[-1] < losses[0] or name == "Ftrl"


def test_bench_train_step_runs_and_reports_three_comparisons():
    from trainop.bench.train_step import render_train_step, run_train_step_benchmark

    result = run_train_step_benchmark(rounds=2, steps=1, warmup=1, d_model=16, layers=1)
    assert set(result["results"]) == {"post_backward", "whole_step", "fixed_overhead"}
    assert all(r["torch_s"] > 0 and r["trainop_s"] > 0 for r in result["results"].values())
    assert "| post backward |" in render_train_step(result)


# ---------------------------------------------------------------- remaining behaviour bullets
def test_none_gradient_with_clipping_and_summaries(tmp_path):
    used, unused = torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)
    op = trainop.optimize_loss(lambda: used.sum(), "Adam", {}, 0.1, var_list=[used, unused],
                               clip_gradients=1.0, summary_writer=str(tmp_path),
                               summaries=["gradients", "gradient_norm", "global_gradient_norm"],
                               summary_frequency=1)
    op()
    assert torch.equal(unused.detach(), torch.ones(3))  # Q7: upstream crashes on a None grad
    assert float(op.last_result.global_norm) == pytest.approx(math.sqrt(2), rel=1e-6)


def test_pure_bfloat16_with_an_integer_loss_scale():
    w = torch.tensor([1.0, -2.0], dtype=torch.bfloat16, requires_grad=True)
    op = trainop.optimize_loss(lambda: (w.float() ** 2).sum(), "SGD", {}, 0.25, var_list=[w],
                               dtype=torch.bfloat16, loss_scaling=128,  # Q9: an int works
                               apply_loss_scaling=True)
    op()
    assert float(op.last_result.loss_scale) == 128.0
    # g = 2w, scaled by 128 and unscaled exactly (a power of two): w - 0.25 * 2w = w / 2
    assert _f(w) == [0.5, -1.0]


def test_novograd_parity_mode_reaches_through():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    op = trainop.optimize_loss(lambda: (w * torch.tensor([3.0, 4.0])).sum(), trainop.NovoGrad,
                               {"second_moment": "openseq2seq", "beta1": 0.0}, 0.1,
                               var_list=[w])
    op()
    assert op.optimizer.param_groups[0]["second_moment"] == "openseq2seq"
    # shipped NovoGrad: v = ||g||^2 = 25, step g / sqrt(v + eps); beta1 = 0: m = that
    np.testing.assert_allclose(_f(w), [1.0 - 0.1 * 3 / 5, 2.0 - 0.1 * 4 / 5], rtol=1e-5)


def test_sparse_gradients_accumulate_densely():
    emb = nn.Embedding(5, 2, sparse=True)
    w0 = emb.weight.detach().clone()
    op = trainop.optimize_loss(lambda idx: emb(idx).sum(), "SGD", {}, 1.0, model=emb,
                               iter_size=2, accumulate_first=True)
    op(torch.tensor([0, 1]))
    op(torch.tensor([1, 1, 4]))
    expected = w0.clone()
    counts = torch.tensor([1.0, 3.0, 0.0, 0.0, 1.0])  # row 1 twice in one batch, once before
    expected -= (counts / 2)[:, None]
    torch.testing.assert_close(emb.weight.detach(), expected)


def test_loss_scaling_outside_mixed_mode_follows_upstream():
    """OpenSeq2Seq scales the loss in its mixed-precision wrapper only: with float32 (or pure
    float16) parameters an automatic scaler exists for its summary, and nothing is scaled, so
    an overflow is applied as upstream applies it (no skipped step)."""
    w = torch.ones(2, requires_grad=True)
    op = trainop.optimize_loss(lambda x: (w * x).sum(), "SGD", {}, 0.5, var_list=[w],
                               loss_scaling="Backoff")
    op(torch.tensor([1.0, 1.0]))
    assert op.last_result.loss_scale is None and _f(w) == [0.5, 0.5]
    op(torch.tensor([float("inf"), 1.0]))
    assert bool(op.last_result.applied) and math.isinf(w[0].item())
