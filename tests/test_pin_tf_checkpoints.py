"""Pins of the TF checkpoint interop (issue #34). Checkpoints are written by TensorFlow's own
``SaveV2`` and read back by its own ``load_checkpoint``; expected values come from TF's layout
definitions (LSTM gates i, j, f, o; the cell adds ``forget_bias`` to f), never from trainop."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import trainop
import trainop.checkpoints as ckpt

tf = pytest.importorskip("tensorflow")


def _tf_save(prefix, tensors: dict) -> str:
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])
    return str(prefix)


class _Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.zeros(2))
        self.b = torch.nn.Parameter(torch.zeros(3))


def _adam_vars(name, n, m, v):
    return {name: np.full(n, 1.5, np.float32), f"{name}/Adam": np.full(n, m, np.float32),
            f"{name}/Adam_1": np.full(n, v, np.float32)}


def _load_two(tmp_path, non_slots: dict, grouped: bool = False):
    """``load_tf`` of TF Adam variables ``a`` (2 elements) and ``b`` (3) plus ``non_slots``
    into ``_Two`` and a fresh ``AdamOptimizer`` (one group per parameter where ``grouped``);
    the optimizer."""
    model = _Two()
    tensors = {**_adam_vars("a", 2, 0.1, 0.2), **_adam_vars("b", 3, 0.3, 0.4), **non_slots}
    prefix = _tf_save(tmp_path / "ck", tensors)
    params = [{"params": [model.a]}, {"params": [model.b]}] if grouped else model.parameters()
    opt = trainop.AdamOptimizer(params, learning_rate=0.1)
    ckpt.load_tf(prefix, model, opt, names={"a": "a", "b": "b"})
    return opt


def test_a_suffix_without_the_scope_boundary_is_not_the_beta_power(tmp_path):
    with pytest.raises(ValueError, match="beta1_power"):
        _load_two(tmp_path, {"my_beta1_power": np.float32(0.5), "beta2_power": np.float32(0.25)})


def test_beta_powers_are_restored_into_every_group(tmp_path):
    opt = _load_two(tmp_path, {"scope/beta1_power": np.float32(0.729),
                               "scope/beta2_power": np.float32(0.997),
                               "global_step": np.int64(3)}, grouped=True)
    for group in opt.param_groups:
        assert float(group["non_slot"]["beta1_power"]) == np.float32(0.729)
        assert float(group["non_slot"]["beta2_power"]) == np.float32(0.997)
        assert group["non_slot"]["step"].dtype == torch.int64
        assert int(group["non_slot"]["step"]) == 3


def test_an_int32_global_step_loads_as_int64(tmp_path):
    opt = _load_two(tmp_path, {"beta1_power": np.float32(0.9), "beta2_power": np.float32(0.999),
                               "global_step": np.int32(7)})
    step = opt.param_groups[0]["non_slot"]["step"]
    assert step.dtype == torch.int64 and int(step) == 7


def _tf_order(t: np.ndarray, h: int) -> np.ndarray:
    """torch (i, f, g, o) -> TF (i, j=g, f, o) along axis 0."""
    return np.concatenate([t[:h], t[2 * h:3 * h], t[h:2 * h], t[3 * h:]])


def test_lstm_forget_bias_shifts_the_parameter_and_never_its_slots(tmp_path):
    h, fb = 2, 1.0
    model = torch.nn.Module()
    model.bias = torch.nn.Parameter(torch.arange(4 * h, dtype=torch.float32))
    opt = trainop.AdamOptimizer(model.parameters(), learning_rate=0.1)
    model.bias.grad = torch.linspace(-1.0, 2.0, 4 * h)
    opt.step()
    m = opt.state[model.bias]["m"].numpy().copy()
    v = opt.state[model.bias]["v"].numpy().copy()
    bias = model.bias.detach().numpy().copy()
    prefix = str(tmp_path / "ck")
    ckpt.save_tf(prefix, model, opt, names={"bias": ("cell/bias", ckpt.lstm_bias_forget(fb))})
    reader = tf.train.load_checkpoint(prefix)
    expected = _tf_order(bias, h)
    expected[2 * h:3 * h] -= fb  # TF's cell adds forget_bias to its f gate (TF's 3rd block)
    np.testing.assert_allclose(reader.get_tensor("cell/bias"), expected, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(reader.get_tensor("cell/bias/Adam"), _tf_order(m, h))
    np.testing.assert_array_equal(reader.get_tensor("cell/bias/Adam_1"), _tf_order(v, h))


def test_conv2d_kernel_is_saved_as_tf_hwio(tmp_path):
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.arange(2 * 3 * 4 * 5, dtype=torch.float32)
                                 .reshape(2, 3, 4, 5))  # torch (out, in, kh, kw)
    prefix = str(tmp_path / "ck")
    ckpt.save_tf(prefix, model, names={"w": ("conv/kernel", ckpt.conv2d)})
    got = tf.train.load_checkpoint(prefix).get_tensor("conv/kernel")
    np.testing.assert_array_equal(got, model.w.detach().numpy().transpose(2, 3, 1, 0))


def test_torch_adam_coupled_weight_decay_and_sgd_dampening_are_refused():
    p = torch.nn.Parameter(torch.ones(2))
    opt = trainop.AdamOptimizer([p], learning_rate=0.1)
    torch_opt = torch.optim.Adam([p], lr=0.1, weight_decay=0.1)
    with pytest.raises(ValueError, match="weight_decay"):
        ckpt.from_torch_optim(torch_opt, opt)
    mom = trainop.MomentumOptimizer([p], learning_rate=0.1, momentum=0.9)
    sgd = torch.optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.5)
    with pytest.raises(ValueError, match="dampening"):
        ckpt.from_torch_optim(sgd, mom)


def test_two_scoped_candidates_are_refused_not_guessed(tmp_path):
    with pytest.raises(ValueError, match="Cannot tell which"):
        _load_two(tmp_path, {"x/beta1_power": np.float32(0.5), "y/beta1_power": np.float32(0.6),
                             "beta2_power": np.float32(0.25)})


def test_bfloat16_parameters_save_their_float32_masters_and_slots(tmp_path):
    from trainop.processing.mixed_precision import MixedPrecisionOptimizerWrapper
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.full((3,), 1.5, dtype=torch.bfloat16))
    opt = MixedPrecisionOptimizerWrapper(
        trainop.AdamOptimizer(model.parameters(), learning_rate=0.1), 1.0)
    prefix = str(tmp_path / "ck")
    ckpt.save_tf(prefix, model, opt, names={"w": "w"})
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_dtype_map()
    # OpenSeq2Seq: the float32 master holds the optimizer's slots (mixed precision)
    assert shapes["FP32-master-copy/w"] == tf.float32
    assert shapes["FP32-master-copy/w/Adam"] == tf.float32
    assert "w/Adam" not in shapes


def test_a_key_repeated_in_the_next_data_block_is_refused(tmp_path):
    # a table maps each key once, in strictly increasing order (TF's table builder refuses a
    # key <= the previous one); the same key closing one block and opening the next gives
    # one tensor two entries: damaged, whichever would win
    from trainop.interfaces.checkpoints.sstable import read_table, write_table
    prefix = _tf_save(tmp_path / "ck", {"a": np.ones(2, np.float32), "b": np.zeros(3, np.float32)})
    index = tmp_path / "ck.index"
    entries = read_table(index.read_bytes(), "index")
    assert [k for k, _ in entries][-1] == b"b"
    index.write_bytes(write_table(entries + [entries[-1]], block_size=1))  # one block per key
    with pytest.raises(ValueError, match="order"):
        ckpt.read_tf(prefix)
