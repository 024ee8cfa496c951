"""Argument checks of the processing layer, on top of ``trainop.contract.validation``.

Numbers go through ``check_real``/``check_int``; a 0-dim tensor is accepted where TF accepts a
scalar tensor and is checked for its shape and dtype only (reading its value would be a host
synchronisation), with the message shape of ``check_hyper``.
"""

from __future__ import annotations

from typing import Any

import torch

from trainop.contract.validation import Interval, check_real, describe
from trainop.processing._checkpoint import check_state_values

POSITIVE = Interval(0.0, float("inf"), low_closed=False, high_closed=False)
NON_NEGATIVE = Interval(0.0, float("inf"), high_closed=False)
FINITE = Interval(float("-inf"), float("inf"), low_closed=False, high_closed=False)


def check_scalar(name: str, value: Any, interval: Interval | None = None) -> float | torch.Tensor:
    """A real number in ``interval`` (returned as float) or a 0-dim floating-point tensor."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or not value.is_floating_point():
            raise TypeError(
                f"Expected `{name}` to be a real number or a 0-dim floating-point tensor, got a "
                f"tensor of shape {tuple(value.shape)} and dtype {value.dtype}")
        return value.detach()
    return check_real(name, value, interval)


def check_tensor(name: str, value: Any) -> torch.Tensor:
    """A dense or sparse COO tensor."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"Expected `{name}` to be a torch.Tensor, got {describe(value)}")
    if value.layout not in (torch.strided, torch.sparse_coo):
        raise TypeError(f"Expected `{name}` to be a dense or sparse COO tensor, got layout "
                        f"{value.layout}")
    return value


def check_name_or_none(value: Any) -> None:
    """TF's optional op ``name``: None or a string (no effect in trainop)."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"Expected `name` to be None or a string, got {describe(value)}")


def check_keys(name: str, given: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    """A dict or None whose keys are all in ``allowed`` (OpenSeq2Seq's strict check)."""
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise TypeError(f"Expected `{name}` to be a dict or None, got {describe(given)}")
    unknown = sorted(str(k) for k in given if k not in allowed)
    if unknown:
        raise ValueError(f"Expected the keys of `{name}` to be among {list(allowed)}, got "
                         f"unknown keys {unknown}")
    return dict(given)


def check_state_keys(state_dict: Any, keys: Any) -> None:
    """A ``state_dict`` argument must be a dict with exactly ``keys``."""
    if not isinstance(state_dict, dict) or set(state_dict) != set(keys):
        shown = sorted(state_dict) if isinstance(state_dict, dict) else describe(state_dict)
        raise ValueError(f"Expected `state_dict` with keys {sorted(keys)}, got {shown}")


def load_state(own: dict[str, torch.Tensor], state_dict: Any) -> None:
    """Copy ``state_dict`` into the state tensors ``own``; the keys must match exactly."""
    check_state_keys(state_dict, own)
    check_state_values(own, state_dict)
    for key, tensor in own.items():
        tensor.copy_(torch.as_tensor(state_dict[key]).to(tensor.device))


def show_scalar(name: str, value: float | torch.Tensor) -> str:
    """``name=value`` for a repr (a tensor is not read)."""
    return f"{name}={value!r}" if isinstance(value, float) else f"{name}=<tensor>"
