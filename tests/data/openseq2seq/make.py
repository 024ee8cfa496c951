"""Regenerate the OpenSeq2Seq mixed-precision checkpoint shipped for the tests, by running
OpenSeq2Seq's own ``MixedPrecisionOptimizerWrapper`` and ``AutomaticLossScaler`` (the upstream
files, unmodified, loaded from a checkout given on the command line) under TensorFlow's
``compat.v1`` with the TF2 behaviours off (ref variables, v1 control flow, as TF 1.x):

    python tests/data/openseq2seq/make.py /path/to/OpenSeq2Seq
    python tests/data/openseq2seq/make.py /path/to/OpenSeq2Seq --restore PREFIX STEPS OUT.npz

The second form restores the checkpoint at PREFIX (e.g. one ``save_tf`` wrote) into the
upstream mixed-precision graph, runs the gradients of steps STEPS (``6,7``) and writes every
variable to OUT.npz (``tests/test_openseq2seq_checkpoints.py`` runs it where the environment
variable ``OPENSEQ2SEQ_SRC`` names a checkout).

The graph is OpenSeq2Seq's ``optimize_loss`` arrangement: a float16 ``dense/kernel`` and a
float32 ``dense/bias``; inside ``tf.variable_scope("Loss_Optimization")`` an
``AdamOptimizer`` wrapped for mixed precision with a Backoff scaler (``scale_max`` 1024,
``step_window`` 1000). Gradients are fed through the loss ``sum(kernel * gk) + sum(bias * gb)``.
``BEFORE`` steps (one overflows in float16 and is skipped), ``Saver.save`` to ``mp``, then
``AFTER`` steps (one overflows). Writes ``mp.index``/``mp.data-*`` and ``expected.npz``: the
gradients fed and every variable after the last step.

Then OpenSeq2Seq's ``NovoGrad`` (upstream ``novograd.py``) on two float32 variables, gradients
fed to ``apply_gradients``: ``novograd.index``/``.data-*`` after ``NOVOGRAD_BEFORE`` steps and
``novograd.npz`` (gradients, every variable after ``NOVOGRAD_AFTER`` more steps).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BEFORE = [0.5, 100.0, -0.25, 0.75]  # gradient scale per step (100 overflows at scale 1024)
AFTER = [0.125, -0.5, 200.0, 0.25]
NOVOGRAD_BEFORE, NOVOGRAD_AFTER = 3, 3


def _upstream(checkout: str):
    import tensorflow
    import tensorflow.python.training  # noqa: F401  (loaded before the name is repointed)
    from tensorflow.python.ops import gen_training_ops

    tf = tensorflow.compat.v1
    tf.disable_v2_behavior()
    sys.modules["tensorflow"] = tf  # the upstream modules `import tensorflow as tf` (TF1 API)
    for name in ("open_seq2seq", "open_seq2seq.utils", "open_seq2seq.optimizers"):
        module = types.ModuleType(name)
        module.__path__ = []
        sys.modules[name] = module
    utils = types.ModuleType("open_seq2seq.utils.utils")
    utils.check_params = lambda **kwargs: None  # argument checking only
    sys.modules["open_seq2seq.utils.utils"] = utils
    loaded = {}
    sys.modules["tensorflow.train"] = tf.train  # novograd.py: from tensorflow.train import ...
    # novograd.py imports (and does not use) training_ops, which TF 2 keeps elsewhere
    sys.modules["tensorflow.python.training"].training_ops = gen_training_ops
    sys.modules["tensorflow.python.training.training_ops"] = gen_training_ops
    for short in ("automatic_loss_scaler", "mp_wrapper", "novograd"):
        name = f"open_seq2seq.optimizers.{short}"
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(checkout, "open_seq2seq", "optimizers", f"{short}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        loaded[short] = module
    return tensorflow, tf, loaded


def _train_and_save(tf, train, placeholders, grads, save_at, checkpoint, npz, keys) -> None:
    """Feed ``grads`` one step each, ``Saver.save`` before step ``save_at``; ``<npz>.npz``
    gets the gradients and every variable at the end."""
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for i, step_grads in enumerate(grads):
            if i == save_at:
                tf.train.Saver().save(sess, os.path.join(HERE, checkpoint),
                                      write_meta_graph=False, write_state=False)
            sess.run(train, dict(zip(placeholders, step_grads, strict=True)))
        final = sess.run({v.op.name: v for v in tf.global_variables()})
    out = {f"var:{k}": np.asarray(v) for k, v in final.items()}
    for i, step_grads in enumerate(grads):
        out.update({f"grad:{i}:{k}": g for k, g in zip(keys, step_grads, strict=True)})
    np.savez(os.path.join(HERE, f"{npz}.npz"), **out)
    print(sorted(final))


def gradients(scales):
    rng = np.random.default_rng(11)
    return [(rng.standard_normal((3, 2)).astype(np.float32) * s,
             rng.standard_normal(2).astype(np.float32) * s) for s in scales]


def mixed_precision_graph(tf, up):
    """The mixed-precision graph (call inside a ``tf.Graph().as_default()``): returns the
    train op and the two gradient placeholders."""
    rng = np.random.default_rng(5)
    kernel = tf.get_variable("dense/kernel", initializer=rng.standard_normal(
        (3, 2)).astype(np.float16))
    bias = tf.get_variable("dense/bias", initializer=rng.standard_normal(2).astype(np.float32))
    gk = tf.placeholder(tf.float32, [3, 2])
    gb = tf.placeholder(tf.float32, [2])
    loss = tf.reduce_sum(tf.cast(kernel, tf.float32) * gk) + tf.reduce_sum(bias * gb)
    step = tf.train.get_or_create_global_step()
    with tf.variable_scope("Loss_Optimization"):
        scaler = up["automatic_loss_scaler"].AutomaticLossScaler(
            "backoff", {"scale_max": 1024.0, "step_window": 1000})
        opt = up["mp_wrapper"].MixedPrecisionOptimizerWrapper(
            tf.train.AdamOptimizer(0.01), scaler)
        train = opt.apply_gradients(opt.compute_gradients(loss), global_step=step)
    return train, (gk, gb)


def main(checkout: str) -> None:
    _, tf, up = _upstream(checkout)
    with tf.Graph().as_default():
        train, placeholders = mixed_precision_graph(tf, up)
        _train_and_save(tf, train, placeholders, gradients(BEFORE + AFTER), len(BEFORE), "mp",
                        "expected", ("kernel", "bias"))
    novograd(tf, up["novograd"])


def novograd(tf, module) -> None:
    rng = np.random.default_rng(13)
    steps = NOVOGRAD_BEFORE + NOVOGRAD_AFTER
    grads = [(rng.standard_normal((3, 2)).astype(np.float32),
              rng.standard_normal(2).astype(np.float32)) for _ in range(steps)]
    with tf.Graph().as_default():
        w = tf.get_variable("layer/w", initializer=rng.standard_normal((3, 2)).astype(
            np.float32))
        b = tf.get_variable("layer/b", initializer=rng.standard_normal(2).astype(np.float32))
        gw = tf.placeholder(tf.float32, [3, 2])
        gb = tf.placeholder(tf.float32, [2])
        step = tf.train.get_or_create_global_step()
        opt = module.NovoGrad(learning_rate=0.1, beta1=0.9, beta2=0.5, weight_decay=0.01)
        train = opt.apply_gradients([(gw, w), (gb, b)], global_step=step)
        _train_and_save(tf, train, (gw, gb), grads, NOVOGRAD_BEFORE, "novograd", "novograd",
                        ("w", "b"))


def restore(checkout: str, prefix: str, steps: str, out: str) -> None:
    _, tf, up = _upstream(checkout)
    grads = gradients(BEFORE + AFTER)
    with tf.Graph().as_default():
        train, placeholders = mixed_precision_graph(tf, up)
        with tf.Session() as sess:
            tf.train.Saver().restore(sess, prefix)
            for i in map(int, steps.split(",")):
                sess.run(train, dict(zip(placeholders, grads[i], strict=True)))
            final = sess.run({v.op.name: v for v in tf.global_variables()})
    np.savez(out, **{k: np.asarray(v) for k, v in final.items()})


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "--restore":
        restore(sys.argv[1], *sys.argv[3:6])
    else:
        main(sys.argv[1])
