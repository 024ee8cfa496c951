"""FTRL-Proximal (TF ``ApplyFtrl`` / ``ApplyFtrlV2``), with ``p = learning_rate_power``::

    gs        = g + 2 * l2_shrinkage * var          (only when l2_shrinkage > 0)
    new_accum = accum + g * g                       (raw g, not gs)
    linear   += gs - (new_accum^(-p) - accum^(-p)) / lr * var
    quad      = new_accum^(-p) / lr + 2 * l2
    var       = (l1 * sign(linear) - linear) / quad   if |linear| > l1   else 0
    accum     = new_accum

``p == -0.5`` uses ``sqrt`` exactly as TF's kernel does.

At ``lr == 0`` (a schedule that reaches zero; TF's kernel rejects it) nothing changes: the
``linear`` slot's update divides by ``lr``, so there is no state to advance, and ``var`` keeps
its value as every trainop optimizer's does at a zero learning rate. A float ``lr`` of 0
returns at once; a tensor ``lr`` selects the old values on its device (no host read).
"""

from __future__ import annotations

import torch


def _power(t: torch.Tensor, lr_power) -> torch.Tensor:
    if lr_power == -0.5:
        return t.sqrt()
    return t.pow(-lr_power)


def ftrl(var: torch.Tensor, grad: torch.Tensor, accum: torch.Tensor, linear: torch.Tensor, *,
         lr, lr_power, l1, l2, l2_shrinkage) -> None:
    """One FTRL update of ``var`` and its ``accum``/``linear`` slots, in place (none at
    ``lr == 0``)."""
    if not isinstance(lr, torch.Tensor) and lr == 0:
        return
    grad_used = grad + var * (2 * l2_shrinkage) if l2_shrinkage > 0 else grad
    new_accum = accum + grad * grad
    delta = grad_used - (_power(new_accum, lr_power) - _power(accum, lr_power)) / lr * var
    keep = lr == 0 if isinstance(lr, torch.Tensor) else None
    # a float lr updates ``linear`` in place; a tensor lr keeps the old slots for the select
    new_linear = linear.add_(delta) if keep is None else linear + delta
    quadratic = _power(new_accum, lr_power) / lr + 2 * l2
    pre_shrink = (new_linear.sign() * l1 - new_linear) / quadratic
    new_var = torch.where(new_linear.abs() > l1, pre_shrink, torch.zeros_like(var))
    if keep is not None:
        linear.copy_(torch.where(keep, linear, new_linear))
        new_var = torch.where(keep, var, new_var)
        new_accum = torch.where(keep, accum, new_accum)
    var.copy_(new_var)
    accum.copy_(new_accum)
