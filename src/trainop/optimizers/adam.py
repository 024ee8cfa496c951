"""``AdamOptimizer`` and its contrib relatives ``LazyAdamOptimizer`` and ``NadamOptimizer``."""

from __future__ import annotations

import torch

from trainop.algorithms.adam import (
    adam,
    adam_sparse,
    adam_step_size,
    decay_moments_sparse,
    lazy_adam_sparse,
    nadam_sparse,
)
from trainop.contract.implementations import as_is
from trainop.contract.optimizer import Optimizer, SlotSpec, uniform_slots
from trainop.contract.ranges import NON_NEGATIVE, UNIT_OPEN_RIGHT
from trainop.kernels import native
from trainop.kernels.fused import adam_fused, tf_adam_alpha


def _as_float32(value) -> torch.Tensor:
    """A float32 CPU scalar (TF's non-slot beta powers; on the host, so reading them is free)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(device="cpu", dtype=torch.float32).clone()
    return torch.tensor(value, dtype=torch.float32)


class AdamOptimizer(Optimizer):
    r"""Adam, as ``tf.compat.v1.train.AdamOptimizer`` (the epsilon-hat formulation).

    Update rule at step t (slots ``m``, ``v``, zeros; non-slot float32 ``beta1_power`` and
    ``beta2_power``, equal to ``beta1^t``/``beta2^t`` during step t and advanced once per apply,
    after every variable was updated)::

        alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
        m     = beta1 * m + (1 - beta1) * g
        v     = beta2 * v + (1 - beta2) * g * g
        var  -= alpha * m / (sqrt(v) + epsilon)          # epsilon is NOT bias-corrected

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \begin{gathered}
    \alpha_t = \eta\,\frac{\sqrt{1-\beta_2^{\,t}}}{1-\beta_1^{\,t}} \\
    m_t = \beta_1 m_{t-1} + (1-\beta_1)\,g_t \\
    v_t = \beta_2 v_{t-1} + (1-\beta_2)\,g_t^2 \\
    \theta_t = \theta_{t-1} - \alpha_t\,\frac{m_t}{\sqrt{v_t} + \epsilon}
    \end{gathered}
    $$

    Sparse (TF semantics): the moments decay over the whole tensor and accumulate at the
    touched rows, and EVERY row of ``var`` moves (dense-equivalent). Use
    ``LazyAdamOptimizer`` to touch only the gradient's rows.

    Args:
        learning_rate (float | Tensor | Callable | Policy): non-negative: a number, a 0-dim tensor,
            a callable of no arguments or a ``trainop.schedules`` policy.
        beta1 (float | Tensor | Callable): in [0, 1): the decay of the first moment ``m``.
        beta2 (float | Tensor | Callable): in [0, 1): the decay of the second moment ``v``.
        epsilon (float | Tensor | Callable): non-negative, added to ``sqrt(v)`` (TF's epsilon hat,
            not bias-corrected).

    Example:
        >>> import torch, trainop
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> opt = trainop.AdamOptimizer(0.001)
        >>> opt.apply_gradients([(torch.tensor([0.1, 0.1]), w)])
        >>> sorted(opt.get_slot_names())
        ['m', 'v']

    Reference: TF 1.15 ``adam.py``; Kingma & Ba, section 2 (before 2.1). ``torch.optim.Adam``
    adds epsilon to the bias-corrected root; TF equals torch with
    ``eps_torch = eps_tf / sqrt(1 - beta2^t)``, which depends on t.
    """

    _ranges = {"lr": NON_NEGATIVE, "beta1": UNIT_OPEN_RIGHT, "beta2": UNIT_OPEN_RIGHT,
               "epsilon": NON_NEGATIVE}
    _non_slot_names = ("beta1_power", "beta2_power")
    _non_slot_ranges = {"beta1_power": UNIT_OPEN_RIGHT, "beta2_power": UNIT_OPEN_RIGHT}
    _use_nesterov = False
    IMPLEMENTATIONS = ("reference", "foreach", "fused", "native")
    _triton_decays_first = True  # the Adam kernels' wd (AdamW)

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 use_locking: bool = False, name: str = "Adam", *, params=None,
                 implementation: str | None = None) -> None:
        super().__init__(params, {"lr": learning_rate, "beta1": beta1, "beta2": beta2,
                                  "epsilon": epsilon}, use_locking=use_locking, name=name,
                         implementation=implementation)

    @uniform_slots
    def _slot_specs(self, group):
        return (SlotSpec("m"), SlotSpec("v", nonnegative=True))

    def _init_non_slot(self, non_slot, hp, device) -> None:
        non_slot["beta1_power"] = _as_float32(hp.values["beta1"])
        non_slot["beta2_power"] = _as_float32(hp.values["beta2"])

    def _finish(self, non_slot, hp, applied) -> None:
        for power, beta in (("beta1_power", "beta1"), ("beta2_power", "beta2")):
            value = hp.values[beta]
            if isinstance(value, torch.Tensor):
                value = value.to(device=non_slot[power].device, dtype=torch.float32)
            if applied is not None:  # a skipped update leaves the powers as they are
                value = torch.where(applied.to(non_slot[power].device),
                                    torch.as_tensor(value, dtype=torch.float32), 1.0)
            non_slot[power].mul_(value)

    def _finish_factors(self, non_slot, hp):
        if type(self)._finish is not AdamOptimizer._finish:
            return None
        pairs = [(power, hp.values[beta]) for power, beta in (("beta1_power", "beta1"),
                                                              ("beta2_power", "beta2"))]
        plain = all(isinstance(v, int | float) and not isinstance(v, bool) for _, v in pairs)
        return [(power, float(v)) for power, v in pairs] if plain else None

    def _alpha(self, var, hp, non_slot):
        beta1_power = non_slot["beta1_power"].to(device=var.device, dtype=var.dtype)
        beta2_power = non_slot["beta2_power"].to(device=var.device, dtype=var.dtype)
        return adam_step_size(hp.lr, beta1_power, beta2_power)

    def _fused_supported(self, dtype, device, hp) -> bool:
        return (dtype in self._fused_dtypes and device.type in ("cpu", "cuda")
                and all(isinstance(getattr(hp, k), float)
                        for k in ("lr", "beta1", "beta2", "epsilon")))

    def _apply_fused(self, vars_, grads, slots, hp, non_slot, gate) -> None:
        alpha = tf_adam_alpha(hp.lr, float(non_slot["beta1_power"]),
                              float(non_slot["beta2_power"]), vars_[0].dtype)
        adam_fused(vars_, grads, slots["m"], slots["v"], alpha=alpha, beta1=hp.beta1,
                   beta2=hp.beta2, epsilon=hp.epsilon, step=int(non_slot["step"]) + 1,
                   weight_decay=self._decoupled_weight_decay(hp),
                   **gate.fused_kwargs(vars_[0].device))

    def _native_hyper(self, dtype, hp, non_slot) -> list[float]:
        """The native kernels' Adam arguments: TF's step size (evaluated in ``dtype``), beta1,
        beta2, epsilon, Nesterov (0/1), decoupled weight decay."""
        alpha = tf_adam_alpha(float(hp.lr), float(non_slot["beta1_power"]),
                              float(non_slot["beta2_power"]), dtype)
        return [alpha, float(hp.beta1), float(hp.beta2), float(hp.epsilon),
                float(self._use_nesterov), self._decoupled_weight_decay(hp)]

    def _native_rule(self, vars_, slots, hp, non_slot):
        return "adam", [slots["m"], slots["v"]], self._native_hyper(vars_[0].dtype, hp, non_slot)

    def _triton_rule(self, vars_, slots, hp, non_slot):
        # TF's step size is computed by the kernel from the float32 beta powers on the device.
        return "adam", [slots["m"], slots["v"]], [
            hp.lr, hp.beta1, hp.beta2, hp.epsilon, float(self._use_nesterov),
            self._decoupled_weight_decay(hp, as_is),  # AdamW: the decoupled decay, first
            non_slot["beta1_power"], non_slot["beta2_power"]]

    #: The Triton form of this class's sparse rule (``kernels.triton.SPARSE_RULES``).
    _triton_sparse_form = "adam_sparse"

    def _triton_sparse_rule(self, var, slots, hp, non_slot):
        # TF's every-row sparse Adam (Nadam, LazyAdam: their forms), Adam's hyperparameters
        _, tables, hyper = self._triton_rule_of(var, slots, hp, non_slot)
        return self._triton_sparse_form, tables, hyper

    def _apply_dense(self, var, grad, slots, hp, non_slot) -> None:
        adam(var, grad, slots["m"], slots["v"], alpha=self._alpha(var, hp, non_slot),
             beta1=hp.beta1, beta2=hp.beta2, epsilon=hp.epsilon,
             use_nesterov=self._use_nesterov)

    def _apply_sparse(self, var, rows, slots, hp, non_slot) -> None:
        """TF's sparse Adam: every row of the moments decays and every row of ``var`` moves.
        With the native kernels the variable update is one pass (no temporaries the size of
        the table); the moments' decay and accumulation are the reference's own ops."""
        m, v = slots["m"], slots["v"]
        alpha = self._alpha(var, hp, non_slot)
        lists = [[var], [m], [v]]
        if (self._choose_implementation(var.dtype, var.device, hp) == "native"
                and native.boundary.checked(lists, dtype=var.dtype, read_only=frozenset({1, 2}),
                                            rule="adam_apply") is not None):
            decay_moments_sparse(m, v, rows.indices, rows.values, beta1=hp.beta1,
                                 beta2=hp.beta2)
            native.run("adam_apply", lists, [float(alpha), float(hp.epsilon)])
            return
        adam_sparse(var, rows.indices, rows.values, m, v, alpha=alpha, beta1=hp.beta1,
                    beta2=hp.beta2, epsilon=hp.epsilon)


class LazyAdamOptimizer(AdamOptimizer):
    r"""LazyAdam, as ``tf.contrib.opt.LazyAdamOptimizer``: Adam that touches only gradient rows.

    Dense gradients: exactly ``AdamOptimizer``. Sparse gradients (rows ``I``)::

        m[I]   = beta1 * m[I] + (1 - beta1) * g
        v[I]   = beta2 * v[I] + (1 - beta2) * g * g
        var[I] -= alpha * m[I] / (sqrt(v[I]) + epsilon)     # alpha from the shared beta powers

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \begin{gathered}
    m_t[I] = \beta_1 m_{t-1}[I] + (1-\beta_1)\,g_t \\
    v_t[I] = \beta_2 v_{t-1}[I] + (1-\beta_2)\,g_t^2 \\
    \theta_t[I] = \theta_{t-1}[I] - \alpha_t\,\frac{m_t[I]}{\sqrt{v_t[I]} + \epsilon}
    \end{gathered}
    $$

    Other rows of ``var``, ``m`` and ``v`` are untouched; the beta powers still advance once per
    apply. Arguments and defaults as ``AdamOptimizer`` (default name ``"Adam"``, as contrib).

    Example:
        >>> import torch, trainop
        >>> table = torch.zeros(4, 2, requires_grad=True)
        >>> g = torch.sparse_coo_tensor([[1, 1]], torch.ones(2, 2), (4, 2))
        >>> trainop.LazyAdamOptimizer(0.1).apply_gradients([(g, table)])
        >>> bool((table[0] == 0).all()), bool((table[1] != 0).all())
        (True, True)

    Reference: TF 1.15 ``tf.contrib.opt.LazyAdamOptimizer``. ``torch.optim.SparseAdam`` keeps
    a per-parameter step and torch's epsilon placement, so it is not a drop-in equivalent.
    """

    _triton_sparse_form = "lazy_adam"

    def _native_sparse_rule(self, var, slots, hp, non_slot):
        return "lazy_adam", [slots["m"], slots["v"]], self._native_hyper(var.dtype, hp,
                                                                         non_slot)[:4]

    def _apply_sparse(self, var, rows, slots, hp, non_slot) -> None:
        if self._sparse_rows_natively(var, rows.indices, rows.values, slots, hp, non_slot):
            return  # the same rule in one pass over the touched rows
        alpha = self._alpha(var, hp, non_slot)
        lazy_adam_sparse(var, rows.indices, rows.values, slots["m"], slots["v"], alpha=alpha,
                         beta1=hp.beta1, beta2=hp.beta2, epsilon=hp.epsilon)


class NadamOptimizer(AdamOptimizer):
    r"""Nadam, as ``tf.contrib.opt.NadamOptimizer`` (Dozat's simplified form).

    Update rule: Adam's moments, then a Nesterov look-ahead in the numerator::

        var -= alpha * ((1 - beta1) * g + beta1 * m) / (sqrt(v) + epsilon)

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \theta_t = \theta_{t-1} - \alpha_t\,\frac{(1-\beta_1)\,g_t + \beta_1 m_t}{\sqrt{v_t} + \epsilon}
    $$

    Sparse: ``m`` and ``v`` decay over the whole tensor (as Adam), but only the touched rows of
    ``var`` move. Arguments and defaults as ``AdamOptimizer`` (default name ``"Adam"``).

    Example:
        >>> import torch, trainop
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> trainop.NadamOptimizer(0.001).apply_gradients([(torch.tensor([0.1, 0.1]), w)])

    Reference: TF 1.15 ``tf.contrib.opt.NadamOptimizer`` (= RETURNN's ``nadam``). Differs from
    ``torch.optim.NAdam`` and Keras Nadam, which use a momentum-decay schedule.
    """

    _use_nesterov = True
    IMPLEMENTATIONS = ("reference", "foreach", "native")
    _triton_sparse_form = "nadam_sparse"

    def _apply_sparse(self, var, rows, slots, hp, non_slot) -> None:
        nadam_sparse(var, rows.indices, rows.values, slots["m"], slots["v"],
                     alpha=self._alpha(var, hp, non_slot), beta1=hp.beta1, beta2=hp.beta2,
                     epsilon=hp.epsilon)
