"""A param group may give a hyperparameter under its constructor argument's name where the
group key differs (``learning_rate`` for ``lr``, ``l1_regularization_strength`` for ``l1``):
torch reads a group key named like the constructor argument, so such a group must not run on
the constructor's value. Values are TF's update rules worked out by hand, with TF's float32
hyperparameters (a Python float becomes a float32 tensor, then is cast to the variable's
dtype)."""

import pytest
import torch

import trainop


def _f32(x):
    return torch.tensor(x, dtype=torch.float32).item()


def _one_step(opt, var, grad):
    var.grad = torch.tensor(grad, dtype=torch.float64)
    opt.step()
    return var.detach().tolist()


def test_learning_rate_as_a_group_key_is_the_groups_lr():
    a = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    b = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    opt = trainop.GradientDescentOptimizer([{"params": [a], "learning_rate": 0.2},
                                            {"params": [b]}], lr=0.1)
    a.grad = torch.tensor([0.5], dtype=torch.float64)
    b.grad = torch.tensor([0.5], dtype=torch.float64)
    opt.step()
    assert a.item() == pytest.approx(1.0 - _f32(0.2) * 0.5, abs=1e-15)  # 0.9, not 0.95
    assert b.item() == pytest.approx(1.0 - _f32(0.1) * 0.5, abs=1e-15)


def test_every_group_giving_learning_rate_stands_for_the_constructors():
    a = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    opt = trainop.GradientDescentOptimizer([{"params": [a], "learning_rate": 0.2}])
    assert _one_step(opt, a, [0.5]) == pytest.approx([1.0 - _f32(0.2) * 0.5], abs=1e-15)


def test_l1_under_its_argument_name_shrinks_proximal_gd():
    # prox = var - lr * g = [0.95, -2.05]; var = sign(prox) * max(|prox| - lr * l1, 0)
    # with lr * l1 = 0.1 * 0.5 = 0.05: [0.90, -2.00] (the constructor's l1 = 0 gives prox)
    var = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = trainop.ProximalGradientDescentOptimizer(
        [{"params": [var], "l1_regularization_strength": 0.5}], lr=0.1)
    lr, l1 = _f32(0.1), _f32(0.5)
    prox = [1.0 - lr * 0.5, -2.0 - lr * 0.5]
    want = [prox[0] - lr * l1, prox[1] + lr * l1]  # 0.90, -2.00 up to float32 rounding
    assert want == pytest.approx([0.90, -2.00], abs=1e-7)
    assert _one_step(opt, var, [0.5, 0.5]) == pytest.approx(want, abs=1e-15)


def test_ftrl_group_keys_from_argument_names():
    a = torch.nn.Parameter(torch.zeros(2))
    b = torch.nn.Parameter(torch.zeros(2))
    opt = trainop.FtrlOptimizer([{"params": [a]},
                                 {"params": [b], "learning_rate_power": -0.25,
                                  "l2_shrinkage_regularization_strength": 0.1}], lr=0.5)
    assert (opt.param_groups[1]["lr_power"], opt.param_groups[1]["l2_shrinkage"]) == (-0.25, 0.1)
    assert "learning_rate_power" not in opt.param_groups[1]
    assert (opt.param_groups[0]["lr_power"], opt.param_groups[0]["l2_shrinkage"]) == (-0.5, 0.0)


def test_both_names_in_one_group_is_a_type_error_and_adds_nothing():
    a = torch.nn.Parameter(torch.zeros(2))
    b = torch.nn.Parameter(torch.zeros(2))
    opt = trainop.ProximalAdagradOptimizer([a], lr=0.1)
    with pytest.raises(TypeError, match=r"both `l1` and `l1_regularization_strength` in a "
                                        r"param group"):
        opt.add_param_group({"params": [b], "l1": 0.1, "l1_regularization_strength": 0.2})
    assert len(opt.param_groups) == 1
