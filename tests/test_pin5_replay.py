"""Pins of ``--compare-tf``'s loss-scaler replay (issue #40, round-5 audit): OpenSeq2Seq's
LogMaxScaler as its code behaves (quirk Q3), step by step, against the reference values the
spec records from OpenSeq2Seq's code run under TensorFlow 2.21 compat.v1 (spec openseq2seq.md
§5.3): amax 1, 2, 4 give the scales 16384, 15853.195, 5674.749; an Inf at the fourth call
samples 2**log_max (65536) and drives the scale to scale_min = 1."""

from __future__ import annotations

import math

import pytest

tf = pytest.importorskip("tensorflow")

from trainop.interfaces.train import compare_tf  # noqa: E402

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
