"""``RMSPropOptimizer``: TF1's RMSProp (mean square starts at one, epsilon inside the root)."""

from __future__ import annotations

from trainop.algorithms.rmsprop import rmsprop
from trainop.contract.optimizer import Optimizer, SlotSpec, uniform_slots
from trainop.contract.ranges import NON_NEGATIVE, UNIT_CLOSED
from trainop.kernels.row_slices import update_rows


class RMSPropOptimizer(Optimizer):
    r"""RMSProp, as ``tf.compat.v1.train.RMSPropOptimizer``.

    Update rule (slots ``rms`` filled with ONE, ``momentum`` zeros, ``mg`` zeros if centered)::

        ms  = decay * ms + (1 - decay) * g * g
        mg  = decay * mg + (1 - decay) * g                     (centered only)
        mom = momentum * mom + lr * g / sqrt(ms - mg^2 + eps)  (mg = 0 if not centered)
        var -= mom

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \begin{gathered}
    s_t = \rho\,s_{t-1} + (1-\rho)\,g_t^2 \\
    \bar g_t = \rho\,\bar g_{t-1} + (1-\rho)\,g_t\ \text{(centered; else } 0\text{)} \\
    k_t = \mu\,k_{t-1} + \eta\,\frac{g_t}{\sqrt{s_t - \bar g_t^{\,2} + \epsilon}} \\
    \theta_t = \theta_{t-1} - k_t
    \end{gathered}
    $$

    Dense updates use TF's dense kernel form ``ms += (g*g - ms) * (1 - decay)`` and sparse
    updates its sparse form ``ms * decay + g*g * (1 - decay)`` (equal up to the last ulp, so
    each matches TF bit for bit on its path). Sparse: only touched rows change.

    Args:
        learning_rate (float | Tensor | Callable | Policy): non-negative.
        decay (float | Tensor | Callable): in [0, 1], the decay of the mean square.
        momentum (float | Tensor | Callable): non-negative.
        epsilon (float | Tensor | Callable): non-negative, inside the square root (TF's placement).
        centered (bool): subtract the squared mean gradient (the centered variant).

    Example:
        >>> import torch, trainop
        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> trainop.RMSPropOptimizer(0.1).apply_gradients([(torch.tensor([0.5]), w)])

    Reference: TF 1.15 ``rmsprop.py``. Differs from ``torch.optim.RMSprop`` in the initial mean
    square (1 vs 0), the epsilon placement (inside vs outside the root) and the learning rate
    (inside the momentum buffer here).
    """

    _ranges = {"lr": NON_NEGATIVE, "decay": UNIT_CLOSED, "momentum": NON_NEGATIVE,
               "epsilon": NON_NEGATIVE}
    IMPLEMENTATIONS = ("reference", "foreach", "native")

    def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10,
                 use_locking: bool = False, centered: bool = False, name: str = "RMSProp", *,
                 params=None,
                 implementation: str | None = None) -> None:
        super().__init__(params, {"lr": learning_rate, "decay": decay, "momentum": momentum,
                                  "epsilon": epsilon, "centered": centered},
                         use_locking=use_locking, name=name,
                         implementation=implementation)

    @uniform_slots
    def _slot_specs(self, group):
        if group["centered"]:
            return (SlotSpec("rms", 1.0, nonnegative=True), SlotSpec("mg"),
                    SlotSpec("momentum"))
        return (SlotSpec("rms", 1.0, nonnegative=True), SlotSpec("momentum"))

    def _slot_invariant(self, group, slots):
        """Centered: ``rms >= mg^2`` (up to ``epsilon``), which every update keeps (rms - mg^2
        becomes decay * (rms - mg^2) + decay * (1 - decay) * (mg - g)^2) and the root needs."""
        if "mg" not in slots:
            return None
        epsilon = group["epsilon"] if isinstance(group["epsilon"], float | int) else 0.0
        if bool((slots["rms"] - slots["mg"] * slots["mg"] < -epsilon).any()):
            return ("Expected slot `rms` >= `mg`^2 (centered RMSProp takes the root of "
                    "rms - mg^2 + epsilon), it is smaller")
        return None

    def _rmsprop(self, var, grad, slots, hp, blend_form: bool) -> None:
        rmsprop(var, grad, slots["rms"], slots["momentum"], slots.get("mg"), lr=hp.lr,
                decay=hp.decay, momentum=hp.momentum, epsilon=hp.epsilon, blend_form=blend_form)

    def _native_rule(self, vars_, slots, hp, non_slot, scalar=float):
        hyper = [scalar(hp.lr), scalar(hp.decay), scalar(hp.momentum), scalar(hp.epsilon)]
        if "mg" in slots:
            return "rmsprop_centered", [slots["rms"], slots["mg"], slots["momentum"]], hyper
        return "rmsprop", [slots["rms"], slots["momentum"]], hyper

    def _apply_dense(self, var, grad, slots, hp, non_slot) -> None:
        self._rmsprop(var, grad, slots, hp, blend_form=False)

    def _native_sparse_rule(self, var, slots, hp, non_slot):
        rule, tables, hyper = self._native_rule_of(var, slots, hp, non_slot)
        return f"{rule}_sparse", tables, hyper  # the form of TF's sparse kernels (rules.h)

    def _triton_sparse_rule(self, var, slots, hp, non_slot):
        rule, tables, hyper = self._triton_rule_of(var, slots, hp, non_slot)
        return f"{rule}_sparse", tables, hyper  # TF's sparse kernels' form, as native

    def _apply_sparse(self, var, rows, slots, hp, non_slot) -> None:
        update_rows(lambda v, g, s: self._rmsprop(v, g, s, hp, blend_form=True), var, rows, slots)
