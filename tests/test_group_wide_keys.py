"""A param group naming an optimizer-wide constructor argument (one value for all groups in
trainop, a per-group option in torch: Adagrad's ``initial_accumulator_value``, the
implementation) must not be silently ignored: a value other than the constructor's is a
TypeError, the constructor's own value is accepted (ZeroRedundancyOptimizer copies its keyword
arguments into every group). AdagradDA's ``global_step`` in every group does not stand for the
constructor's argument."""

import pytest
import torch

import trainop


def test_adagrad_group_initial_accumulator_value_is_refused_not_ignored():
    a = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(TypeError, match=r"AdagradOptimizer got `initial_accumulator_value` in "
                                        r"a param group: it is an optimizer-wide argument "
                                        r"\(one value for all groups: 0\.1\)"):
        trainop.AdagradOptimizer([{"params": [a], "initial_accumulator_value": 0.5}], lr=0.1)


def test_the_constructors_own_value_in_a_group_is_accepted():
    # TF's Adagrad: accum = 0.5 + g^2 = 1.5; var -= lr * g / sqrt(accum)
    a = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = trainop.AdagradOptimizer([{"params": [a], "initial_accumulator_value": 0.5}],
                                   lr=0.1, initial_accumulator_value=0.5)
    a.grad = torch.ones(1, dtype=torch.float64)
    opt.step()
    lr = torch.tensor(0.1, dtype=torch.float32).item()
    assert a.item() == pytest.approx(-lr / 1.5 ** 0.5, abs=1e-12)


def test_adamw_group_decay_meaning_is_refused_and_nothing_added():
    a = torch.nn.Parameter(torch.zeros(2))
    b = torch.nn.Parameter(torch.zeros(2))
    opt = trainop.AdamWOptimizer([a], lr=0.1, weight_decay=0.1)  # torch's meaning
    with pytest.raises(TypeError, match=r"`decay_scaled_by_lr` in a param group"):
        opt.add_param_group({"params": [b], "decay_scaled_by_lr": False})
    assert len(opt.param_groups) == 1
    opt.add_param_group({"params": [b], "decay_scaled_by_lr": True})
    assert len(opt.param_groups) == 2


def test_implementation_per_group_is_refused():
    a = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(TypeError, match=r"`implementation` in a param group"):
        trainop.AdamOptimizer([{"params": [a], "implementation": "reference"}], lr=0.1)


def test_global_step_in_every_group_is_not_the_constructors():
    a = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: "
                                        r"'global_step'"):
        trainop.AdagradDAOptimizer([{"params": [a], "global_step": None}], lr=0.1)
    step = torch.zeros((), dtype=torch.int64)
    trainop.AdagradDAOptimizer([{"params": [a], "global_step": step}], lr=0.1,
                               global_step=step)
    with pytest.raises(TypeError, match=r"`global_step` in a param group"):
        trainop.AdagradDAOptimizer([{"params": [a], "global_step": step.clone()}], lr=0.1,
                                   global_step=step)
