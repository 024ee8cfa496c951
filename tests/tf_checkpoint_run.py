"""A small TF1 model (dense, conv 2-D and 1-D, an embedding with sparse updates, an LSTM
cell's kernel and bias) trained in graph mode with explicitly fed gradients, saved with
``tf.compat.v1.train.Saver``, and its torch twin, for the checkpoint continuation tests."""

from __future__ import annotations

import numpy as np
import torch

import trainop.checkpoints as ckpt

#: TF variable -> shape (TF layout). The LSTM: input 4, hidden 3.
TF_SHAPES = {
    "dense/kernel": (5, 3), "dense/bias": (3,), "conv/kernel": (2, 2, 2, 3),
    "conv/bias": (3,), "conv1d/kernel": (3, 2, 4), "conv1d/bias": (4,),
    "embedding/embeddings": (7, 3), "rnn/lstm_cell/kernel": (7, 12), "rnn/lstm_cell/bias": (12,),
}
SPARSE = "embedding/embeddings"

NAMES = {
    "dense.weight": ("dense/kernel", ckpt.transpose), "dense.bias": "dense/bias",
    "conv.weight": ("conv/kernel", ckpt.conv2d), "conv.bias": "conv/bias",
    "conv1d.weight": ("conv1d/kernel", ckpt.conv1d), "conv1d.bias": "conv1d/bias",
    "embedding.weight": "embedding/embeddings",
    "lstm.weight_ih_l0": ("rnn/lstm_cell/kernel", ckpt.lstm_kernel_ih),
    "lstm.weight_hh_l0": ("rnn/lstm_cell/kernel", ckpt.lstm_kernel_hh),
    "lstm.bias_ih_l0": ("rnn/lstm_cell/bias", ckpt.lstm_bias),
    "lstm.bias_hh_l0": None,
}


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dense = torch.nn.Linear(5, 3)
        self.conv = torch.nn.Conv2d(2, 3, 2)
        self.conv1d = torch.nn.Conv1d(2, 4, 3)
        self.embedding = torch.nn.Embedding(7, 3, sparse=True)
        self.lstm = torch.nn.LSTM(4, 3)
        with torch.no_grad():
            self.lstm.bias_hh_l0.zero_()  # TF's cell has one bias


def initial_values(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in TF_SHAPES.items()}


def gradients(steps: int, seed: int) -> list[dict]:
    """Per step: TF name -> a dense array, or ``(values, indices)`` for the embedding (with a
    repeated row)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        step = {n: (rng.standard_normal(s) * 0.5).astype(np.float32)
                for n, s in TF_SHAPES.items() if n != SPARSE}
        rows = np.array([rng.integers(0, 7), 2, 2, rng.integers(0, 7)], dtype=np.int64)
        step[SPARSE] = ((rng.standard_normal((4, 3)) * 0.5).astype(np.float32), rows)
        out.append(step)
    return out


def _graph(tf, make_optimizer, init):
    tf1 = tf.compat.v1
    variables = {n: tf1.get_variable(n, initializer=v, use_resource=True)
                 for n, v in init.items()}
    global_step = tf1.train.get_or_create_global_step()
    optimizer = make_optimizer(global_step)
    feeds, pairs = {}, []
    for name, var in variables.items():
        if name == SPARSE:
            values = tf1.placeholder(tf.float32, [None, 3])
            indices = tf1.placeholder(tf.int64, [None])
            feeds[name] = (values, indices)
            grad = tf.IndexedSlices(values, indices, tf.constant([7, 3], dtype=tf.int64))
        else:
            grad = feeds[name] = tf1.placeholder(tf.float32, TF_SHAPES[name])
        pairs.append((grad, var))
    train = optimizer.apply_gradients(pairs, global_step=global_step)
    return feeds, train


def _feed(feeds, grads):
    out = {}
    for name, ph in feeds.items():
        if name == SPARSE:
            out[ph[0]], out[ph[1]] = grads[name]
        else:
            out[ph] = grads[name]
    return out


def train_tf(tf, make_optimizer, init, before, after, prefix, restore=None):
    """Run ``before`` steps, save at ``prefix`` (if given), run ``after`` steps; or, with
    ``restore``, restore that checkpoint first. Returns (saved path, every global variable at
    the end)."""
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        feeds, train = _graph(tf, make_optimizer, init)
        saver = tf1.train.Saver()
        path = None
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            if restore is not None:
                saver.restore(sess, restore)
            for grads in before:
                sess.run(train, _feed(feeds, grads))
            if prefix is not None:
                path = saver.save(sess, prefix)
            for grads in after:
                sess.run(train, _feed(feeds, grads))
            final = sess.run({v.op.name: v for v in tf1.global_variables()})
    return path, final


def torch_gradients(model: Net, grads: dict) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same gradients in torch's layout, paired with the parameters they belong to."""
    params = dict(model.named_parameters())
    pairs = []
    for key, value in NAMES.items():
        if value is None:
            continue
        tf_name, layout = (value, ckpt.identity) if isinstance(value, str) else value
        param = params[key]
        if tf_name == SPARSE:
            values, rows = grads[tf_name]
            grad = torch.sparse_coo_tensor(torch.from_numpy(rows)[None],
                                           torch.from_numpy(values), tuple(param.shape))
        else:
            grad = layout.to_torch(torch.from_numpy(grads[tf_name]), tuple(param.shape))
        pairs.append((grad.contiguous() if not grad.is_sparse else grad, param))
    return pairs


def expected_torch(final: dict, model: Net, optimizer) -> dict[str, torch.Tensor]:
    """TF's final variables in torch's layout, keyed ``param`` and ``param[slot]``."""
    params = dict(model.named_parameters())
    out = {}
    suffixes = ckpt.slot_names(optimizer, optimizer.param_groups[0])
    for key, value in NAMES.items():
        if value is None:
            continue
        tf_name, layout = (value, ckpt.identity) if isinstance(value, str) else value
        shape = tuple(params[key].shape)
        out[key] = layout.to_torch(torch.from_numpy(np.asarray(final[tf_name])), shape)
        for slot, suffix in suffixes.items():
            out[f"{key}[{slot}]"] = layout.to_torch(
                torch.from_numpy(np.asarray(final[f"{tf_name}/{suffix}"])), shape)
    return out


def actual_torch(model: Net, optimizer) -> dict[str, torch.Tensor]:
    out = {}
    for key, param in model.named_parameters():
        if NAMES[key] is None:
            continue
        out[key] = param.detach()
        for slot, value in optimizer.state[param].items():
            out[f"{key}[{slot}]"] = value
    return out
