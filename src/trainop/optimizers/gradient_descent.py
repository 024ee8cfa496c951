"""``GradientDescentOptimizer``: TF1's plain SGD."""

from __future__ import annotations

from typing import Any

from trainop.algorithms.gradient_descent import gradient_descent
from trainop.contract.optimizer import Optimizer
from trainop.contract.ranges import NON_NEGATIVE
from trainop.kernels.fused import gradient_descent_fused


class GradientDescentOptimizer(Optimizer):
    r"""Gradient descent, as ``tf.compat.v1.train.GradientDescentOptimizer``.

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \theta_t = \theta_{t-1} - \eta\,g_t
    $$

    Update rule: ``var -= learning_rate * g``. Sparse: only the touched rows move (duplicate
    indices are summed). No slots.

    Args:
        learning_rate (float | Tensor | Callable | Policy): non-negative.

    Example:
        >>> import torch, trainop
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> trainop.GradientDescentOptimizer(3.0).apply_gradients([(torch.tensor([0.1, 0.1]), w)])
        >>> w.detach()
        tensor([0.7000, 1.7000])

    Reference: TF 1.15 ``tensorflow/python/training/gradient_descent.py``. Same as
    ``torch.optim.SGD`` without momentum.
    """

    _ranges = {"lr": NON_NEGATIVE}
    IMPLEMENTATIONS = ("reference", "foreach", "fused", "native")

    def __init__(self, learning_rate, use_locking: bool = False, name: str = "GradientDescent",
                 *, params=None,
                 implementation: str | None = None) -> None:
        super().__init__(params, {"lr": learning_rate}, use_locking=use_locking, name=name,
                         implementation=implementation)

    def _fused_supported(self, dtype, device, hp) -> bool:
        return (dtype in self._fused_dtypes and device.type in ("cpu", "cuda")
                and isinstance(hp.lr, float))

    def _apply_fused(self, vars_, grads, slots, hp, non_slot, gate) -> None:
        gradient_descent_fused(vars_, grads, lr=hp.lr, **gate.fused_kwargs(vars_[0].device))

    def _native_rule(self, vars_, slots, hp, non_slot, scalar=float):
        return "gradient_descent", [], [scalar(hp.lr)]

    def _apply_dense(self, var, grad, slots, hp: Any, non_slot) -> None:
        gradient_descent(var, grad, lr=hp.lr)
