"""OpenSeq2Seq mixed-precision checkpoints: written by OpenSeq2Seq's own code, continued here.

``tests/data/openseq2seq/mp`` was written by OpenSeq2Seq's ``MixedPrecisionOptimizerWrapper``
and Backoff ``AutomaticLossScaler`` (the upstream files, run under TF 2.21's ``compat.v1``
with TF1 behaviour: see ``make.py``) after 4 steps, one of which overflowed in float16 and was
skipped: a float16 kernel with its float32 master ``Loss_Optimization/FP32-master-copy/...``,
Adam slots on the master under a doubled scope, ``beta1_power`` inside ``cond_1``, the
scaler's unnamed variables. ``expected.npz`` holds every variable after 4 more upstream steps
(one overflowing). Upstream's Backoff scaler reads its counter racily under TF1 control flow
(``last_overflow_iteration`` is 1 or 2 from one run to the next, quirk Q2): the shipped files
are one run, with the value trainop's deterministic rule gives. These tests need no TensorFlow.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import trainop
import trainop.checkpoints as ckpt
from trainop.processing import AutomaticLossScaler, MixedPrecisionOptimizerWrapper

DATA = Path(__file__).parent / "data" / "openseq2seq"
BEFORE, AFTER = 4, 4
NAMES = {"kernel": "dense/kernel", "bias": "dense/bias"}


class Dense(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kernel = torch.nn.Parameter(torch.zeros(3, 2, dtype=torch.float16))
        self.bias = torch.nn.Parameter(torch.zeros(2))


def _setup():
    model = Dense()
    inner = trainop.AdamOptimizer(0.01, params=[model.kernel, model.bias])
    scaler = AutomaticLossScaler("Backoff", {"scale_max": 1024.0, "step_window": 1000})
    return model, MixedPrecisionOptimizerWrapper(inner, scaler)


def _step(model, opt, gk, gb) -> None:
    loss = (model.kernel.float() * torch.from_numpy(gk)).sum() + (
        model.bias * torch.from_numpy(gb)).sum()
    opt.scale_loss(loss).backward()
    opt.step()
    opt.zero_grad()


def test_load_openseq2seq_checkpoint_and_continue():
    expected = np.load(DATA / "expected.npz")
    model, opt = _setup()
    report = ckpt.load_tf(DATA / "mp", model, opt, names=NAMES)
    assert report.skipped == [] and report.global_step == 3  # 4 steps, one skipped
    assert report.tf_names["kernel[master]"] == "Loss_Optimization/FP32-master-copy/dense/kernel"
    assert report.tf_names["kernel[m]"] == (
        "Loss_Optimization/Loss_Optimization/FP32-master-copy/dense/kernel/Adam")
    assert report.tf_names["optimizer.beta1_power"] == "Loss_Optimization/cond_1/beta1_power"
    assert report.tf_names["loss_scaler.loss_scale"] == "Loss_Optimization/Variable_2"
    assert float(opt.loss_scale) == 512.0  # halved at the overflow

    for i in range(BEFORE, BEFORE + AFTER):
        _step(model, opt, expected[f"grad:{i}:kernel"], expected[f"grad:{i}:bias"])

    def var(name):
        return torch.from_numpy(np.asarray(expected[f"var:{name}"]))

    master = opt.master(model.kernel)
    assert torch.equal(model.kernel.detach(), var("dense/kernel"))
    assert torch.equal(model.bias.detach(), var("dense/bias"))
    assert torch.equal(master, var("Loss_Optimization/FP32-master-copy/dense/kernel"))
    for slot, suffix in (("m", "Adam"), ("v", "Adam_1")):
        assert torch.equal(opt.optimizer.state[master][slot], var(
            f"Loss_Optimization/Loss_Optimization/FP32-master-copy/dense/kernel/{suffix}"))
        assert torch.equal(opt.optimizer.state[model.bias][slot],
                           var(f"Loss_Optimization/dense/bias/{suffix}"))
    non_slot = opt.optimizer.param_groups[0]["non_slot"]
    for power in ("beta1_power", "beta2_power"):
        assert torch.equal(non_slot[power], var(f"Loss_Optimization/cond_1/{power}"))
    assert int(non_slot["step"]) == int(expected["var:global_step"]) == 6
    assert float(opt.loss_scale) == float(expected["var:Loss_Optimization/Variable_2"]) == 256.0


def test_save_under_openseq2seq_names(tmp_path):
    """``save_tf`` with ``report.tf_names`` writes the variables upstream's graph has, with
    their dtypes and shapes (what ``Saver.restore`` into that graph needs), and reads back."""
    model, opt = _setup()
    report = ckpt.load_tf(DATA / "mp", model, opt, names=NAMES)
    ckpt.save_tf(tmp_path / "back", model, opt, names={**NAMES, **report.tf_names})
    ours, theirs = ckpt.read_tf(tmp_path / "back"), ckpt.read_tf(DATA / "mp")
    assert sorted(ours) == sorted(theirs)
    for name, value in theirs.items():
        assert ours[name].dtype == value.dtype and torch.equal(ours[name], value), name


def test_default_names_without_scopes(tmp_path):
    """Saved with the default names (no scopes), loaded back into a fresh wrapper."""
    model, opt = _setup()
    ckpt.load_tf(DATA / "mp", model, opt, names=NAMES)
    ckpt.save_tf(tmp_path / "plain", model, opt, names=NAMES)
    written = ckpt.read_tf(tmp_path / "plain")
    assert {"FP32-master-copy/dense/kernel", "FP32-master-copy/dense/kernel/Adam",
            "dense/bias/Adam_1", "beta1_power", "Variable", "Variable_1", "Variable_2",
            "global_step"} <= set(written)
    model2, opt2 = _setup()
    ckpt.load_tf(tmp_path / "plain", model2, opt2, names=NAMES)
    assert torch.equal(opt2.master(model2.kernel), opt.master(model.kernel))
    assert torch.equal(opt2.loss_scaler.state_dict()["last_overflow_iteration"],
                       opt.loss_scaler.state_dict()["last_overflow_iteration"])


def test_wrapper_without_masters_is_refused():
    model = Dense()
    opt = MixedPrecisionOptimizerWrapper(trainop.AdamOptimizer(0.01), 1.0)  # TF style
    with pytest.raises(ValueError, match=r"Expected the wrapper to hold the float32 master of "
                                         r"'kernel' \(construct the inner optimizer with the "
                                         r"model's parameters"):
        ckpt.load_tf(DATA / "mp", model, opt, names=NAMES)


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(3, 2))
        self.b = torch.nn.Parameter(torch.zeros(2))


def test_load_openseq2seq_novograd_checkpoint_and_continue():
    """``tests/data/openseq2seq/novograd`` was written by OpenSeq2Seq's ``NovoGrad`` after 3
    steps: the momentum slots ``<var>/NovoGrad`` and one 0-dim ``nvgrad2_ema<i>`` per variable
    (upstream never stores its second moment, so they hold 0: trainop's
    ``second_moment="openseq2seq"``). 3 more steps must give upstream's variables."""
    expected = np.load(DATA / "novograd.npz")
    model = Layer()
    opt = trainop.NovoGrad(0.1, beta1=0.9, beta2=0.5, weight_decay=0.01,
                           second_moment="openseq2seq", params=[model.w, model.b])
    report = ckpt.load_tf(DATA / "novograd", model, opt, names={"w": "layer/w", "b": "layer/b"})
    assert report.tf_names["w[grad_norm_ema]"] == "nvgrad2_ema0"
    assert report.tf_names["b[momentum]"] == "layer/b/NovoGrad"
    for i in range(3, 6):
        opt.apply_gradients([(torch.from_numpy(expected[f"grad:{i}:w"]), model.w),
                             (torch.from_numpy(expected[f"grad:{i}:b"]), model.b)])
    for name, param in (("layer/w", model.w), ("layer/b", model.b)):
        # the variables bit-identical, the momentum slots within float32 rounding (measured:
        # 1.2e-7 absolute, upstream multiplies by 1/sqrt(v + eps), trainop divides)
        assert torch.equal(param.detach(), torch.from_numpy(expected[f"var:{name}"]))
        torch.testing.assert_close(opt.state[param]["momentum"],
                                   torch.from_numpy(expected[f"var:{name}/NovoGrad"]),
                                   rtol=0, atol=2.5e-7)
    assert int(opt.param_groups[0]["non_slot"]["step"]) == int(expected["var:global_step"]) == 6


