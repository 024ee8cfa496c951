"""``AdadeltaOptimizer``: TF1's Adadelta (TF defaults, not torch's)."""

from __future__ import annotations

from trainop.algorithms.adadelta import adadelta
from trainop.contract.optimizer import Optimizer, SlotSpec, uniform_slots
from trainop.contract.ranges import NON_NEGATIVE, UNIT_CLOSED


class AdadeltaOptimizer(Optimizer):
    r"""Adadelta, as ``tf.compat.v1.train.AdadeltaOptimizer``.

    Update rule (slots ``accum`` and ``accum_update``, zeros)::

        accum        = rho * accum + (1 - rho) * g * g
        update       = sqrt(accum_update + eps) / sqrt(accum + eps) * g
        var         -= lr * update
        accum_update = rho * accum_update + (1 - rho) * update * update

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \begin{gathered}
    a_t = \rho\,a_{t-1} + (1-\rho)\,g_t^2 \\
    \Delta_t = \frac{\sqrt{u_{t-1}+\epsilon}}{\sqrt{a_t+\epsilon}}\,g_t \\
    \theta_t = \theta_{t-1} - \eta\,\Delta_t \\
    u_t = \rho\,u_{t-1} + (1-\rho)\,\Delta_t^2
    \end{gathered}
    $$

    Sparse: only touched rows change.

    Args:
        learning_rate (float | Tensor | Callable | Policy): non-negative (torch's default: 1.0).
        rho (float | Tensor | Callable): in [0, 1], the decay of both accumulators (torch: 0.9).
        epsilon (float | Tensor | Callable): non-negative (torch: 1e-6).

    Example:
        >>> import torch, trainop
        >>> w = torch.zeros(2, requires_grad=True)
        >>> trainop.AdadeltaOptimizer(1.0).apply_gradients([(torch.ones(2), w)])

    Reference: TF 1.15 ``adadelta.py``.
    """

    _ranges = {"lr": NON_NEGATIVE, "rho": UNIT_CLOSED, "epsilon": NON_NEGATIVE}
    IMPLEMENTATIONS = ("reference", "foreach", "native")

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-8, use_locking: bool = False,
                 name: str = "Adadelta", *, params=None,
                 implementation: str | None = None) -> None:
        super().__init__(params, {"lr": learning_rate, "rho": rho, "epsilon": epsilon},
                         use_locking=use_locking, name=name,
                         implementation=implementation)

    @uniform_slots
    def _slot_specs(self, group):
        return (SlotSpec("accum", nonnegative=True),
                SlotSpec("accum_update", nonnegative=True))

    def _native_rule(self, vars_, slots, hp, non_slot, scalar=float):
        return "adadelta", [slots["accum"], slots["accum_update"]], [
            scalar(hp.lr), scalar(hp.rho), scalar(hp.epsilon)]

    def _apply_dense(self, var, grad, slots, hp, non_slot) -> None:
        adadelta(var, grad, slots["accum"], slots["accum_update"], lr=hp.lr, rho=hp.rho,
                 epsilon=hp.epsilon)
