"""``save_tf``/``write_tf`` over an existing checkpoint (issue #40): interrupted between
writing the new data and switching the index, or failing at the index's rename, the old
checkpoint must stay readable (TensorFlow's own ``tf.train.load_checkpoint`` is the oracle)
and no temporary file may be left; once the index is switched the new one is whole. Failures
are injected by patching ``os.replace``."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import trainop.checkpoints as ckpt

OLD = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([3.0, 4.0, 5.0])}
NEW = {"a": torch.tensor([-1.0, -2.0]), "b": torch.tensor([0.5, 0.25, 0.125])}


def _tf_values(tf, prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in sorted(reader.get_variable_to_shape_map())}


def _same(values, tensors):
    assert sorted(values) == sorted(tensors)
    for name, tensor in tensors.items():
        np.testing.assert_array_equal(values[name], tensor.numpy())


class Interrupted(BaseException):
    """A kill at that point (not an Exception: nothing may catch it and go on)."""


def _failing_replace(monkeypatch, fail_at):
    """``os.replace`` in the writer raising at its call number ``fail_at`` (0-based)."""
    calls = []
    real = os.replace

    def replace(src, dst):
        calls.append(dst)
        if len(calls) - 1 == fail_at:
            raise (Interrupted() if fail_at else IsADirectoryError(21, "Is a directory", dst))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    return calls


@pytest.mark.parametrize("saves", [1, 2], ids=["over-one-shard", "over-two-shards"])
@pytest.mark.parametrize("fail_at", ["data", "index"])
def test_an_interrupted_save_leaves_the_old_checkpoint_readable(tf, tmp_path, monkeypatch,
                                                               saves, fail_at):
    prefix = tmp_path / "model.ckpt"
    for _ in range(saves):  # the second save switches to the other data name
        ckpt.write_tf(prefix, OLD)
    _same(_tf_values(tf, prefix), OLD)
    before = sorted(os.listdir(tmp_path))
    shards = 2 if saves == 1 else 1  # the new layout's data files, then the index
    calls = _failing_replace(monkeypatch, 0 if fail_at == "data" else shards)
    with pytest.raises((Interrupted, IsADirectoryError)):
        ckpt.write_tf(prefix, NEW)
    assert calls[-1].endswith(".index") == (fail_at == "index")
    monkeypatch.undo()
    _same(_tf_values(tf, prefix), OLD)  # TF reads the old checkpoint, whole
    _same({k: v.numpy() for k, v in ckpt.read_tf(prefix).items()}, OLD)
    assert sorted(os.listdir(tmp_path)) == before  # no temporary, no stray data file


def test_saves_alternate_data_names_and_leave_one_checkpoint(tf, tmp_path):
    prefix = tmp_path / "model.ckpt"
    for i, tensors in enumerate((OLD, NEW, OLD, NEW)):
        ckpt.write_tf(prefix, tensors)
        _same(_tf_values(tf, prefix), tensors)
        data = sorted(f for f in os.listdir(tmp_path) if ".data-" in f)
        assert data == (["model.ckpt.data-00000-of-00001"] if i % 2 == 0 else
                        ["model.ckpt.data-00000-of-00002", "model.ckpt.data-00001-of-00002"])
        assert len(os.listdir(tmp_path)) == len(data) + 2  # the index, TF's `checkpoint`
