"""Hyperparameter values as TensorFlow 1 sees them inside an update.

TF turns a Python-float hyperparameter into a float32 tensor in ``_prepare`` and casts it to the
variable's dtype inside the kernel. So a float64 variable sees ``float64(float32(0.001))``, and a
float16 variable sees the float16-rounded value (``epsilon=1e-8`` becomes 0). Tensors are cast to
the variable's dtype; callables are called once per ``apply_gradients``; a learning-rate policy
(``trainop.schedules.Policy``) is evaluated at the group's applied-step counter.
"""

from __future__ import annotations

import math
import numbers
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from trainop.contract.validation import check_hyper_tensor, describe

__all__ = ["Prepared", "evaluate_hyper", "is_policy", "plain_snapshot", "tf_round"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)
_PLAIN = frozenset({float, int, bool, str, type(None)})


def tf_round(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded as TF rounds a Python float hyperparameter for a ``dtype`` variable."""
    value32 = float(np.float32(value))
    if dtype in _LOW_PRECISION:
        return float(torch.tensor(value32, dtype=torch.float32).to(dtype))
    return value32


def is_policy(value: Any) -> bool:
    """Whether ``value`` is a ``trainop.schedules.Policy``."""
    try:
        from trainop.schedules import Policy
    except ImportError:  # pragma: no cover - schedules is part of the package
        return False
    return isinstance(value, Policy)


def evaluate_hyper(name: str, value: Any, step: torch.Tensor) -> float | torch.Tensor:
    """The current value of one hyperparameter: a float or a 0-dim floating tensor.

    Callables are called (with no argument), policies are called with ``step``. The result must be
    a real number or a 1-element floating-point tensor (read as a 0-dim view, so a value
    changed in place is seen), else ``TypeError`` naming the hyperparameter (``ValueError`` for
    a tensor of several elements).
    """
    if is_policy(value):
        value = value(step)
    elif callable(value) and not isinstance(value, torch.Tensor | numbers.Real):
        value = value()
    if isinstance(value, torch.Tensor):
        if value.dim() == 0 and value.is_floating_point():
            return value.detach()
        check_hyper_tensor(name, value)
        return value.detach().reshape(())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise TypeError(
        f"Expected `{name}` to evaluate to a real number or a 1-element floating-point tensor, "
        f"got {describe(value)}"
    )


class Prepared:
    """The hyperparameters of one param group for one ``apply_gradients`` call.

    ``for_tensor(var)`` gives a namespace whose attributes are what the update rule uses for a
    variable of that dtype and device: Python floats rounded like TF (``tf_round``), or 0-dim
    tensors cast to the variable's dtype and device. Keys listed in ``exact`` are not rounded to
    float32 first (TF uses them as given, e.g. contrib's decoupled ``weight_decay``).
    """

    def __init__(self, values: dict[str, Any], exact: tuple[str, ...] = ()) -> None:
        self.values = values
        self.exact = exact
        #: Whether a value is a tensor (the step's range guard has work only then).
        self.has_tensors = any(isinstance(v, torch.Tensor) for v in values.values())
        self._cache: dict[tuple[torch.dtype, torch.device], SimpleNamespace] = {}

    def for_tensor(self, var: torch.Tensor) -> SimpleNamespace:
        key = (var.dtype, var.device)
        cached = self._cache.get(key)
        if cached is None:
            cached = SimpleNamespace(**{k: self._cast(k, v, var) for k, v in self.values.items()})
            self._cache[key] = cached
        return cached

    def _cast(self, key: str, value: Any, var: torch.Tensor) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(device=var.device, dtype=var.dtype)
        if isinstance(value, float) and math.isfinite(value) and key not in self.exact:
            return tf_round(value, var.dtype)
        return value


def plain_snapshot(values: dict[str, Any], skip: tuple[str, ...]) -> tuple | None:
    """The hyperparameters of a group (keys not in ``skip``) as a comparable tuple, or ``None``
    when one is not a plain value (a tensor, which may change in place, a callable or a
    policy: those are evaluated at every step). Floats are compared by their bits
    (``float.hex``: ``-0.0`` differs from ``0.0``, and a NaN equals itself)."""
    out = []
    for key, value in values.items():
        if key in skip:
            continue
        kind = type(value)
        if kind not in _PLAIN:
            return None
        out.append((key, kind, value.hex() if kind is float else value))
    return tuple(out)
