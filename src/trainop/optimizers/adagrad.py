"""``AdagradOptimizer``: TF1's Adagrad (accumulator starts at 0.1, no epsilon)."""

from __future__ import annotations

from trainop.algorithms.adagrad import adagrad
from trainop.contract.optimizer import Optimizer, SlotSpec, uniform_slots
from trainop.contract.ranges import NON_NEGATIVE, POSITIVE
from trainop.contract.validation import check_real
from trainop.kernels.fused import adagrad_fused


class AdagradOptimizer(Optimizer):
    r"""Adagrad, as ``tf.compat.v1.train.AdagradOptimizer``.

    Update rule (slot ``accumulator``, filled with ``initial_accumulator_value``)::

        accum += g * g
        var   -= lr * g / sqrt(accum)          # the updated accum; no epsilon

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \begin{gathered}
    a_t = a_{t-1} + g_t^2 \\
    \theta_t = \theta_{t-1} - \eta\,\frac{g_t}{\sqrt{a_t}},\qquad a_0 = 0.1
    \end{gathered}
    $$

    Sparse: only touched rows move.

    Args:
        learning_rate (float | Tensor | Callable | Policy): non-negative.
        initial_accumulator_value (float): positive, the accumulator's starting value (torch: 0).

    Example:
        >>> import torch, trainop
        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> trainop.AdagradOptimizer(3.0).apply_gradients([(torch.tensor([0.1]), w)])
        >>> round(float(w), 6)  # 1 - 3 * 0.1 / sqrt(0.11)
        0.095466

    Reference: TF 1.15 ``adagrad.py``. Differs from ``torch.optim.Adagrad`` (which starts the
    accumulator at 0 and adds ``eps=1e-10``).
    """

    _ranges = {"lr": NON_NEGATIVE}
    IMPLEMENTATIONS = ("reference", "foreach", "fused", "native")

    def __init__(self, learning_rate, initial_accumulator_value: float = 0.1,
                 use_locking: bool = False, name: str = "Adagrad", *, params=None,
                 implementation: str | None = None) -> None:
        self._initial_accumulator_value = check_real(
            "initial_accumulator_value", initial_accumulator_value, POSITIVE)
        super().__init__(params, {"lr": learning_rate}, use_locking=use_locking, name=name,
                         implementation=implementation)

    @uniform_slots
    def _slot_specs(self, group):
        return (SlotSpec("accumulator", self._initial_accumulator_value, nonnegative=True),)

    def _fused_supported(self, dtype, device, hp) -> bool:
        return (dtype in self._fused_dtypes and device.type == "cpu"
                and isinstance(hp.lr, float))

    def _apply_fused(self, vars_, grads, slots, hp, non_slot, gate) -> None:
        adagrad_fused(vars_, grads, slots["accumulator"], lr=hp.lr,
                      **gate.fused_kwargs(vars_[0].device))

    def _native_rule(self, vars_, slots, hp, non_slot, scalar=float):
        return "adagrad", [slots["accumulator"]], [scalar(hp.lr)]

    def _apply_dense(self, var, grad, slots, hp, non_slot) -> None:
        adagrad(var, grad, slots["accumulator"], lr=hp.lr)
