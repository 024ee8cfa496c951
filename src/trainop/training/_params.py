"""The one reading of "the parameters to train" the training-step layer accepts."""

from __future__ import annotations

from typing import Any

import torch

from trainop.contract.overlap import check_no_duplicates
from trainop.contract.state import STEP_LIMIT
from trainop.contract.validation import describe

__all__ = ["as_parameters", "check_count_tensor"]


def as_parameters(params: Any, arg: str, *, trainable: bool = True) -> list[torch.Tensor]:
    """A module's parameters (those that require grad when ``trainable``), a tensor, or an
    iterable of tensors, as a list; ``TypeError`` naming ``arg`` for anything else, and for an
    element that is not a tensor (or, when ``trainable``, does not require grad)."""
    if isinstance(params, torch.nn.Module):
        return [p for p in params.parameters() if p.requires_grad or not trainable]
    if isinstance(params, torch.Tensor):
        params = [params]
    try:
        out = list(params)
    except TypeError:
        raise TypeError(f"Expected `{arg}` to be a torch.nn.Module, a tensor or an iterable of "
                        f"tensors, got {describe(params)}") from None
    for i, p in enumerate(out):
        if not isinstance(p, torch.Tensor) or (trainable and not p.requires_grad):
            need = "a tensor that requires grad" if trainable else "a tensor"
            raise TypeError(f"Expected {arg}[{i}] to be {need}, got {describe(p)}")
    check_no_duplicates(out, arg)
    return out


def check_count_tensor(name: str, value: Any) -> torch.Tensor:
    """A saved step counter: a 0-dim int64 tensor in [0, 2**62] (``STEP_LIMIT``: room for
    2**62 more steps before int64 would wrap)."""
    if not isinstance(value, torch.Tensor) or value.dtype != torch.int64 or value.dim() != 0 \
            or value < 0:
        raise ValueError(f"Expected `{name}` to be a 0-dim int64 tensor >= 0, got "
                         f"{describe(value)}")
    if int(value) > STEP_LIMIT:
        raise ValueError(f"Expected `{name}` <= 2**62 (the int64 counter must not wrap "
                         f"negative as training goes on), got {int(value)}")
    return value
