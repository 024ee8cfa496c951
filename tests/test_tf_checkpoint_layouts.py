"""Layouts: a model loaded from TF variables computes what TF computes with them.

The continuation tests map gradients and variables through the same layout, so they would not
notice a wrong gate order or axis; here TF's own ops (eager) run on TF-layout variables and
the torch modules loaded through ``load_tf`` must give the same outputs: ``tf.matmul`` vs
``nn.Linear`` (``transpose``), ``tf.nn.conv2d`` NHWC/HWIO vs ``nn.Conv2d`` (``conv2d``),
``tf.nn.conv1d`` vs ``nn.Conv1d`` (``conv1d``), and TF's ``LSTMBlockCell`` kernel
(``tf.raw_ops.LSTMBlockCell``, gates i, j, f, o, ``forget_bias`` added) vs ``nn.LSTM``
(``lstm_kernel_ih``/``lstm_kernel_hh``/``lstm_bias_forget``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import trainop.checkpoints as ckpt


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dense = torch.nn.Linear(5, 3)
        self.conv = torch.nn.Conv2d(2, 4, (3, 2))
        self.conv1d = torch.nn.Conv1d(2, 3, 3)
        self.lstm = torch.nn.LSTM(4, 3)
        with torch.no_grad():
            self.lstm.bias_hh_l0.zero_()


FORGET_BIAS = 1.0
NAMES = {
    "dense.weight": ("dense/kernel", ckpt.transpose), "dense.bias": "dense/bias",
    "conv.weight": ("conv/kernel", ckpt.conv2d), "conv.bias": "conv/bias",
    "conv1d.weight": ("conv1d/kernel", ckpt.conv1d), "conv1d.bias": "conv1d/bias",
    "lstm.weight_ih_l0": ("lstm/kernel", ckpt.lstm_kernel_ih),
    "lstm.weight_hh_l0": ("lstm/kernel", ckpt.lstm_kernel_hh),
    "lstm.bias_ih_l0": ("lstm/bias", ckpt.lstm_bias_forget(FORGET_BIAS)),
    "lstm.bias_hh_l0": None,
}
SHAPES = {"dense/kernel": (5, 3), "dense/bias": (3,), "conv/kernel": (3, 2, 2, 4),
          "conv/bias": (4,), "conv1d/kernel": (3, 2, 3), "conv1d/bias": (3,),
          "lstm/kernel": (7, 12), "lstm/bias": (12,)}


@pytest.fixture
def loaded(tmp_path):
    rng = np.random.default_rng(2)
    variables = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    ckpt.write_tf(tmp_path / "m", {n: torch.from_numpy(v) for n, v in variables.items()})
    model = Model()
    report = ckpt.load_tf(tmp_path / "m", model, names=NAMES)
    assert report.left_at_initial == ["lstm.bias_hh_l0"]
    return variables, model


def test_dense_and_convolutions_compute_as_tf(tf, loaded):
    v, model = loaded
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5)).astype(np.float32)
    want = tf.matmul(x, v["dense/kernel"]) + v["dense/bias"]
    got = model.dense(torch.from_numpy(x))
    np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=1e-5, atol=1e-6)

    img = rng.standard_normal((2, 6, 5, 2)).astype(np.float32)  # NHWC
    want = tf.nn.conv2d(img, v["conv/kernel"], strides=1, padding="VALID") + v["conv/bias"]
    got = model.conv(torch.from_numpy(img).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
    np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=1e-5, atol=1e-5)

    seq = rng.standard_normal((2, 7, 2)).astype(np.float32)  # NWC
    want = tf.nn.conv1d(seq, v["conv1d/kernel"], stride=1, padding="VALID") + v["conv1d/bias"]
    got = model.conv1d(torch.from_numpy(seq).permute(0, 2, 1)).permute(0, 2, 1)
    np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_lstm_computes_as_tf_lstm_block_cell(tf, loaded):
    v, model = loaded
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((5, 2, 4)).astype(np.float32)  # time, batch, input
    c = h = np.zeros((2, 3), np.float32)
    zeros = np.zeros(3, np.float32)
    outputs = []
    for x in xs:
        step = tf.raw_ops.LSTMBlockCell(
            x=x, cs_prev=c, h_prev=h, w=v["lstm/kernel"], wci=zeros, wcf=zeros, wco=zeros,
            b=v["lstm/bias"], forget_bias=FORGET_BIAS, cell_clip=-1.0, use_peephole=False)
        c, h = step.cs.numpy(), step.h.numpy()
        outputs.append(h)
    got, _ = model.lstm(torch.from_numpy(xs))
    np.testing.assert_allclose(got.detach().numpy(), np.stack(outputs), rtol=1e-5, atol=1e-6)


def test_round_trip_through_every_layout(tmp_path, loaded):
    """save_tf writes back exactly the arrays load_tf read (LSTM parts joined); the bias with
    the forget bias added and taken off again is exact up to the rounding of that addition."""
    v, model = loaded
    ckpt.save_tf(tmp_path / "back", model, names=NAMES)
    back = ckpt.read_tf(tmp_path / "back")
    assert sorted(back) == sorted(v)
    for name, value in v.items():
        if name == "lstm/bias":
            torch.testing.assert_close(back[name], torch.from_numpy(value), rtol=0, atol=2.4e-7)
        else:
            assert torch.equal(back[name], torch.from_numpy(value)), name


def test_user_defined_layout(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(2, 4))
    flip = (lambda t: t.flip(0).t(), lambda t: t.t().flip(0))  # a pair of functions
    names = {"0.weight": ("w", flip), "0.bias": ("b", ckpt.layout(lambda t: -t, lambda t: -t))}
    w, b = torch.randn(2, 4), torch.randn(4)
    ckpt.write_tf(tmp_path / "u", {"w": w, "b": b})
    report = ckpt.load_tf(tmp_path / "u", model, names=names)
    assert torch.equal(model[0].weight.detach(), w.flip(0).t())
    assert torch.equal(model[0].bias.detach(), -b)
    assert sorted(report.transformed) == ["0.bias", "0.weight"]
    ckpt.save_tf(tmp_path / "u2", model, names=names)
    back = ckpt.read_tf(tmp_path / "u2")
    assert torch.equal(back["w"], w) and torch.equal(back["b"], b)
