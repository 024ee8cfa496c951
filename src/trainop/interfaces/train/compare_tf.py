"""``trainop train --compare-tf``: replay the run with TensorFlow's own ops (TF1 compat graph
mode) and report, per step, the largest deviation of trainop's parameters from TensorFlow's.

The replay is an oracle, never a mirror: every stage is built from the upstream definition of
the recipe's own system (OpenSeq2Seq's code, RETURNN's TF updater, TF's kernels); from trainop
it takes only the recipe's values (rates, betas, clip norms, ``iter_size``, the loss scaler's
parameters), never a mode or an order trainop is configured in. The stages (docs/recipes.md
lists them with their sources):

- The model: the built-in LSTM (``model.LSTMCellModel``'s equations and gate order with
  ``tf.matmul``/``tf.sigmoid``/``tf.tanh``) from the same initial weights, on the same batches;
  the learning rate of each step is fed as the value trainop's schedule gave it (the
  schedules' parity with TF's decay functions is tested on their own).
- Variables: float32 resource variables (the masters); in mixed precision the model reads
  ``tf.cast(master, float16)``, as OpenSeq2Seq's mixed-precision variable getter, and the loss
  ``float32(mean((y_hat - y)^2))`` is multiplied by the loss scale ``S`` before ``tf.gradients``.
  A regularizer's terms of the weights (2 or more dimensions) are in the loss, or in mixed
  precision their gradient is added to the masters' (``mp_regularizer_wrapper``).
- A micro-step: the gradients (float16 ones cast to float32, times ``1/S``) are added to
  float32 accumulators, divided by ``iter_size`` (OpenSeq2Seq) or summed (RETURNN); RETURNN's
  ``G`` (the micro-step's raw global norm) is kept for its global-norm steps.
- An update micro-step: OpenSeq2Seq's ``k % iter_size == 0`` (quirk Q5), RETURNN's ``k % N ==
  N - 1``. OpenSeq2Seq: ``tf.clip_by_global_norm`` (``max_grad_norm``) or LARC (``t =
  min(max(eta ||w|| / (lr (||g|| + eps)), min_update), 1)`` in clip mode, ``max(eta ||w|| /
  (||g|| + eps), min_update)`` in scale mode). RETURNN, in its updater's order
  (``RETURNN_ORDER``): ``tf.clip_by_value``, ``tf.clip_by_norm``, ``clip_by_average_norm``,
  ``tf.clip_by_global_norm(use_norm=G)``, the NaN/Inf filter (``tf.where``), the zeroing when
  ``G`` is not finite or above the threshold. Then, with an automatic loss scale, the overflow
  check (a NaN, or an infinite ``max |g|``) and the scaler's update in TF ops (Backoff: halve
  on overflow, double every ``step_window`` calls after the last, the counter read before its
  increment, quirk Q2; LogMax: the moments of ``log2 max |g|`` as OpenSeq2Seq's code has them,
  quirk Q3: ``2**log_max`` sampled on overflow, ``2**(16 - cutoff)``), the update skipped on
  overflow; then ``tf.compat.v1.train.<Name>Optimizer.apply_gradients`` (Nadam:
  ``ResourceApplyAdam`` with ``use_nesterov``, as ``tf.contrib.opt.NadamOptimizer``;
  NovoGrad: OpenSeq2Seq's code, ``_novograd``, then ``MomentumOptimizer(momentum=beta1)``),
  and the accumulators zeroed.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import numpy as np
import torch

from trainop.interfaces.tensorflow_import import import_tensorflow
from trainop.interfaces.train.model import LSTMCellModel
from trainop.interfaces.train.quiet import tf_logs_dropped
from trainop.interfaces.train.replay_plan import ReplayPlan

__all__ = ["deviations", "replay_in_tf"]


def _tensorflow():
    tf = import_tensorflow()  # TF_CPP_MIN_LOG_LEVEL: set by tf_logs_dropped, around every call

    tf.get_logger().setLevel("ERROR")
    return tf


def _lstm(tf, weights, x, hidden: int):
    batch = tf.shape(x)[0]
    h = tf.zeros([batch, hidden], dtype=x.dtype)
    c = tf.zeros([batch, hidden], dtype=x.dtype)
    outputs = []
    for t in range(x.shape[1]):
        gates = (tf.matmul(x[:, t], weights["weight_ih"], transpose_b=True) + weights["bias_ih"]
                 + tf.matmul(h, weights["weight_hh"], transpose_b=True) + weights["bias_hh"])
        i, f, g, o = tf.split(gates, 4, axis=1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        outputs.append(tf.matmul(h, weights["out_weight"], transpose_b=True)
                       + weights["out_bias"])
    return tf.stack(outputs, axis=1)


def _novograd(tf, kwargs, grads, variables):
    """OpenSeq2Seq's NovoGrad before its Momentum update, as its code behaves
    (``open_seq2seq/optimizers/novograd.py``; spec §7.1), whatever mode trainop runs in: per
    variable, ``n2 = sum(g^2)`` and ``d = g / sqrt(n2 + eps)`` (its moving average is computed
    from a variable that is never assigned, so it is ``n2`` at every step and ``beta2`` has no
    effect); ``+ weight_decay * w``; ``* (1 - beta1)`` with ``grad_averaging``."""
    out = []
    for g, w in zip(grads, variables, strict=True):
        d = g / tf.sqrt(tf.reduce_sum(tf.square(g)) + kwargs["epsilon"])
        if kwargs["weight_decay"] > 0:
            d = d + w * kwargs["weight_decay"]
        if kwargs["grad_averaging"]:
            d = d * (1.0 - kwargs["beta1"])
        out.append(d)
    return out


def _optimizer(tf, plan: ReplayPlan, lr):
    if plan.tf_class == "NovoGrad":
        return tf.compat.v1.train.MomentumOptimizer(lr, momentum=plan.kwargs["beta1"])
    if plan.tf_class == "NadamOptimizer":
        class Nadam(tf.compat.v1.train.AdamOptimizer):
            """TF's Adam kernel with ``use_nesterov`` (``tf.contrib.opt.NadamOptimizer``)."""

            def _resource_apply_dense(self, grad, var):
                beta1_power, beta2_power = self._get_beta_accumulators()
                return tf.raw_ops.ResourceApplyAdam(
                    var=var.handle, m=self.get_slot(var, "m").handle,
                    v=self.get_slot(var, "v").handle,
                    beta1_power=tf.cast(beta1_power, grad.dtype),
                    beta2_power=tf.cast(beta2_power, grad.dtype),
                    lr=tf.cast(self._lr_t, grad.dtype), beta1=tf.cast(self._beta1_t, grad.dtype),
                    beta2=tf.cast(self._beta2_t, grad.dtype),
                    epsilon=tf.cast(self._epsilon_t, grad.dtype), grad=grad,
                    use_locking=self._use_locking, use_nesterov=True)

        cls = Nadam
    else:
        cls = getattr(tf.compat.v1.train, plan.tf_class)
    accepted = inspect.signature(cls.__init__).parameters
    unknown = sorted(set(plan.kwargs) - set(accepted))
    if unknown:
        raise ValueError(f"tf.compat.v1.train.{plan.tf_class} has no argument {unknown}")
    return cls(learning_rate=lr, **plan.kwargs)


