"""``AdagradDAOptimizer``: TF1's Adagrad Dual Averaging."""

from __future__ import annotations

from typing import Any

import torch

from trainop.algorithms.adagrad_da import adagrad_da
from trainop.contract.optimizer import Optimizer, SlotSpec, uniform_slots
from trainop.contract.ranges import NON_NEGATIVE, POSITIVE
from trainop.contract.validation import check_real, describe


class AdagradDAOptimizer(Optimizer):
    r"""Adagrad Dual Averaging, as ``tf.compat.v1.train.AdagradDAOptimizer``.

    Update rule, with ``t = global_step + 1`` read before this update's increment (slots
    ``gradient_accumulator``, zeros, and ``gradient_squared_accumulator``, filled with
    ``initial_gradient_squared_accumulator_value``)::

        ga  += g;   gga += g * g
        var  = -lr * sign(ga) * max(|ga| - l1 * t, 0) / (l2 * t * lr + sqrt(gga))   (l1 > 0)
        var  = -lr * ga / (l2 * t * lr + sqrt(gga))                                  (l1 = 0)

    As math (\(\eta\): the learning rate, \(g_t\): the gradient, \(\theta\): the variable):

    $$
    \begin{gathered}
    G_t = G_{t-1} + g_t,\qquad S_t = S_{t-1} + g_t^2 \\
    \theta_t = -\eta\,\frac{\operatorname{sign}(G_t)\,\max(|G_t| - \lambda_1 t,\ 0)}
    {\lambda_2\,t\,\eta + \sqrt{S_t}}
    \end{gathered}
    $$

    Sparse: only touched rows change. At ``learning_rate == 0`` the accumulators advance and
    ``var`` keeps its value (TF's closed form would set it to -0).

    Args:
        learning_rate (float | Tensor | Callable | Policy): non-negative.
        global_step (Tensor | None): the 0-dim integer tensor that
            ``apply_gradients(global_step=...)`` increments (as in TF). ``None`` uses this
            optimizer's own count of applied updates, which is the same number when the step starts
            at 0 (handy in torch style).
        initial_gradient_squared_accumulator_value (float): positive.
        l1_regularization_strength (float): non-negative.
        l2_regularization_strength (float): non-negative.

    Example:
        >>> import torch, trainop
        >>> w = torch.tensor([1.0], requires_grad=True)
        >>> opt = trainop.AdagradDAOptimizer(3.0, global_step=None)
        >>> opt.apply_gradients([(torch.tensor([0.1]), w)])
        >>> round(float(w), 6)  # -3 * 0.1 / sqrt(0.11)
        -0.904534

    Reference: TF 1.15 ``adagrad_da.py`` and the ``ApplyAdagradDA`` kernel.
    """

    _ranges = {"lr": NON_NEGATIVE, "l1": NON_NEGATIVE, "l2": NON_NEGATIVE}
    IMPLEMENTATIONS = ("reference", "foreach", "native")
    _arg_names = {"lr": "learning_rate", "l1": "l1_regularization_strength",
                  "l2": "l2_regularization_strength"}

    def __init__(self, learning_rate, global_step: torch.Tensor | None,
                 initial_gradient_squared_accumulator_value: float = 0.1,
                 l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0, use_locking: bool = False,
                 name: str = "AdagradDA", *, params=None,
                 implementation: str | None = None) -> None:
        if global_step is not None and (
                not isinstance(global_step, torch.Tensor) or global_step.dim() != 0
                or global_step.is_floating_point() or global_step.dtype == torch.bool):
            raise TypeError("Expected `global_step` to be None or a 0-dim integer tensor, "
                            f"got {describe(global_step)}")
        self._initial_gga = check_real("initial_gradient_squared_accumulator_value",
                                       initial_gradient_squared_accumulator_value, POSITIVE)
        self._global_step = global_step
        super().__init__(params, {"lr": learning_rate, "l1": l1_regularization_strength,
                                  "l2": l2_regularization_strength},
                         use_locking=use_locking, name=name,
                         implementation=implementation)

    @uniform_slots
    def _slot_specs(self, group):
        return (SlotSpec("gradient_accumulator"),
                SlotSpec("gradient_squared_accumulator", self._initial_gga,
                         nonnegative=True))

    def _step(self, non_slot) -> torch.Tensor:
        return non_slot["step"] if self._global_step is None else self._global_step

    def _native_rule(self, vars_, slots, hp, non_slot):
        t = float((self._step(non_slot).cpu() + 1).to(vars_[0].dtype))
        return "adagrad_da", [slots["gradient_accumulator"],
                              slots["gradient_squared_accumulator"]], [
            float(hp.lr), float(hp.l1), float(hp.l2), t]

    def _triton_rule(self, vars_, slots, hp, non_slot):
        t = (self._step(non_slot).to(vars_[0].device) + 1).to(vars_[0].dtype)  # on the device
        return "adagrad_da", [slots["gradient_accumulator"],
                              slots["gradient_squared_accumulator"]], [hp.lr, hp.l1, hp.l2, t]

    def _apply_dense(self, var, grad, slots, hp: Any, non_slot) -> None:
        t = (self._step(non_slot).to(device=var.device) + 1).to(var.dtype)
        adagrad_da(var, grad, slots["gradient_accumulator"],
                   slots["gradient_squared_accumulator"], lr=hp.lr, l1=hp.l1, l2=hp.l2, step=t)