@pytest.mark.skipif(not os.environ.get("OPENSEQ2SEQ_SRC"),
                    reason="set OPENSEQ2SEQ_SRC to an OpenSeq2Seq checkout to run upstream's code")
def test_upstream_graph_restores_save_tf_and_continues_alike(tf, tmp_path):
    """Back to OpenSeq2Seq: 2 steps here, ``save_tf`` under upstream's names, then upstream's
    own graph (in a fresh interpreter: it switches TF to TF1 behaviour) restores the file and
    runs 2 more steps, as trainop does: every variable bit-identical, but the scaler's
    ``last_overflow_iteration``, which upstream reads racily (the overflow's iteration, or the
    next one)."""
    expected = np.load(DATA / "expected.npz")
    model, opt = _setup()
    report = ckpt.load_tf(DATA / "mp", model, opt, names=NAMES)
    for i in (4, 5):
        _step(model, opt, expected[f"grad:{i}:kernel"], expected[f"grad:{i}:bias"])
    ckpt.save_tf(tmp_path / "back", model, opt, names={**NAMES, **report.tf_names})
    for i in (6, 7):
        _step(model, opt, expected[f"grad:{i}:kernel"], expected[f"grad:{i}:bias"])
    mine = tmp_path / "mine"
    ckpt.save_tf(mine, model, opt, names={**NAMES, **report.tf_names})
    out = tmp_path / "upstream.npz"
    subprocess.run([sys.executable, str(DATA / "make.py"), os.environ["OPENSEQ2SEQ_SRC"],
                    "--restore", str(tmp_path / "back"), "6,7", str(out)], check=True,
                   capture_output=True, timeout=300)
    upstream, ours = np.load(out), ckpt.read_tf(mine)
    assert sorted(upstream.files) == sorted(ours)
    racy = "Loss_Optimization/Variable_1"
    assert int(upstream[racy]) - int(ours[racy]) in (0, 1)
    for name in upstream.files:
        if name != racy:
            assert np.array_equal(upstream[name], ours[name].numpy()), name


def test_weights_only_from_a_mixed_precision_checkpoint():
    """Without an optimizer the masters and slots are skipped as optimizer state; the scaler's
    unnamed variables are not known as such: strict refuses them, strict=False skips them."""
    model = Dense()
    with pytest.raises(ValueError, match=r"in the checkpoint but not mapped: "
                                         r"Loss_Optimization/Variable, "
                                         r"Loss_Optimization/Variable_1, "
                                         r"Loss_Optimization/Variable_2\. Nothing"):
        ckpt.load_tf(DATA / "mp", model, names=NAMES)
    report = ckpt.load_tf(DATA / "mp", model, names=NAMES, strict=False)
    theirs = ckpt.read_tf(DATA / "mp")
    assert torch.equal(model.kernel.detach(), theirs["dense/kernel"])
    assert len(report.skipped) == 10 and report.global_step == 3  # the step is reported
    assert report.loaded[:2] == ["kernel <- dense/kernel", "bias <- dense/bias"]