def _penalty(tf, regularizer, w):
    """``tf.contrib.layers.l2_regularizer(scale)(w)`` (``scale * l2_loss(w)``) or
    ``l1_regularizer`` (``scale * sum(|w|)``)."""
    kind, scale = regularizer
    return scale * (tf.nn.l2_loss(w) if kind == "l2" else tf.reduce_sum(tf.abs(w)))


#: RETURNN's TF updater's per-gradient steps in its order (``_post_process_grad`` in
#: ``returnn/tf/updater.py``), whatever order trainop's pipeline has; both global-norm steps use
#: ``G``, the global norm of the micro-step's raw gradients, as RETURNN measures it.
RETURNN_ORDER = ("clip_by_value", "clip_by_norm", "clip_by_average_norm", "clip_by_global_norm",
                 "nan_inf_filter", "clip_to_zero")


def _returnn_steps(tf, plan: ReplayPlan, grads, raw_norm):
    given = dict(plan.steps)
    unknown = sorted(set(given) - set(RETURNN_ORDER))
    if unknown:  # pragma: no cover - replay_plan admits these stages only
        raise ValueError(f"no replay of {unknown}")
    for stage in (s for s in RETURNN_ORDER if s in given):
        args = given[stage]
        if stage == "clip_by_value":
            grads = [tf.clip_by_value(g, args["clip_value_min"], args["clip_value_max"])
                     for g in grads]
        elif stage == "clip_by_norm":
            grads = [tf.clip_by_norm(g, args["clip_norm"]) for g in grads]
        elif stage == "clip_by_average_norm":
            grads = [tf.clip_by_norm(g, args["clip_norm"] * tf.cast(tf.size(g), tf.float32))
                     for g in grads]
        elif stage == "clip_by_global_norm":
            grads, _ = tf.clip_by_global_norm(grads, args["clip_norm"], use_norm=raw_norm)
        elif stage == "nan_inf_filter":
            grads = [tf.where(tf.math.is_finite(g), g, tf.zeros_like(g)) for g in grads]
        else:
            zero = tf.logical_or(tf.logical_not(tf.math.is_finite(raw_norm)),
                                 raw_norm > args["threshold"])
            grads = [tf.where(zero, tf.zeros_like(g), g) for g in grads]
    return grads


