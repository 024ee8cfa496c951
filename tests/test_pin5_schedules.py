"""Pins of the schedules' host arithmetic where IEEE-754 and Python part ways (issue #40, branch
coverage of ``schedules/_base.py``): a Python int step is evaluated in double precision, where
``math.pow`` raises ``OverflowError`` and ``math.log`` raises ``ValueError`` (or for 0) and
``/`` raises ``ZeroDivisionError``; TF's kernels give inf, NaN and -inf there, and so must the
schedule, on the host path as on the tensor path. Values: TF1's ``cosine_decay_restarts``
formula (``learning_rate_decay.py``: ``i = floor(log(1 - f (1 - t_mul)) / log(t_mul))``, ``f'
= (f - (1 - t_mul**i) / (1 - t_mul)) / t_mul**i``, ``0.5 m_mul**i (1 + cos(pi f'))``) worked by
hand, and IEEE-754's overflow."""

from __future__ import annotations

import math

import torch

from trainop.schedules import tf1


def _both(policy, step):
    """The host value (int step) and the tensor value (int64 step) of ``policy`` at ``step``."""
    return float(policy(step)), float(policy(torch.tensor(step)))


def test_a_rate_past_the_float_range_is_inf_not_an_overflow_error():
    # 10 ** 1000: beyond float64 (math.pow raises OverflowError) and float32; TF: inf
    grows = tf1.ExponentialDecay(1.0, decay_steps=1, decay_rate=10.0)
    assert _both(grows, 1000) == (math.inf, math.inf)


def test_cosine_restarts_with_shrinking_cycles_end_in_nan_as_tf_computes_them():
    # t_mul = 0.5: cycles of 10, 5, 2.5, ... steps sum to 20 = D / (1 - t_mul)
    policy = tf1.CosineDecayRestarts(1.0, first_decay_steps=10, t_mul=0.5, m_mul=1.0)
    # f = 1.5: i = log(0.25) / log(0.5) = 2, f' = (1.5 - 1.5) / 0.25 = 0: a restart, 1.0
    assert _both(policy, 15) == (1.0, 1.0)
    # f = 1.9: i = floor(log(0.05) / log(0.5)) = 4, f' = (1.9 - 1.875) / 0.0625 = 0.4
    host, device = _both(policy, 19)
    assert math.isclose(host, 0.5 * (1 + math.cos(0.4 * math.pi)), rel_tol=1e-12)
    assert math.isclose(device, host, rel_tol=1e-6)
    # f = 2: log(0) = -inf, i = inf, t_mul**i = 0, f' = 0 / 0 = NaN
    # f = 3: log(-0.5) = NaN (math.log raises ValueError here)
    for step in (20, 30):
        host, device = _both(policy, step)
        assert math.isnan(host) and math.isnan(device), step
