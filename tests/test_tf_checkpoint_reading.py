"""``read_tf`` against TensorFlow's own reader, with and without TensorFlow installed.

The checkpoint shipped in ``tests/data/tf_checkpoint`` was written by TF's ``Saver`` and its
values read by TF's reader (``make.py``); these tests need no TensorFlow, and one runs with
``import tensorflow`` blocked. The continuation tests (``test_tf_checkpoints.py``) compare
``read_tf`` with ``tf.train.load_checkpoint`` on every checkpoint they write.
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

DATA = Path(__file__).parent / "data" / "tf_checkpoint"
PREFIX = str(DATA / "small")


def _check_against_tf_values(tensors) -> None:
    expected = np.load(DATA / "expected.npz")
    assert sorted(tensors) == sorted(expected.files)
    for name in expected.files:
        value = tensors[name]
        if value.dtype == torch.bfloat16:
            value = value.float()
        assert tuple(value.shape) == expected[name].shape, name
        assert np.array_equal(value.numpy(), expected[name]), name


def test_read_tf_equals_tf_reader_on_shipped_checkpoint():
    tensors = ckpt.read_tf(PREFIX)
    _check_against_tf_values(tensors)
    assert tensors["brain"].dtype == torch.bfloat16
    assert tensors["global_step"].dtype == torch.int64 and int(tensors["global_step"]) == 17
    assert tensors.unsupported == {"words": "a string tensor"}


def test_read_tf_without_tensorflow(tmp_path):
    """In a fresh interpreter where ``import tensorflow`` fails: the shipped TF checkpoint,
    and a checkpoint trainop writes and reads back."""
    code = f"""
import sys
sys.modules["tensorflow"] = None  # import tensorflow now raises ImportError
import numpy as np, torch
import trainop.checkpoints as ckpt
t = ckpt.read_tf({PREFIX!r})
e = np.load({str(DATA / "expected.npz")!r})
for n in e.files:
    v = t[n].float() if t[n].dtype == torch.bfloat16 else t[n]
    assert np.array_equal(v.numpy(), e[n]), n
ckpt.write_tf({str(tmp_path / "mine")!r}, {{"a": torch.arange(6.).reshape(2, 3)}})
assert torch.equal(ckpt.read_tf({str(tmp_path / "mine")!r})["a"], torch.arange(6.).reshape(2, 3))
try:
    import tensorflow
except ImportError:
    print("tensorflow absent; read", len(t), "variables")
"""
    src = os.path.join(os.path.dirname(trainop.__file__), os.pardir)
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "tensorflow absent; read 9 variables" in out.stdout


def test_write_then_read_round_trip_every_dtype(tmp_path):
    tensors = {
        "f32": torch.randn(3, 4), "f64": torch.randn(2, dtype=torch.float64),
        "f16": torch.randn(5).half(), "bf16": torch.randn(3).bfloat16(),
        "i64": torch.tensor(5), "i32": torch.arange(4, dtype=torch.int32),
        "u8": torch.arange(3, dtype=torch.uint8), "b": torch.tensor([True, False]),
        "c64": torch.randn(2, dtype=torch.complex64), "empty": torch.zeros(0, 2),
        "scope/a/b": torch.randn(3000, 5),  # long enough for the numpy CRC lanes
        **{f"many/{i:03d}": torch.full((2,), float(i)) for i in range(300)},  # several index blocks
    }
    ckpt.write_tf(tmp_path / "ck", tensors)
    back = ckpt.read_tf(tmp_path / "ck")
    assert sorted(back) == sorted(tensors)
    for name, value in tensors.items():
        assert back[name].dtype == value.dtype and torch.equal(back[name], value), name


def test_read_tf_equals_tensorflow_reader_on_written_files(tf, tmp_path):
    tensors = {"x/kernel": torch.randn(7, 3), "step": torch.tensor(3),
               **{f"many/{i:03d}": torch.full((2,), float(i)) for i in range(300)}}
    ckpt.write_tf(tmp_path / "ck", tensors)
    reader = tf.train.load_checkpoint(str(tmp_path / "ck"))
    assert sorted(reader.get_variable_to_dtype_map()) == sorted(tensors)
    for name, value in tensors.items():
        assert np.array_equal(reader.get_tensor(name), value.numpy()), name
    _check_against_tf_values({n: torch.from_numpy(np.asarray(
        tf.train.load_checkpoint(PREFIX).get_tensor(n), dtype=np.float32
        if n == "brain" else None)) for n in np.load(DATA / "expected.npz").files})


def test_crc32c_known_values():
    from trainop.interfaces.checkpoints.crc32c import crc32c

    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert crc32c(b"") == 0
    data = bytes(range(256)) * 100  # the numpy lanes path
    plain = 0xFFFFFFFF
    from trainop.interfaces.checkpoints.crc32c import _raw
    assert crc32c(data) == _raw(plain, data) ^ plain


def test_partitioned_variable_is_reported_not_guessed(tf, tmp_path):
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        tf1.get_variable("table", shape=(6, 2), partitioner=tf1.fixed_size_partitioner(2))
        tf1.get_variable("plain", initializer=np.ones(3, np.float32))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            path = tf1.train.Saver().save(sess, str(tmp_path / "p"), write_meta_graph=False)
    tensors = ckpt.read_tf(path)
    assert tensors.unsupported == {"table": "a partitioned variable (saved in slices)"}
    assert sorted(tensors) == ["plain"] and torch.equal(tensors["plain"], torch.ones(3))
    assert "table" in tf.train.load_checkpoint(path).get_variable_to_shape_map()


@pytest.mark.parametrize("index", sorted((DATA.parent).glob("*/*.index")),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_read_tf_equals_tf_reader_on_every_shipped_checkpoint(tf, index):
    prefix = str(index.with_suffix(""))
    ours = ckpt.read_tf(prefix)
    reader = tf.train.load_checkpoint(prefix)
    names = sorted(reader.get_variable_to_dtype_map())
    assert sorted([*ours, *ours.unsupported]) == names
    for name in ours:
        value = np.asarray(reader.get_tensor(name))
        got = ours[name].float() if ours[name].dtype == torch.bfloat16 else ours[name]
        assert tuple(got.shape) == value.shape, name
        assert np.array_equal(got.numpy(), value.astype(got.numpy().dtype)), name
