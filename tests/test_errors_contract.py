"""The errors of #25's construction and learning-rate contract, pinned (type and message) in
one table: a positional argument after the parameters where TF's signature does not start
with the learning rate, a param group without a value that only the groups gave, tensor
rates that are not one floating-point element, a non-bool ``decay_scaled_by_lr``."""

from __future__ import annotations

import pytest
import torch
from error_table import Row, check, ids

import trainop


def _params():
    return [torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))]


def _momentum_by_groups():
    a, b = _params()
    return trainop.MomentumOptimizer([{"params": [a], "momentum": 0.9},
                                      {"params": [b], "momentum": 0.5}], lr=0.1)


def _lr_by_groups():
    a, b = _params()
    return trainop.GradientDescentOptimizer([{"params": [a], "lr": 0.1},
                                             {"params": [b], "lr": 0.2}])


def _step_with_lr(lr):
    p = torch.nn.Parameter(torch.ones(2))
    opt = trainop.GradientDescentOptimizer([p], lr=lr)
    p.grad = torch.ones(2)
    opt.step()


ERRORS: list[Row] = [
    # ------------------------------------------------ positional arguments after the params
    Row("adamw-positional-after-params", lambda: trainop.AdamWOptimizer(_params(), 1e-3),
        TypeError, r"^AdamWOptimizer got 1 positional argument\(s\) after the parameters: "
        r"torch reads the first as `lr`, AdamWOptimizer's TF signature as `weight_decay`; pass "
        r"them by keyword \(`lr=`, `weight_decay=`\)$"),
    Row("momentumw-positional-after-params",
        lambda: trainop.MomentumWOptimizer(_params(), 0.1, 0.9), TypeError,
        r"^MomentumWOptimizer got 2 positional argument\(s\) after the parameters: torch reads "
        r"the first as `lr`, MomentumWOptimizer's TF signature as `weight_decay`"),
    # ------------------------------------------------ values only the groups gave
    Row("group-without-momentum",
        lambda: _momentum_by_groups().add_param_group({"params": [torch.ones(1)]}), ValueError,
        r"^Expected the param group to give `momentum`: MomentumOptimizer was built without "
        r"`momentum` \(every param group gave it\), so it has no default$"),
    Row("group-without-lr",
        lambda: _lr_by_groups().add_param_group({"params": [torch.ones(1)]}), ValueError,
        r"^Expected the param group to give `lr`: GradientDescentOptimizer was built without "
        r"`learning_rate` \(every param group gave it\), so it has no default$"),
    Row("tf-style-variable-without-momentum",
        lambda: _momentum_by_groups().apply_gradients(
            [(torch.ones(2), torch.nn.Parameter(torch.ones(2)))]), ValueError,
        r"^Expected the param group of variables new to the optimizer to give `momentum`: "
        r"MomentumOptimizer was built without `momentum`"),
    # ------------------------------------------------ tensor learning rates
    Row("lr-two-elements", lambda: trainop.AdamOptimizer(_params(), lr=torch.tensor([0.1, 0.2])),
        ValueError, r"^Tensor lr must be 1-element: expected `learning_rate` to be a 1-element "
        r"tensor \(a 0-dim one, or of "
        r"shape \(1,\) or \(1, 1\)\), got a tensor of shape \(2,\)$"),
    Row("lr-empty", lambda: trainop.AdamOptimizer(_params(), lr=torch.ones(0)), ValueError,
        r"^Tensor lr must be 1-element: expected `learning_rate` to be a 1-element tensor "
        r".*got a tensor of shape \(0,\)$"),
    Row("lr-integer-tensor", lambda: trainop.AdamOptimizer(_params(), lr=torch.tensor([1])),
        TypeError, r"^Expected `learning_rate` to be a floating-point tensor, got a tensor of "
        r"shape \(1,\) and dtype torch\.int64$"),
    Row("momentum-2x1-tensor",
        lambda: trainop.MomentumOptimizer(_params(), lr=0.1, momentum=torch.ones(2, 1)),
        ValueError, r"^Tensor momentum must be 1-element: expected `momentum` to be a 1-element "
                    r"tensor .*shape \(2, 1\)$"),
    Row("callable-lr-two-elements", lambda: _step_with_lr(lambda: torch.tensor([0.1, 0.2])),
        ValueError, r"^Tensor lr must be 1-element: expected `learning_rate` to be a 1-element "
                    r"tensor .*shape \(2,\)$"),
    Row("callable-lr-not-a-number", lambda: _step_with_lr(lambda: "x"), TypeError,
        r"^Expected `learning_rate` to evaluate to a real number or a 1-element floating-point "
        r"tensor, got 'x' \(str\)$"),
    # ------------------------------------------------ the decoupled decay's meaning
    Row("decay-scaled-by-lr-not-bool",
        lambda: trainop.AdamWOptimizer(0.01, decay_scaled_by_lr="yes"), TypeError,
        r"^Expected `decay_scaled_by_lr` to be a bool, got 'yes' \(str\)$"),
]


@pytest.mark.parametrize("row", ERRORS, ids=ids(ERRORS))
def test_error(row: Row):
    check(row)


def test_a_rejected_group_or_variable_changes_nothing():
    opt = _momentum_by_groups()
    p = opt.param_groups[0]["params"][0]
    p.grad = torch.ones(2)
    opt.step()
    before = {k: v.clone() for k, v in opt.state[p].items()}
    extra = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ValueError):
        opt.add_param_group({"params": [extra]})
    with pytest.raises(ValueError):
        opt.apply_gradients([(torch.ones(2), extra)])
    assert len(opt.param_groups) == 2 and extra not in opt.state
    assert torch.equal(extra.detach(), torch.ones(2))
    assert all(torch.equal(opt.state[p][k], v) for k, v in before.items())