def _larc(tf, larc, grads, masters, lr):
    out = []
    for g, v in zip(grads, masters, strict=True):
        v_norm, g_norm = tf.norm(v), tf.norm(g)
        if larc["larc_mode"] == "clip":
            t = tf.minimum(tf.maximum(larc["larc_eta"] * v_norm
                                      / (lr * (g_norm + larc["epsilon"])), larc["min_update"]),
                           1.0)
        else:
            t = tf.maximum(larc["larc_eta"] * v_norm / (g_norm + larc["epsilon"]),
                           larc["min_update"])
        out.append(g * t)
    return out


class _Scaler:
    """The loss scale and its update as TF variables and ops (see the module doc)."""

    def __init__(self, tf, scaler) -> None:
        self.kind, self.args = scaler if scaler is not None else ("static", {"loss_scale": 1.0})
        start = {"static": self.args.get("loss_scale"), "backoff": self.args.get("scale_max"),
                 "logmax": 1.0}[self.kind]
        self.tf = tf
        self.scale = tf.compat.v1.get_variable("loss_scale", initializer=np.float32(start),
                                               use_resource=True, trainable=False)

    def update(self, overflow, amax):
        tf, a = self.tf, self.args
        if self.kind == "static":
            return tf.no_op()

        def var(name, value, dtype=tf.float32):
            return tf.compat.v1.get_variable(name, initializer=tf.constant(value, dtype),
                                             use_resource=True, trainable=False)

        if self.kind == "backoff":
            i = var("iteration", 0, tf.int64)
            last = var("last_overflow", -1, tf.int64)
            grow = tf.logical_and(tf.logical_not(overflow),
                                  tf.equal(tf.math.floormod(i - last, a["step_window"]), 0))
            new = tf.where(overflow, self.scale / a["step_factor"],
                           tf.where(grow, self.scale * a["step_factor"], self.scale))
            new = tf.clip_by_value(new, a["scale_min"], a["scale_max"])
            return tf.group(self.scale.assign(new), last.assign(tf.where(overflow, i, last)),
                            i.assign_add(1))
        # OpenSeq2Seq's LogMaxScaler as its code behaves (quirk Q3, whatever trainop runs): the
        # overflow sample 2**log_max, a literal 16 in the exponent, log2(0) = -inf taken in
        x = tf.where(overflow, tf.constant(2.0 ** a["log_max"], tf.float32), tf.math.log(amax)
                     / tf.math.log(2.0))
        state = {n: var(n, v) for n, v in (("x_hat", 0.0), ("slow_x_hat", 0.0),
                                           ("xsquared_hat", 0.0), ("b1_corr", 1.0),
                                           ("b2_corr", 1.0))}
        b1, b2 = a["beta1"], a["beta2"]
        x_hat = state["x_hat"] * b1 + x * (1 - b1)
        c1 = state["b1_corr"] * b1
        mu = x_hat / (1 - c1)
        slow = state["slow_x_hat"] * b2 + x * (1 - b2)
        sq = state["xsquared_hat"] * b2 + x * x * (1 - b2)
        c2 = state["b2_corr"] * b2
        slow_mu = slow / (1 - c2)
        sigma = tf.sqrt(tf.maximum(sq / (1 - c2) - slow_mu * slow_mu, 0.0))
        scale = tf.clip_by_value(tf.pow(2.0, 16.0 - (mu + a["overflow_std_dev"] * sigma)),
                                 a["scale_min"], a["scale_max"])
        new = {"x_hat": x_hat, "b1_corr": c1, "slow_x_hat": slow, "xsquared_hat": sq,
               "b2_corr": c2}
        ops = [state[n].assign(v) for n, v in new.items()]
        ops.append(self.scale.assign(scale))
        return tf.group(*ops)


