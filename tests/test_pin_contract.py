"""Pins of checkpoint validation (issue #34): the edges come from the definitions (float32's
largest finite value is numpy's ``finfo(float32).max``; the step limit 2**62; TF keeps the
step int64 and the beta powers float32), never from trainop's output."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import trainop

F32_MAX = float(np.finfo(np.float32).max)


def _adam_after_one_step():
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    opt = trainop.AdamOptimizer([p], learning_rate=0.1)
    p.grad = torch.full((3,), 0.5, dtype=torch.float16)
    opt.step()
    return p, opt


def _with(opt, *, non_slot=None, slots=None):
    sd = opt.state_dict()
    sd["param_groups"][0]["non_slot"].update(non_slot or {})
    sd["state"][0].update(slots or {})
    return sd


def test_step_counter_is_int64_after_load_and_the_limit_is_inclusive():
    p, opt = _adam_after_one_step()
    opt.load_state_dict(_with(opt, non_slot={"step": torch.tensor(5, dtype=torch.int32)}))
    step = opt.param_groups[0]["non_slot"]["step"]
    assert step.dtype == torch.int64 and int(step) == 5
    opt.load_state_dict(_with(opt, non_slot={"step": torch.tensor(2**62)}))
    assert int(opt.param_groups[0]["non_slot"]["step"]) == 2**62
    with pytest.raises(ValueError, match="2\\*\\*62"):
        opt.load_state_dict(_with(opt, non_slot={"step": torch.tensor(2**62 + 1)}))


def test_beta_power_must_be_float32():
    p, opt = _adam_after_one_step()
    with pytest.raises(TypeError, match="float32"):
        opt.load_state_dict(_with(opt, non_slot={
            "beta1_power": torch.tensor(0.81, dtype=torch.float64)}))


def test_zero_second_moment_is_loadable_and_a_negative_one_is_not():
    p, opt = _adam_after_one_step()
    opt.load_state_dict(_with(opt, slots={"v": torch.zeros(3, dtype=torch.float16)}))
    with pytest.raises(ValueError, match=">= 0"):
        opt.load_state_dict(_with(opt, slots={"v": torch.full((3,), -1.0,
                                                              dtype=torch.float16)}))


def test_a_slot_that_overflows_the_parameters_dtype_is_refused():
    p, opt = _adam_after_one_step()
    big = torch.full((3,), 1e6, dtype=torch.float64)  # finite in float64, inf in float16
    with pytest.raises(ValueError, match="finite"):
        opt.load_state_dict(_with(opt, slots={"m": big}))


def test_float32_largest_finite_value_is_accepted_and_inf_is_not():
    p = torch.nn.Parameter(torch.ones(2))
    trainop.GradientDescentOptimizer([p], learning_rate=F32_MAX)
    with pytest.raises(ValueError):
        trainop.GradientDescentOptimizer([p], learning_rate=math.nextafter(F32_MAX, math.inf))
    with pytest.raises(ValueError):
        trainop.GradientDescentOptimizer([p], learning_rate=math.inf)
    from trainop.contract.ranges import POSITIVE
    assert 0.0 not in POSITIVE and math.inf not in POSITIVE and 5e-324 in POSITIVE


def test_a_closed_infinite_bound_is_open_and_refuses_inf():
    # a real interval never contains +-inf: [0, inf] means [0, inf) (the only range check that
    # refuses inf is the interval's own: check_real's float32 check looks at finite values)
    from trainop.contract.validation import Interval, outside
    closed = Interval(0.0, math.inf)
    assert str(closed) == "[0, inf)" and math.inf not in closed and F32_MAX in closed
    assert bool(outside(torch.tensor(math.inf), closed))
    assert str(Interval(-math.inf, 0.0)) == "(-inf, 0]" and -math.inf not in Interval(-math.inf)
    # a public path built on such an interval: a regularizer's scale
    with pytest.raises(ValueError, match="scale"):
        trainop.l2_regularizer(math.inf)
    trainop.l2_regularizer(F32_MAX)
