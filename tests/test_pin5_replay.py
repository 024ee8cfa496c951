"""Pins of ``--compare-tf``'s loss-scaler replay (issue #40, round-5 audit): OpenSeq2Seq's
LogMaxScaler as its code behaves (quirk Q3), step by step, against the reference values the
spec records from OpenSeq2Seq's code run under TensorFlow 2.21 compat.v1 (spec openseq2seq.md
§5.3): amax 1, 2, 4 give the scales 16384, 15853.195, 5674.749; an Inf at the fourth call
samples 2**log_max (65536) and drives the scale to scale_min = 1. And the replay's other
stages on hand-made gradients, against their upstream definitions: RETURNN's TF updater's
per-gradient steps (``tf.clip_by_value``, ``clip_by_norm``, ``clip_by_average_norm``,
``clip_by_global_norm`` with RETURNN's raw norm G, the NaN/Inf filter, the zeroing above the
threshold), OpenSeq2Seq's LARC clip mode and NovoGrad's ``grad_averaging``, and which
micro-steps update (OpenSeq2Seq ``k % iter_size == 0``, RETURNN ``k % N == N - 1``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from trainop.interfaces.train import compare_tf  # noqa: E402
from trainop.interfaces.train.replay_plan import ReplayPlan  # noqa: E402

LOGMAX = {"scale_min": 1.0, "scale_max": 2.0 ** 14, "log_max": 16.0, "beta1": 0.99,
          "beta2": 0.999, "overflow_std_dev": 3.09}


def _scales(params: dict, amaxes: list[float]) -> tuple[list[float], dict]:
    """The replay's scale after each call, and its moments after the last."""
    graph = tf.Graph()
    with graph.as_default():
        scaler = compare_tf._Scaler(tf, ("logmax", params))
        amax = tf.compat.v1.placeholder(tf.float32, [])
        update = scaler.update(tf.math.is_inf(amax), amax)
        names = ("x_hat", "slow_x_hat", "xsquared_hat")
        moments = {v.name.split(":")[0]: v for v in tf.compat.v1.global_variables()
                   if v.name.split(":")[0] in names}
        init = tf.compat.v1.global_variables_initializer()
    out = []
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        for a in amaxes:
            session.run(update, {amax: a})
            out.append(float(session.run(scaler.scale)))
        return out, {n: float(session.run(v)) for n, v in moments.items()}


def test_logmax_replays_openseq2seqs_scaler():
    scales, _ = _scales(LOGMAX, [1.0, 2.0, 4.0])
    assert scales == pytest.approx([16384.0, 15853.195, 5674.749], rel=1e-6)


def test_logmax_replay_samples_two_to_the_log_max_on_an_overflow():
    scales, moments = _scales(LOGMAX, [1.0, 2.0, 4.0, math.inf])
    assert scales[-1] == 1.0
    assert moments == pytest.approx({"x_hat": 655.39, "slow_x_hat": 65.539,
                                     "xsquared_hat": 4294967.5}, rel=1e-4)


def test_logmax_replay_keeps_the_literal_16_in_its_exponent():
    # OpenSeq2Seq: scale = 2 ** (16 - cutoff) whatever log_max is; with amax = 1 (x = 0, sigma
    # = 0) the cutoff is 0: 2**16, clipped to a scale_max above it
    scales, _ = _scales({**LOGMAX, "log_max": 20.0, "scale_max": 2.0 ** 30}, [1.0])
    assert scales == [2.0 ** 16]


G1 = np.array([3.0, -4.0, 0.5], np.float32)   # ||G1|| = 5.0249
G2 = np.array([[1.0, 2.0], [-2.0, 0.0]], np.float32)  # ||G2|| = 3
RAW = float(np.sqrt((G1 ** 2).sum() + (G2 ** 2).sum()))


def _steps(steps, grads=(G1, G2), raw=RAW):
    plan = ReplayPlan("returnn", "GradientDescentOptimizer", {}, steps=steps)
    out = compare_tf._returnn_steps(tf, plan, [tf.constant(g) for g in grads],
                                    tf.constant(np.float32(raw)))
    return [np.asarray(g) for g in out]


def _close(got, expected):
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_returnn_clip_by_value_has_its_own_lower_bound():
    args = {"clip_value_min": -0.5, "clip_value_max": 2.0}
    _close(_steps([("clip_by_value", args)]), [np.clip(g, -0.5, 2.0) for g in (G1, G2)])


def test_returnn_clip_norm_is_per_tensor_and_avg_norm_per_element():
    # RETURNN: tf.clip_by_norm(g, c) per gradient; clip_by_average_norm: ||g|| / size vs c
    per = [g * min(1.0, 3.5 / np.linalg.norm(g)) for g in (G1, G2)]
    _close(_steps([("clip_by_norm", {"clip_norm": 3.5})]), per)
    avg = [g * min(1.0, 1.2 / (np.linalg.norm(g) / g.size)) for g in (G1, G2)]
    _close(_steps([("clip_by_average_norm", {"clip_norm": 1.2})]), avg)


def test_returnn_global_norm_clip_uses_the_raw_micro_steps_norm():
    raw = 10.0  # RETURNN's G: the raw gradients' norm, not the processed ones' (5.85)
    _close(_steps([("clip_by_global_norm", {"clip_norm": 2.0})], raw=raw),
           [g * 2.0 / raw for g in (G1, G2)])