def _updates(plan: ReplayPlan, k: int) -> bool:
    """RETURNN: ``k % N == N - 1``; OpenSeq2Seq: ``k % iter_size == 0`` (quirk Q5: its first
    update has one micro-step's gradient), whatever window trainop is configured with."""
    n = plan.accumulate
    return k % n == n - 1 if plan.front == "returnn" else k % n == 0


def replay_in_tf(initial: LSTMCellModel, plan: ReplayPlan,
                 batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                 learning_rates: Sequence[float]) -> list[dict[str, np.ndarray]]:
    """TensorFlow's model weights after each micro-step (see the module doc); ``initial``: a
    model with the weights trainop started from."""
    with tf_logs_dropped():
        return _replay(initial, plan, batches, learning_rates)


def _replay(initial: LSTMCellModel, plan: ReplayPlan,
            batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
            learning_rates: Sequence[float]) -> list[dict[str, np.ndarray]]:
    tf = _tensorflow()
    half = tf.float16 if plan.half == "float16" else None
    weights = {n: p.detach().float().numpy().copy() for n, p in initial.named_parameters()}
    graph = tf.Graph()
    with graph.as_default():
        masters = {n: tf.compat.v1.get_variable(n, initializer=tf.constant(w), use_resource=True)
                   for n, w in weights.items()}
        model = {n: tf.cast(v, half) if half is not None else tf.identity(v)
                 for n, v in masters.items()}
        dtype = half or tf.float32
        x = tf.compat.v1.placeholder(dtype, [None, *batches[0][0].shape[1:]])
        y = tf.compat.v1.placeholder(dtype, [None, *batches[0][1].shape[1:]])
        lr = tf.compat.v1.placeholder(tf.float32, [])
        loss = tf.cast(tf.reduce_mean(tf.square(_lstm(tf, model, x, initial.hidden) - y)),
                       tf.float32)
        regularized = [n for n, w in weights.items() if w.ndim >= 2] if plan.regularizer else []
        if regularized and half is None:  # in the loss, as OpenSeq2Seq's Model adds it
            loss = loss + tf.add_n([_penalty(tf, plan.regularizer, model[n])
                                    for n in regularized])
        scaler = _Scaler(tf, plan.scaler if plan.half is not None else None)
        raw = tf.gradients(loss * scaler.scale, list(model.values()))
        raw = [tf.cast(g, tf.float32) * (1.0 / scaler.scale) for g in raw]
        if regularized and half is not None:  # on the float32 masters (mp_regularizer_wrapper)
            for i, n in enumerate(weights):
                if n in regularized:
                    raw[i] = raw[i] + tf.gradients(_penalty(tf, plan.regularizer, masters[n]),
                                                   masters[n])[0]
        accumulators = [tf.compat.v1.get_variable(f"acc_{n}", initializer=tf.zeros_like(w),
                                                  use_resource=True, trainable=False)
                        for n, w in weights.items()]
        divisor = plan.accumulate if plan.front == "openseq2seq" else 1
        raw_norm_var = tf.compat.v1.get_variable("raw_norm", initializer=0.0,
                                                 use_resource=True, trainable=False)
        accumulate = tf.group(*[a.assign_add(g / divisor if divisor > 1 else g)
                                for a, g in zip(accumulators, raw, strict=True)],
                              raw_norm_var.assign(tf.linalg.global_norm(raw)))
        grads = [a.read_value() for a in accumulators]
        variables = list(masters.values())
        if plan.front == "returnn":
            grads = _returnn_steps(tf, plan, grads, raw_norm_var.read_value())
        if plan.clip is not None:
            grads, _ = tf.clip_by_global_norm(grads, plan.clip)
        if plan.larc is not None:
            grads = _larc(tf, plan.larc, grads, variables, lr)
        grads = [tf.identity(g) for g in grads]
        has_nan = tf.reduce_any([tf.reduce_any(tf.math.is_nan(g)) for g in grads])
        amax = tf.reduce_max([tf.reduce_max(tf.where(tf.math.is_nan(g), tf.zeros_like(g),
                                                     tf.abs(g))) for g in grads])
        overflow = tf.logical_or(has_nan, tf.math.is_inf(amax))
        kept = [tf.compat.v1.get_variable(f"kept_{n}", initializer=tf.zeros_like(w),
                                          use_resource=True, trainable=False)
                for n, w in weights.items()]
        with tf.control_dependencies([overflow, amax]):
            hold = tf.group(*[k.assign(g) for k, g in zip(kept, grads, strict=True)])
        with tf.control_dependencies([hold]):
            check = tf.identity(overflow)
        update_scale = scaler.update(overflow, amax)
        optimizer = _optimizer(tf, plan, lr * plan.lr_multiplier)
        final = [k.read_value() for k in kept]
        if plan.tf_class == "NovoGrad":
            final = _novograd(tf, plan.kwargs, final, variables)
        apply = optimizer.apply_gradients(list(zip(final, variables, strict=True)))
        reset = tf.group(*[a.assign(tf.zeros_like(a)) for a in accumulators])
        nothing = tf.no_op()
        init = tf.compat.v1.global_variables_initializer()
    skips = plan.scaler is not None and plan.scaler[0] != "static" and plan.half is not None
    out = []
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        for k, ((bx, by), rate) in enumerate(zip(batches, learning_rates, strict=True)):
            feed = {x: bx.numpy(), y: by.numpy(), lr: rate}
            session.run(accumulate, feed)
            if _updates(plan, k):
                # the gradients, the overflow check and the scale's update from the same state
                skipped, _ = session.run([check, update_scale if skips else nothing], feed)
                if not (skips and skipped):
                    session.run(apply, feed)
                session.run(reset)
            out.append(dict(zip(masters, session.run(list(model.values())), strict=True)))
    return [{n: np.asarray(w, dtype=np.float32) for n, w in step.items()} for step in out]


def deviations(ours: Sequence[dict[str, np.ndarray]], theirs: Sequence[dict[str, np.ndarray]]
               ) -> list[float]:
    """Per step, the largest ``|trainop - TF| / max |TF|`` over the parameters."""
    return [max(float(np.abs(a[n] - b[n]).max() / max(np.abs(b[n]).max(), 1e-30)) for n in b)
            for a, b in zip(ours, theirs, strict=True)]
