"""TF checkpoint folders: ``load_tf``/``read_tf`` take the folder TF's ``Saver`` wrote (its
latest checkpoint, named by the ``checkpoint`` state file, as ``tf.train.latest_checkpoint``
reads it); ``save_tf`` writes that file, so TensorFlow's readers find what it saved. Hostile
state files (names outside the folder, huge, malformed) are refused, naming the file."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import trainop
import trainop.checkpoints as ckpt
from trainop.interfaces.checkpoints.state_file import MAX_STATE_BYTES

NAMES = {"0.weight": ("dense/kernel", ckpt.transpose), "0.bias": "dense/bias"}


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 2))


def _tf_saves_twice(tf, folder, relative):
    """TF1's Saver writes two checkpoints into ``folder``; the values of the second."""
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        kernel = tf1.get_variable("dense/kernel", initializer=np.ones((3, 2), np.float32))
        bias = tf1.get_variable("dense/bias", initializer=np.zeros(2, np.float32))
        step = tf1.train.get_or_create_global_step()
        bump = [kernel.assign_add(np.full((3, 2), 0.5, np.float32)), bias.assign_add([1., 2.]),
                step.assign_add(1)]
        saver = tf1.train.Saver(save_relative_paths=relative)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for _ in range(2):
                sess.run(bump)
                saver.save(sess, os.path.join(folder, "model.ckpt"), global_step=step,
                           write_meta_graph=False)
            return sess.run([kernel, bias])


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_load_tf_reads_the_latest_checkpoint_of_a_folder_tf_wrote(tf, tmp_path, relative):
    kernel, bias = _tf_saves_twice(tf, str(tmp_path), relative)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-2")
    model = _model()
    report = ckpt.load_tf(tmp_path, model, names=NAMES)
    assert "global step 2" in str(report)
    assert torch.equal(model[0].weight, torch.from_numpy(kernel).t())
    assert torch.equal(model[0].bias, torch.from_numpy(bias))
    assert sorted(ckpt.read_tf(tmp_path)) == ["dense/bias", "dense/kernel", "global_step"]


def test_tf_finds_what_save_tf_wrote(tf, tmp_path):
    model = _model()
    opt = trainop.AdamOptimizer(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    ckpt.save_tf(tmp_path / "model.ckpt-1", model, opt, names=NAMES)
    opt.step()
    ckpt.save_tf(tmp_path / "model.ckpt-2", model, opt, names=NAMES)
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest == str(tmp_path / "model.ckpt-2")
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "model.ckpt-1", "model.ckpt-2"]
    reader = tf.train.load_checkpoint(str(tmp_path))
    assert np.array_equal(reader.get_tensor("dense/bias"), model[0].bias.detach().numpy())
    assert int(reader.get_tensor("global_step")) == 2
    twin, twin_opt = _model(), trainop.AdamOptimizer(_model().parameters(), lr=0.1)
    twin_opt = trainop.AdamOptimizer(twin.parameters(), lr=0.1)
    ckpt.load_tf(tmp_path, twin, twin_opt, names=NAMES)
    assert torch.equal(twin[0].weight, model[0].weight)


def _state(folder, text):
    (folder / "checkpoint").write_bytes(text if isinstance(text, bytes) else text.encode())


HOSTILE = {
    "escaping": ('model_checkpoint_path: "../outside/model.ckpt"\n',
                 r"checkpoint: `model_checkpoint_path`: the checkpoint '\.\./outside/model\.ckpt' "
                 r"lies outside the folder"),
    "absolute elsewhere": ('model_checkpoint_path: "/etc/passwd"\n', r"lies outside the folder"),
    "the folder itself": ('model_checkpoint_path: "."\n', r"lies outside the folder"),
    "unquoted": ("model_checkpoint_path: model.ckpt\n",
                 r"checkpoint, line 1: expected a quoted string"),
    "not text format": ("this is not a state file\n",
                        r"checkpoint, line 1: expected TF's text format `field: value`"),
    "twice": ('model_checkpoint_path: "a"\nmodel_checkpoint_path: "b"\n',
              r"checkpoint, line 2: `model_checkpoint_path` given twice"),
    "bad escape": ('model_checkpoint_path: "a\\qb"\n', r"an unknown escape"),
    "not utf-8": (b'model_checkpoint_path: "\xff"\n', r"not text \(UTF-8\)"),
    "huge": ("#" * (MAX_STATE_BYTES + 1), r"checkpoint: is 1,048,577 bytes, more than the "
                                          r"1,048,576 a TF checkpoint state file may have"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_state_file_is_refused_naming_it(tmp_path, case):
    (tmp_path / "outside").mkdir()
    text, message = HOSTILE[case]
    _state(tmp_path, text)
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=message):
        ckpt.load_tf(tmp_path, model, names=NAMES)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_folder_without_a_state_file_names_what_to_pass(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"has no `model_checkpoint_path`; pass a "
                                                r"checkpoint's prefix"):
        ckpt.read_tf(tmp_path)


def test_escaped_names_round_trip(tmp_path):
    folder = tmp_path / 'a "quoted" \\ näme'
    folder.mkdir()
    model = _model()
    ckpt.save_tf(folder / "m\tx", model, names=NAMES)
    assert sorted(ckpt.read_tf(folder)) == ["dense/bias", "dense/kernel"]
