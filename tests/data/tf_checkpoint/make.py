"""Regenerate the small TF1 checkpoint shipped for the reading tests (needs TensorFlow):
``python tests/data/tf_checkpoint/make.py``. Writes ``small.index``,
``small.data-00000-of-00001`` (TF's ``Saver``) and ``expected.npz`` (TF's own reader's values;
bfloat16 as float32), so ``read_tf`` is tested against TF's files where TF is not installed."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    tf1 = tf.compat.v1
    rng = np.random.default_rng(7)
    with tf.Graph().as_default():
        values = {
            "dense/kernel": rng.standard_normal((5, 3)).astype(np.float32),
            "dense/bias": rng.standard_normal(3).astype(np.float64),
            "embedding/embeddings": rng.standard_normal((100, 40)).astype(np.float32),
            "half": np.float16([1.5, -2.25]), "ints": np.arange(6, dtype=np.int32).reshape(2, 3),
            "global_step": np.int64(17), "flag": np.bool_(True),
            "empty": np.zeros((0, 4), np.float32),
        }
        for name, value in values.items():
            tf1.Variable(value, name=name, use_resource=True)
        tf1.Variable(tf.constant([0.5, -3.0], dtype=tf.bfloat16), name="brain")
        tf1.Variable(b"text", name="words")  # a string: reported, not read
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            path = tf1.train.Saver().save(sess, os.path.join(HERE, "small"),
                                          write_meta_graph=False, write_state=False)
    reader = tf.train.load_checkpoint(path)
    expected = {}
    for name in reader.get_variable_to_dtype_map():
        value = reader.get_tensor(name)
        if name == "brain":
            value = np.asarray(value, dtype=np.float32)
        if name != "words":
            expected[name] = value
    np.savez(os.path.join(HERE, "expected.npz"), **expected)


if __name__ == "__main__":
    main()