def test_returnn_nan_inf_filter_and_clip_to_zero():
    bad = np.array([np.inf, -np.inf, np.nan, 1.5], np.float32)
    _close(_steps([("nan_inf_filter", {})], grads=(bad,)), [np.array([0, 0, 0, 1.5])])
    for raw in (np.inf, np.nan, 7.0):  # non-finite G, or G above the threshold: all zero
        _close(_steps([("clip_to_zero", {"threshold": 6.0})], raw=raw),
               [np.zeros_like(g) for g in (G1, G2)])
    _close(_steps([("clip_to_zero", {"threshold": 6.0})], raw=5.0), [G1, G2])


def test_larc_clip_mode_divides_by_the_learning_rate():
    # OpenSeq2Seq: t = min(max(eta ||w|| / (lr (||g|| + eps)), min_update), 1)
    w = np.array([0.3, 0.4], np.float32)  # ||w|| = 0.5
    g = np.array([6.0, 8.0], np.float32)  # ||g|| = 10
    larc = {"larc_mode": "clip", "larc_eta": 0.02, "epsilon": 1e-7, "min_update": 1e-7}
    lr = 0.01
    out = compare_tf._larc(tf, larc, [tf.constant(g)], [tf.constant(w)], tf.constant(lr))
    t = min(max(0.02 * 0.5 / (lr * (10 + 1e-7)), 1e-7), 1.0)
    np.testing.assert_allclose(np.asarray(out[0]), g * t, rtol=1e-6)


def test_novograd_grad_averaging_takes_one_minus_beta1():
    g = np.array([3.0, 4.0], np.float32)
    kwargs = {"epsilon": 1e-8, "weight_decay": 0.0, "grad_averaging": True, "beta1": 0.95,
              "beta2": 0.5}
    out = compare_tf._novograd(tf, kwargs, [tf.constant(g)], [tf.constant(np.zeros(2, np.float32))])
    np.testing.assert_allclose(np.asarray(out[0]), g / np.sqrt(25 + 1e-8) * (1 - 0.95), rtol=1e-6)


@pytest.mark.parametrize("front, updates", [("openseq2seq", [0, 3, 6]), ("returnn", [2, 5, 8])])
def test_update_micro_steps_of_each_front(front, updates):
    # OpenSeq2Seq: k % iter_size == 0 (quirk Q5); RETURNN: k % N == N - 1
    plan = ReplayPlan(front, "GradientDescentOptimizer", {}, accumulate=3)
    assert [k for k in range(9) if compare_tf._updates(plan, k)] == updates


def _replay(plan, batches, rates):
    from trainop.interfaces.train.model import LSTMCellModel

    return compare_tf.replay_in_tf(LSTMCellModel(hidden=2, seed=0), plan, batches, rates)


def _batch(bad: float | None = None):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 1, 4, generator=g)
    if bad is not None:
        x[0, 0, 0] = bad
    return x, torch.randn(2, 1, 2, generator=g)


def _finite(step) -> bool:
    return all(np.isfinite(w).all() for w in step.values())


BACKOFF = ("backoff", {"scale_min": 1.0, "scale_max": 2.0 ** 14, "step_factor": 2.0,
                       "step_window": 4})


@pytest.mark.parametrize("half, scaler, skipped", [
    ("float16", BACKOFF, True),                             # an automatic scaler skips it
    ("float16", ("static", {"loss_scale": 8.0}), False),    # OpenSeq2Seq's static scale: applied
    (None, None, False),                                    # float32: TF applies it
], ids=["backoff", "static", "float32"])
def test_a_nan_step_is_skipped_only_under_an_automatic_loss_scaler(half, scaler, skipped):
    plan = ReplayPlan("openseq2seq", "GradientDescentOptimizer", {}, half=half, scaler=scaler)
    steps = _replay(plan, [_batch(), _batch(np.nan)], [0.1, 0.1])
    assert _finite(steps[0])
    assert _finite(steps[1]) == skipped
    if skipped:
        for name, w in steps[1].items():
            np.testing.assert_array_equal(w, steps[0][name])


def test_returnn_sums_its_accumulated_micro_steps():
    # RETURNN's TF updater sums a window's gradients: one batch twice in a window of 2 is
    # that batch's gradient with twice the rate
    batch = _batch()
    window = _replay(ReplayPlan("returnn", "GradientDescentOptimizer", {}, accumulate=2),
                     [batch, batch], [0.1, 0.1])[-1]
    doubled = _replay(ReplayPlan("returnn", "GradientDescentOptimizer", {}), [batch], [0.2])[0]
    for name, w in doubled.items():
        np.testing.assert_allclose(window[name], w, rtol=1e-5, atol=1e-7)


def test_returnn_learning_rate_multiplier_scales_the_replayed_rate():
    # RETURNN's optimizer dict: the optimizer runs at learning_rate * learning_rate_multiplier
    import torch

    import trainop
    from trainop.interfaces.train.replay_plan import tf_plan

    w = torch.nn.Parameter(torch.ones(2))
    updater = trainop.Updater({"optimizer": {"class": "sgd", "learning_rate_multiplier": 3.0},
                               "learning_rate": 0.1}, [w])
    assert tf_plan(updater).lr_multiplier == pytest.approx(3.0, rel=1e-6)
