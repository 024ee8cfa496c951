"""``ProximalGradientDescentOptimizer`` and ``ProximalAdagradOptimizer`` (TF1)."""

from __future__ import annotations

from trainop.algorithms.proximal import proximal_adagrad, proximal_gradient_descent
from trainop.contract.optimizer import Optimizer, SlotSpec, uniform_slots
from trainop.contract.ranges import NON_NEGATIVE, POSITIVE
from trainop.contract.validation import check_real

_L1L2_NAMES = {"lr": "learning_rate", "l1": "l1_regularization_strength",
               "l2": "l2_regularization_strength"}


class ProximalGradientDescentOptimizer(Optimizer):
    r"""Proximal gradient descent, as ``tf.compat.v1.train.ProximalGradientDescentOptimizer``.

    Update rule (no slots)::

        prox = var - lr * g
        var  = sign(prox) * max(|prox| - lr * l1, 0) / (1 + lr * l2)    (l1 > 0)
        var  = prox / (1 + lr * l2)                                      (l1 = 0)

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \begin{gathered}
    p_t = \theta_{t-1} - \eta\,g_t \\
    \theta_t = \frac{\operatorname{sign}(p_t)\,\max(|p_t| - \eta\lambda_1,\ 0)}{1 + \eta\lambda_2}
    \end{gathered}
    $$

    Sparse: only touched rows change. Hyperparameters are cast to the variable's dtype for every
    dtype (TF's resource-variable path; its ref path raises for float16/float64, quirk Q5).

    Args:
        learning_rate (float | Tensor | Callable | Policy): non-negative.
        l1_regularization_strength (float): non-negative.
        l2_regularization_strength (float): non-negative.

    Example:
        >>> import torch, trainop
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> opt = trainop.ProximalGradientDescentOptimizer(3.0)
        >>> opt.apply_gradients([(torch.tensor([0.1, 0.2]), w)])

    Reference: TF 1.15 ``proximal_gradient_descent.py``.
    """

    _ranges = {"lr": NON_NEGATIVE, "l1": NON_NEGATIVE, "l2": NON_NEGATIVE}
    _arg_names = _L1L2_NAMES
    IMPLEMENTATIONS = ("reference", "foreach", "native")

    def __init__(self, learning_rate, l1_regularization_strength=0.0,
                 l2_regularization_strength=0.0, use_locking: bool = False,
                 name: str = "ProximalGradientDescent", *, params=None,
                 implementation: str | None = None) -> None:
        super().__init__(params, {"lr": learning_rate, "l1": l1_regularization_strength,
                                  "l2": l2_regularization_strength},
                         use_locking=use_locking, name=name,
                         implementation=implementation)

    def _native_rule(self, vars_, slots, hp, non_slot, scalar=float):
        return "proximal_gd", [], [scalar(hp.lr), scalar(hp.l1), scalar(hp.l2)]

    def _apply_dense(self, var, grad, slots, hp, non_slot) -> None:
        proximal_gradient_descent(var, grad, lr=hp.lr, l1=hp.l1, l2=hp.l2)


class ProximalAdagradOptimizer(Optimizer):
    r"""Proximal Adagrad, as ``tf.compat.v1.train.ProximalAdagradOptimizer``.

    Update rule (slot ``accumulator``, filled with ``initial_accumulator_value``)::

        accum += g * g;   s = lr / sqrt(accum)
        prox   = var - s * g
        var    = sign(prox) * max(|prox| - s * l1, 0) / (1 + s * l2)    (l1 > 0)
        var    = prox / (1 + s * l2)                                     (l1 = 0)

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \begin{gathered}
    a_t = a_{t-1} + g_t^2,\qquad s_t = \frac{\eta}{\sqrt{a_t}} \\
    p_t = \theta_{t-1} - s_t\,g_t \\
    \theta_t = \frac{\operatorname{sign}(p_t)\,\max(|p_t| - s_t\lambda_1,\ 0)}{1 + s_t\lambda_2}
    \end{gathered}
    $$

    Sparse: only touched rows change. At ``learning_rate == 0`` (which TF's kernel rejects; a
    schedule may reach it) the accumulator advances and ``var`` keeps its value (``s = 0``).

    Args:
        learning_rate (float | Tensor | Callable | Policy): non-negative.
        initial_accumulator_value (float): positive.
        l1_regularization_strength (float): non-negative.
        l2_regularization_strength (float): non-negative.

    Example:
        >>> import torch, trainop
        >>> w = torch.zeros(2, requires_grad=True)
        >>> opt = trainop.ProximalAdagradOptimizer(3.0)
        >>> opt.apply_gradients([(torch.tensor([0.1, 0.2]), w)])

    Reference: TF 1.15 ``proximal_adagrad.py``.
    """

    _ranges = {"lr": NON_NEGATIVE, "l1": NON_NEGATIVE, "l2": NON_NEGATIVE}
    _arg_names = _L1L2_NAMES
    IMPLEMENTATIONS = ("reference", "foreach", "native")

    def __init__(self, learning_rate, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 use_locking: bool = False, name: str = "ProximalAdagrad", *,
                 params=None,
                 implementation: str | None = None) -> None:
        self._initial_accumulator_value = check_real(
            "initial_accumulator_value", initial_accumulator_value, POSITIVE)
        super().__init__(params, {"lr": learning_rate, "l1": l1_regularization_strength,
                                  "l2": l2_regularization_strength},
                         use_locking=use_locking, name=name,
                         implementation=implementation)

    @uniform_slots
    def _slot_specs(self, group):
        return (SlotSpec("accumulator", self._initial_accumulator_value, nonnegative=True),)

    def _native_rule(self, vars_, slots, hp, non_slot, scalar=float):
        return "proximal_adagrad", [slots["accumulator"]], [
            scalar(hp.lr), scalar(hp.l1), scalar(hp.l2)]

    def _apply_dense(self, var, grad, slots, hp, non_slot) -> None:
        proximal_adagrad(var, grad, slots["accumulator"], lr=hp.lr, l1=hp.l1, l2=hp.l2)
