"""Validation of processing checkpoints (processors, loss scalers, the pipeline, the
mixed-precision wrapper) before ``load_state_dict`` changes anything.

Every state value must be a real number or a 0-dim (or own-shaped) tensor, finite; integer
counters must hold whole numbers >= 0 (a fractional or float counter is rejected); a
``loss_scale`` must be > 0 and finite (a NaN scale would skip every later step). Errors are
``ValueError``/``TypeError`` naming the key; nothing is read into the object before all passed.

Example::

    scaler = trainop.BackoffLossScaler()
    scaler.load_state_dict({**scaler.state_dict(), "loss_scale": torch.tensor(float("nan"))})
    # ValueError: Expected `loss_scale` in checkpoint to be finite and > 0, got nan
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainop.contract.checkpoint import validate_loadable
from trainop.contract.validation import describe

__all__ = ["check_masters", "check_state_values", "validate_pipeline_state",
           "validate_wrapper_state"]

#: Counters that hold -1 for "never" (BackoffLossScaler's last overflow).
_MAY_BE_MINUS_ONE = frozenset({"last_overflow_iteration"})


def check_state_values(own: dict[str, torch.Tensor], state_dict: Any, where: str = "") -> None:
    """Raise if ``state_dict`` (keys already checked) cannot be copied into ``own`` exactly."""
    for key, tensor in own.items():
        tensor = torch.as_tensor(tensor)
        name = f"{where}{key}"
        value = state_dict[key]
        if isinstance(value, bool) or not isinstance(value, int | float | torch.Tensor):
            raise TypeError(f"Expected `{name}` in checkpoint to be a number or a tensor, got "
                            f"{describe(value)}")
        value = torch.as_tensor(value)
        if value.layout != torch.strided or value.shape != tensor.shape or value.is_complex():
            raise ValueError(f"Expected `{name}` in checkpoint to be a real tensor of shape "
                             f"{tuple(tensor.shape)}, got {describe(value)}")
        if value.dtype == torch.bool and tensor.dtype != torch.bool:
            raise TypeError(f"Expected `{name}` in checkpoint to be a number, got a bool")
        if not bool(torch.isfinite(value.double()).all()):
            raise ValueError(f"Expected `{name}` in checkpoint to be finite, got "
                             f"{value.tolist()}")
        if not tensor.is_floating_point() and tensor.dtype != torch.bool:
            as_float = value.double()
            low = -1 if key in _MAY_BE_MINUS_ONE else 0
            if not bool((as_float == as_float.round()).all()) or bool((as_float < low).any()):
                raise ValueError(f"Expected the counter `{name}` in checkpoint to be a whole "
                                 f"number >= {low}, got {value.tolist()}")
        if key == "loss_scale" and not bool((value.double() > 0).all()):
            raise ValueError(f"Expected `{name}` in checkpoint to be finite and > 0, got "
                             f"{value.tolist()}")
        if value.is_floating_point() and tensor.is_floating_point() and math.isinf(
                value.to(tensor.dtype).double().abs().max().item() if value.numel() else 0.0):
            raise ValueError(f"Expected `{name}` in checkpoint to fit {tensor.dtype}, got "
                             f"{value.tolist()}")


def check_masters(masters: list[torch.Tensor], saved: list[Any]) -> None:
    """Each saved master copy: a finite dense tensor of its master's shape and dtype."""
    for i, (master, value) in enumerate(zip(masters, saved, strict=True)):
        name = f"masters[{i}]"
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            raise TypeError(f"Expected `{name}` in checkpoint to be a dense tensor, got "
                            f"{describe(value)}")
        if value.shape != master.shape or value.dtype != master.dtype:
            raise ValueError(f"Expected `{name}` in checkpoint of shape {tuple(master.shape)} "
                             f"and dtype {master.dtype}, got shape {tuple(value.shape)} and "
                             f"dtype {value.dtype}")
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"Expected `{name}` in checkpoint to be finite, it holds NaN or inf")


def _check_processor(proc: Any, state_dict: Any, where: str) -> None:
    own = proc._state()
    if not isinstance(state_dict, dict) or set(state_dict) != set(own):
        shown = sorted(state_dict) if isinstance(state_dict, dict) else describe(state_dict)
        raise ValueError(f"Expected `{where}` in checkpoint with keys {sorted(own)}, got {shown}")
    check_state_values(own, state_dict, f"{where}.")


def validate_pipeline_state(stages: list[tuple[str, Any]], state_dict: dict[str, Any]) -> None:
    """The pipeline's counters and every stage's state, all checked before any is loaded
    (keys of ``state_dict`` and the stage names already checked)."""
    counters = {"skipped_steps": torch.zeros((), dtype=torch.int64),
                "consecutive_skips": torch.zeros((), dtype=torch.int64)}
    check_state_values(counters, state_dict)
    for stage, proc in stages:
        _check_processor(proc, state_dict["stages"][stage], f"stages[{stage!r}]")


def validate_wrapper_state(wrapper: Any, state_dict: dict[str, Any]) -> None:
    """The mixed-precision wrapper's inner optimizer checkpoint, masters and loss scaler, all
    checked before any is loaded (keys and the number of masters already checked)."""
    validate_loadable(wrapper._inner, state_dict["optimizer"])
    check_masters([m for _, m in wrapper._masters.values()], state_dict["masters"])
    _check_processor(wrapper.loss_scaler, state_dict["loss_scaler"], "loss_scaler")
