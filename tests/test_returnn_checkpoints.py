"""RETURNN TF checkpoints: layer parameters and the global train step, no optimizer state.

RETURNN's TF engine saves ``TFNetwork.get_saveable_params_list()``: every layer's parameters
(``<layer>/W``, ``<layer>/b``, ...) and the auxiliary variables (``global_step``, and the
random generator's state where one is used); its updater's slots, beta powers, learning-rate
variable and ``accum_grad_multiple_step`` accumulators are not saved, and the engine
re-initialises them when it resumes (``Updater.init_optimizer_vars``). So a RETURNN checkpoint
loads with ``strict=False``: the weights and the step, the optimizer fresh, as RETURNN itself
resumes. The checkpoint here is written with those names, not by RETURNN, so this runs
without RETURNN and TF; ``test_returnn_tf_checkpoint.py`` runs RETURNN's TF engine and observes
the same.
"""

from __future__ import annotations

import pytest
import torch

import trainop
import trainop.checkpoints as ckpt

NAMES = {"0.weight": ("output/W", ckpt.transpose), "0.bias": "output/b"}


def test_returnn_checkpoint_loads_weights_and_step(tmp_path):
    w, b = torch.randn(4, 3), torch.randn(3)
    ckpt.write_tf(tmp_path / "net.005", {"output/W": w, "output/b": b,
                                         "global_step": torch.tensor(1234)})
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    opt = trainop.AdamOptimizer(model.parameters(), lr=1e-3)
    with pytest.raises(ValueError, match=r"missing from the checkpoint: 0.weight\[m\]"):
        ckpt.load_tf(tmp_path / "net.005", model, opt, names=NAMES)
    report = ckpt.load_tf(tmp_path / "net.005", model, opt, names=NAMES, strict=False)
    assert torch.equal(model[0].weight.detach(), w.t()) and torch.equal(model[0].bias, b)
    assert report.global_step == 1234 and int(opt.param_groups[0]["non_slot"]["step"]) == 1234
    assert sorted(report.left_at_initial) == sorted(
        ["0.weight[m]", "0.weight[v]", "0.bias[m]", "0.bias[v]", "optimizer.beta1_power",
         "optimizer.beta2_power"])
    # fresh optimizer state, as RETURNN resumes: zero moments, beta powers at beta
    assert not opt.state[model[0].weight]["m"].any()
    assert float(opt.param_groups[0]["non_slot"]["beta1_power"]) == pytest.approx(0.9)
