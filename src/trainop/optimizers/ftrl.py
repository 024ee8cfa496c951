"""``FtrlOptimizer``: TF1's FTRL-Proximal (incl. L2 shrinkage)."""

from __future__ import annotations

from trainop.algorithms.ftrl import ftrl
from trainop.contract.optimizer import Optimizer, SlotSpec, uniform_slots
from trainop.contract.ranges import NON_NEGATIVE, NON_POSITIVE
from trainop.contract.validation import check_name, check_real


class FtrlOptimizer(Optimizer):
    r"""FTRL-Proximal, as ``tf.compat.v1.train.FtrlOptimizer``.

    Update rule with ``p = learning_rate_power`` (slots ``accum``, filled with
    ``initial_accumulator_value``, and ``linear``, zeros)::

        gs        = g + 2 * l2_shrinkage * var        (only if l2_shrinkage > 0)
        new_accum = accum + g * g
        linear   += gs - (new_accum^(-p) - accum^(-p)) / lr * var
        var       = (l1 * sign(linear) - linear) / (new_accum^(-p) / lr + 2 * l2)
                    if |linear| > l1 else 0
        accum     = new_accum

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable;
    \(n\): ``accum``, \(z\): ``linear``, \(p\): ``-learning_rate_power``; shrinkage left out):

    $$
    \begin{gathered}
    n_t = n_{t-1} + g_t^2 \\
    z_t = z_{t-1} + g_t - \frac{n_t^{-p} - n_{t-1}^{-p}}{\eta}\,\theta_{t-1} \\
    \theta_t = \begin{cases}
    \dfrac{\lambda_1 \operatorname{sign}(z_t) - z_t}{n_t^{-p}/\eta + 2\lambda_2}
    & |z_t| > \lambda_1 \\
    0 & \text{otherwise}
    \end{cases}
    \end{gathered}
    $$

    Sparse: only touched rows change (shrinkage included). At ``learning_rate == 0`` (which TF's
    kernel rejects; a schedule may reach it) nothing changes, slots included: ``linear``'s
    update divides by the learning rate.

    Args:
        learning_rate (float | Tensor | Callable | Policy): non-negative (0: a step that changes
            nothing).
        learning_rate_power (float): non-positive.
        initial_accumulator_value (float): non-negative.
        l1_regularization_strength (float): non-negative.
        l2_regularization_strength (float): non-negative.
        accum_name (str | None): accepted for TF compatibility (TF names the slot *variable* with
            it); the slot name stays ``accum``.
        linear_name (str | None): as ``accum_name``; the slot name stays ``linear``.
        l2_shrinkage_regularization_strength (float): non-negative.

    Example:
        >>> import torch, trainop
        >>> w = torch.zeros(2, requires_grad=True)
        >>> trainop.FtrlOptimizer(3.0).apply_gradients([(torch.tensor([0.1, 0.2]), w)])

    Reference: TF 1.15 ``ftrl.py``; McMahan et al., "Ad Click Prediction" (2013).
    """

    _ranges = {"lr": NON_NEGATIVE, "lr_power": NON_POSITIVE, "l1": NON_NEGATIVE,
               "l2": NON_NEGATIVE, "l2_shrinkage": NON_NEGATIVE}
    IMPLEMENTATIONS = ("reference", "foreach", "native")
    _arg_names = {"lr": "learning_rate", "lr_power": "learning_rate_power",
                  "l1": "l1_regularization_strength", "l2": "l2_regularization_strength",
                  "l2_shrinkage": "l2_shrinkage_regularization_strength"}

    def __init__(self, learning_rate, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 use_locking: bool = False, name: str = "Ftrl", accum_name: str | None = None,
                 linear_name: str | None = None, l2_shrinkage_regularization_strength=0.0, *,
                 params=None,
                 implementation: str | None = None) -> None:
        self._initial_accumulator_value = check_real(
            "initial_accumulator_value", initial_accumulator_value, NON_NEGATIVE)
        for arg, value in (("accum_name", accum_name), ("linear_name", linear_name)):
            if value is not None:
                check_name(value, arg)
        super().__init__(params, {"lr": learning_rate, "lr_power": learning_rate_power,
                                  "l1": l1_regularization_strength,
                                  "l2": l2_regularization_strength,
                                  "l2_shrinkage": l2_shrinkage_regularization_strength},
                         use_locking=use_locking, name=name,
                         implementation=implementation)

    @uniform_slots
    def _slot_specs(self, group):
        return (SlotSpec("accum", self._initial_accumulator_value, nonnegative=True),
                SlotSpec("linear"))

    def _native_rule(self, vars_, slots, hp, non_slot, scalar=float):
        return "ftrl", [slots["accum"], slots["linear"]], [
            scalar(hp.lr), scalar(hp.lr_power), scalar(hp.l1), scalar(hp.l2),
            scalar(hp.l2_shrinkage)]

    def _apply_dense(self, var, grad, slots, hp, non_slot) -> None:
        ftrl(var, grad, slots["accum"], slots["linear"], lr=hp.lr, lr_power=hp.lr_power,
             l1=hp.l1, l2=hp.l2, l2_shrinkage=hp.l2_shrinkage)
