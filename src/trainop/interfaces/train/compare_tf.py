"""``trainop train --compare-tf``: replay the run with TensorFlow's own ops (TF1 compat graph
mode) and report, per step, the largest deviation of trainop's parameters from TensorFlow's.

The replay rebuilds the built-in LSTM (``model.LSTMCellModel``: the same equations and gate
order, written with ``tf.matmul``/``tf.sigmoid``/``tf.tanh``) from the same initial weights as
resource variables, feeds the same batches, and applies TensorFlow's own optimizer class
(``tf.compat.v1.train.<Name>Optimizer`` with the trainop optimizer's hyperparameters) after
``tf.clip_by_global_norm`` when the recipe clips by the global norm. The learning rate of each
step is the value trainop's schedule gave that step, fed as a float (the schedules' parity with
TF's decay functions is tested on its own, ``tests/test_schedules_tf1.py``).

Replayable: float32 recipes whose update is a TF1 optimizer (GradientDescent, Momentum, Adam
and LazyAdam on dense gradients, Adagrad, Adadelta, RMSProp, Ftrl, ProximalGradientDescent,
ProximalAdagrad) with no processing other than a global-norm clip and no accumulation. Anything
else raises ``ValueError`` naming what TensorFlow 1 has no op for.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from trainop.interfaces.train.model import LSTMCellModel
from trainop.processing import ClipByGlobalNorm
from trainop.training.optimize_loss import TrainOp
from trainop.training.returnn.updater import Updater

__all__ = ["TF_CLASSES", "replay_in_tf", "tf_plan"]

#: trainop class name -> TensorFlow 1 class name (LazyAdam: Adam, equal on dense gradients).
TF_CLASSES = {name: name for name in (
    "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer", "AdagradOptimizer",
    "AdadeltaOptimizer", "RMSPropOptimizer", "FtrlOptimizer",
    "ProximalGradientDescentOptimizer", "ProximalAdagradOptimizer")}
TF_CLASSES["LazyAdamOptimizer"] = "AdamOptimizer"


def tf_plan(built: TrainOp | Updater) -> tuple[str, dict[str, Any], float | None]:
    """``(TF class name, its constructor arguments but the learning rate, global-norm clip or
    None)`` of a built training object, or ``ValueError`` where TF 1 cannot replay it."""
    if isinstance(built, Updater):
        built.get_optim_op()
        groups = built._groups
        if len(groups) != 1 or groups[0].torch_class or groups[0].n > 1:
            raise ValueError("--compare-tf replays one trainop optimizer without accumulation "
                             "(no updater_opts groups, torch.optim classes or "
                             "accum_grad_multiple_step)")
        optimizer, pipeline = groups[0].optimizer, groups[0].pipeline
    else:
        optimizer, pipeline = built.optimizer, built.pipeline
    name = type(optimizer).__name__
    if name not in TF_CLASSES:
        raise ValueError(f"--compare-tf: {name} has no TensorFlow 1 counterpart to replay "
                         f"(replayable: {sorted(TF_CLASSES)})")
    clip = None
    for processor in pipeline.processors:
        if isinstance(processor, ClipByGlobalNorm):
            clip = float(processor.clip_norm)
        else:
            raise ValueError(f"--compare-tf replays a global-norm clip only, the recipe also has "
                             f"{type(processor).__name__}")
    if len(optimizer.param_groups) != 1:
        raise ValueError("--compare-tf replays one parameter group")
    group = optimizer.param_groups[0]
    import tensorflow as tf

    tf_class = getattr(tf.compat.v1.train, TF_CLASSES[name])
    accepted = inspect.signature(tf_class.__init__).parameters
    kwargs = {}
    for key, value in group.items():
        arg = optimizer._arg_names.get(key, key)
        if arg in accepted and arg not in ("learning_rate", "name", "use_locking"):
            if callable(value) or isinstance(value, torch.Tensor):
                raise ValueError(f"--compare-tf replays constant hyperparameters, `{arg}` is "
                                 f"{type(value).__name__}")
            kwargs[arg] = value
    return TF_CLASSES[name], kwargs, clip


def _lstm_graph(tf, weights: dict[str, np.ndarray], x, hidden: int):
    variables = {n: tf.compat.v1.get_variable(n, initializer=tf.constant(w),
                                              use_resource=True)
                 for n, w in weights.items()}
    batch = tf.shape(x)[0]
    h = tf.zeros([batch, hidden])
    c = tf.zeros([batch, hidden])
    outputs = []
    for t in range(x.shape[1]):
        gates = (tf.matmul(x[:, t], variables["weight_ih"], transpose_b=True)
                 + variables["bias_ih"]
                 + tf.matmul(h, variables["weight_hh"], transpose_b=True) + variables["bias_hh"])
        i, f, g, o = tf.split(gates, 4, axis=1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        outputs.append(tf.matmul(h, variables["out_weight"], transpose_b=True)
                       + variables["out_bias"])
    return tf.stack(outputs, axis=1), variables


def replay_in_tf(initial: LSTMCellModel, built: TrainOp | Updater,
                 batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                 learning_rates: Sequence[float]) -> list[dict[str, np.ndarray]]:
    """TensorFlow's parameters after each step (see the module doc); ``initial``: a model with
    the weights trainop started from."""
    import tensorflow as tf

    class_name, kwargs, clip = tf_plan(built)
    weights = {n: p.detach().numpy().astype(np.float32).copy()
               for n, p in initial.named_parameters()}
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, *batches[0][0].shape[1:]])
        y = tf.compat.v1.placeholder(tf.float32, [None, *batches[0][1].shape[1:]])
        lr = tf.compat.v1.placeholder(tf.float32, [])
        prediction, variables = _lstm_graph(tf, weights, x, initial.hidden)
        loss = tf.reduce_mean(tf.square(prediction - y))
        optimizer = getattr(tf.compat.v1.train, class_name)(learning_rate=lr, **kwargs)
        pairs = optimizer.compute_gradients(loss, var_list=list(variables.values()))
        grads = [g for g, _ in pairs]
        if clip is not None:
            grads, _ = tf.clip_by_global_norm(grads, clip)
        train = optimizer.apply_gradients(list(zip(grads, [v for _, v in pairs], strict=True)))
        init = tf.compat.v1.global_variables_initializer()
    out = []
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        for (bx, by), rate in zip(batches, learning_rates, strict=True):
            session.run(train, {x: bx.numpy(), y: by.numpy(), lr: rate})
            out.append(dict(zip(variables, session.run(list(variables.values())),
                                strict=True)))
    return out


def deviations(ours: Sequence[dict[str, np.ndarray]], theirs: Sequence[dict[str, np.ndarray]]
               ) -> list[float]:
    """Per step, the largest ``|trainop - TF| / max |TF|`` over the parameters."""
    return [max(float(np.abs(a[n] - b[n]).max() / max(np.abs(b[n]).max(), 1e-30)) for n in b)
            for a, b in zip(ours, theirs, strict=True)]
