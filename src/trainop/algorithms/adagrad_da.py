"""Adagrad Dual Averaging (TF ``ApplyAdagradDA``).

With ``t = global_step + 1`` (TF reads the step before it is incremented and adds one)::

    gradient_accumulator         += g
    gradient_squared_accumulator += g * g
    denom = l2 * t * lr + sqrt(gradient_squared_accumulator)
    var   = -lr * sign(ga) * max(|ga| - l1 * t, 0) / denom      if l1 > 0
    var   = -(ga * lr) / denom                                   otherwise

The new value of ``var`` depends only on the accumulators, not on its previous value.
At ``lr == 0`` (a schedule that reaches zero) the accumulators advance and ``var`` keeps its
value (the closed form would set it to -0), as torch's optimizers do at a zero learning rate.
"""

from __future__ import annotations

import torch


def adagrad_da(var: torch.Tensor, grad: torch.Tensor, gradient_accumulator: torch.Tensor,
               gradient_squared_accumulator: torch.Tensor, *, lr, l1, l2, step) -> None:
    """One AdagradDA update, in place; ``step`` is ``global_step + 1`` in ``var``'s dtype."""
    gradient_accumulator.add_(grad)
    gradient_squared_accumulator.add_(grad * grad)
    if not isinstance(lr, torch.Tensor) and lr == 0:
        return
    denom = gradient_squared_accumulator.sqrt() + l2 * step * lr
    if l1 > 0:
        shrunk = (gradient_accumulator.abs() - l1 * step).clamp_(min=0)
        new = gradient_accumulator.sign() * shrunk * (-lr) / denom
    else:
        new = gradient_accumulator * lr * -1.0 / denom
    var.copy_(torch.where(lr == 0, var, new) if isinstance(lr, torch.Tensor) else new)
