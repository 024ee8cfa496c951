"""Pins of torch's ``betas`` key beside TF's ``beta1``/``beta2`` (issue #40, round-5 audit):
either spelling written alone, equal values spelled by other objects, and a checkpoint whose
``betas`` disagree in either place. The numbers are TF1 Adam's update (``ResourceApplyAdam``:
``lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t)``, ``w -= lr_t m / (sqrt(v) + epsilon)``) in
double; trainop's float32 update is within float32 rounding of it (TF's own: float32 variables
and beta powers)."""

from __future__ import annotations

import math

import pytest
import torch
from admitted import admitted

import trainop


def _tf_adam(grads, lr, beta1, beta2, epsilon):
    """TF1 Adam's variable after ``grads`` (one float per step) from w = 1, in double."""
    w, m, v = 1.0, 0.0, 0.0
    for t, g in enumerate(grads, start=1):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        w -= lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t) * m / (math.sqrt(v) + epsilon)
    return w


def _adam(**kwargs):
    w = torch.nn.Parameter(torch.ones(1, dtype=torch.float32))
    return w, trainop.AdamOptimizer([w], lr=0.1, epsilon=1.0, **kwargs)


def test_beta2_written_alone_reaches_betas_the_update_and_the_checkpoint():
    w, opt = _adam()
    group = opt.param_groups[0]
    group["beta2"] = 0.5  # beta1 keeps its object: only the second element changed
    for g in (1.0, -3.0):
        w.grad = torch.full((1,), g, dtype=torch.float32)
        opt.step()
    assert group["betas"] == (0.9, 0.5)
    assert opt.state_dict()["param_groups"][0]["betas"] == (0.9, 0.5)
    assert float(w) == pytest.approx(_tf_adam([1.0, -3.0], 0.1, 0.9, 0.5, 1.0), rel=2e-6)
    assert float(w) != pytest.approx(_tf_adam([1.0, -3.0], 0.1, 0.9, 0.999, 1.0), rel=1e-6)


def test_beta2_written_alone_is_saved_reconciled_before_any_step():
    _, opt = _adam()
    opt.param_groups[0]["beta2"] = 0.5
    saved = opt.state_dict()["param_groups"][0]
    assert (saved["beta1"], saved["beta2"], saved["betas"]) == (0.9, 0.5, (0.9, 0.5))


def test_a_replaced_betas_pair_sets_both_betas_of_the_update():
    w, opt = _adam()
    group = opt.param_groups[0]
    group["betas"] = (0.8, 0.5)
    for g in (1.0, -3.0):
        w.grad = torch.full((1,), g, dtype=torch.float32)
        opt.step()
    assert (group["beta1"], group["beta2"]) == (0.8, 0.5)
    assert float(w) == pytest.approx(_tf_adam([1.0, -3.0], 0.1, 0.8, 0.5, 1.0), rel=2e-6)


def test_a_group_spelling_a_beta_twice_with_equal_values_is_one_value():
    _, opt = _adam()
    u = torch.nn.Parameter(torch.ones(1, dtype=torch.float32))
    beta1 = float("0.8")  # equal to the literal below, another object
    admitted(opt.add_param_group, {"params": [u], "beta1": beta1, "betas": (0.4 * 2, 0.99)})
    assert opt.param_groups[1]["beta1"] == 0.8 and opt.param_groups[1]["beta2"] == 0.99
    v = torch.nn.Parameter(torch.ones(1, dtype=torch.float32))
    with pytest.raises(ValueError, match=r"`beta1`"):
        opt.add_param_group({"params": [v], "beta1": 0.5, "betas": (0.9, 0.99)})
    assert len(opt.param_groups) == 2


def _saved_with_betas(betas):
    _, opt = _adam(beta1=0.8, beta2=0.9)
    sd = opt.state_dict()
    sd["param_groups"][0]["betas"] = betas
    return sd


def _load(sd):
    _, other = _adam()
    try:
        other.load_state_dict(sd)
    except ValueError as error:
        return "refused", str(error)
    return "loaded", other.param_groups[0]["betas"]


def test_a_checkpoint_whose_betas_disagree_is_treated_alike_in_either_place():
    first = _load(_saved_with_betas((0.5, 0.9)))    # beta1 disagrees
    second = _load(_saved_with_betas((0.8, 0.5)))   # beta2 disagrees
    assert first[0] == second[0] == "loaded"
    # docs/dropin.md: a checkpoint whose betas differ from beta1/beta2 (saved by code that does
    # not reconcile, after a scheduler wrote betas) takes betas, as its next update would have
    assert (first[1], second[1]) == ((0.5, 0.9), (0.8, 0.5))


def test_a_checkpoint_without_betas_rewrites_them_at_the_load():
    sd = _saved_with_betas(None)
    del sd["param_groups"][0]["betas"]
    _, other = _adam()
    admitted(other.load_state_dict, sd)
    group = other.param_groups[0]
    assert (group["beta1"], group["beta2"], group.get("betas")) == (0.8, 0.9, (0.8, 0.9))


@pytest.mark.parametrize("betas", [(1.5, 0.9), (0.9, 1.0), (-0.1, 0.9)])
def test_a_group_giving_betas_out_of_range_is_refused_and_changes_nothing(betas):
    _, opt = _adam()
    u = torch.nn.Parameter(torch.ones(1))
    with pytest.raises(ValueError, match=r"^Expected `beta[12]` in \[0, 1\)"):
        opt.add_param_group({"params": [u], "betas": betas})
    assert len(opt.param_groups) == 1
