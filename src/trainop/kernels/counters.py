"""An optimizer's per-step counters in one device launch (the Triton path): every param group's
step counter and its float32 products (Adam's beta powers), advanced where the update was
applied, instead of a few small torch operations per group (``Optimizer._finish_groups``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from trainop.kernels.boundary import is_plain

__all__ = ["advance"]

_F32, _I64 = torch.float32, torch.int64


def _counters(tensors: Sequence[torch.Tensor], dtype: torch.dtype, device: torch.device) -> bool:
    return all(t.dtype == dtype and t.device == device and t.dim() == 0 for t in tensors)


def advance(owner: Any, products: Sequence[torch.Tensor], factors: Sequence[float],
            steps: Sequence[torch.Tensor], found_inf: torch.Tensor | None) -> bool:
    """``products[k] *= float32(factors[k])`` (0-dim float32 tensors) and ``steps[j] += 1``
    (0-dim int64), only where ``found_inf`` (0-dim, or ``None``) is zero, in one Triton
    launch on their device; ``owner`` (the optimizer) keeps the launch's device tables.
    False (nothing done) where Triton does not run them: the caller's torch operations."""
    from trainop.kernels import triton as tk
    from trainop.kernels.triton.device import guard

    if not steps:
        return False
    device = steps[0].device
    if not (tk.supports(_F32, device) and _counters(products, _F32, device)
            and _counters(steps, _I64, device) and is_plain([*products, *steps])):
        return False
    if found_inf is not None and (found_inf.device != device or found_inf.numel() != 1):
        return False
    with guard(device), tk._family("counters") as module:
        module.RULES["advance"](owner.__dict__, products, factors, steps, found_inf)
    return True
