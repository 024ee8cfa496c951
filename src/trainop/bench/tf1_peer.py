"""TensorFlow 1's kernels as a peer, run the TF1 way: a ``tf.Graph``, ``tf.compat.v1.train``'s
``apply_gradients`` on resource variables, and ``sess.run(train_op)`` timed per step.

Gradients live in non-trainable variables (so the step reads them without a feed or a copy);
the sparse workload passes a ``tf.IndexedSlices`` built from two such variables, which TF
deduplicates (``unique`` + ``unsorted_segment_sum``) before the sparse kernel, as trainop
coalesces. The session uses as many intra- and inter-op threads as torch does.
``decoupled_decay`` puts contrib's weight-decay op ahead of the kernel (``tf1_decay``), as
``tf.contrib.opt.MomentumWOptimizer`` / ``AdamWOptimizer`` did.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from trainop.bench.quiet import quiet_stderr
from trainop.bench.tf1_decay import with_decoupled_weight_decay
from trainop.bench.workloads import WorkloadData
from trainop.interfaces.tensorflow_import import import_tensorflow

__all__ = ["Tf1Run", "load_tensorflow"]


def load_tensorflow() -> tuple[Any, str | None]:
    """``(tensorflow, None)``, or ``(None, reason)`` when it cannot be imported."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        with quiet_stderr():  # absl's start-up lines ignore TF_CPP_MIN_LOG_LEVEL
            tf = import_tensorflow()
    except Exception as exc:  # ImportError, or a broken installation
        return None, f"tensorflow is not importable ({type(exc).__name__}: {exc})"
    tf.get_logger().setLevel("ERROR")
    return tf, None


class Tf1Run:
    """One ``tf.compat.v1.train`` optimizer over a workload's variables, ready to step.

    ``optimizer`` and ``variables`` (one per parameter, in order) stay readable through
    ``session`` (e.g. ``optimizer.get_slot(var, name)``) until ``close()``.
    """

    def __init__(self, tf: Any, cls_name: str, kwargs: Mapping[str, Any], data: WorkloadData,
                 device: torch.device, threads: int, *, decoupled_decay: bool = False) -> None:
        if data.params[0].dtype == torch.bfloat16:
            raise TypeError("bfloat16 has no numpy dtype to feed TensorFlow")
        if device.type == "cuda":
            if not tf.config.list_physical_devices("GPU"):
                raise RuntimeError("TensorFlow sees no GPU")
            tf_device = "/GPU:0"
        else:
            tf_device = "/CPU:0"
        v1 = tf.compat.v1
        self.graph = tf.Graph()
        feed = {}

        def variable(array: Any, trainable: bool) -> Any:
            ph = v1.placeholder(tf.as_dtype(array.dtype), shape=array.shape)
            feed[ph] = array
            return v1.Variable(ph, trainable=trainable, use_resource=True)

        with self.graph.as_default(), tf.device(tf_device):
            pairs = []
            for p, g in zip(data.params, data.grads, strict=True):
                var = variable(_numpy(p), True)
                if g.is_sparse:
                    indices = variable(_numpy(g._indices()[0]), False)
                    values = variable(_numpy(g._values()), False)
                    shape = tf.constant(list(g.shape), dtype=tf.int64)
                    grad = tf.IndexedSlices(values.read_value(), indices.read_value(), shape)
                else:
                    grad = variable(_numpy(g), False).read_value()
                pairs.append((grad, var))
            kwargs = dict(kwargs)
            global_step = None
            if cls_name == "AdagradDAOptimizer":
                global_step = v1.Variable(0, dtype=tf.int64, trainable=False, use_resource=True)
                kwargs["global_step"] = global_step
            cls = getattr(v1.train, cls_name)
            if decoupled_decay:
                cls = with_decoupled_weight_decay(tf, cls)
            self.optimizer = cls(**kwargs)
            self.variables = [var for _, var in pairs]
            self.train_op = self.optimizer.apply_gradients(pairs, global_step=global_step)
            init = v1.global_variables_initializer()
        config = v1.ConfigProto(intra_op_parallelism_threads=threads,
                                inter_op_parallelism_threads=threads)
        self.session = v1.Session(graph=self.graph, config=config)
        self.session.run(init, feed_dict=feed)

    def step(self) -> None:
        self.session.run(self.train_op)

    def close(self) -> None:
        self.session.close()


def _numpy(t: torch.Tensor) -> Any:
    return t.detach().cpu().numpy()
