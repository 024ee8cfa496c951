"""One helper for every argument check in trainop.

Every user-facing check goes through these functions so that all errors share one shape:

- a wrong *type* raises ``TypeError("Expected `beta1` to be a real number, got 'a' (str)")``;
- a wrong *value* raises ``ValueError("Expected `beta1` in [0, 1), got 1.5")``.

The functions only read their arguments; callers run every check before mutating anything,
so a call that raises leaves the optimizer (params, slots, counters) exactly as it was.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Callable
from typing import Any

import torch

__all__ = [
    "FLOAT32_MAX",
    "Interval",
    "check_bool",
    "check_choice",
    "check_hyper",
    "check_hyper_tensor",
    "check_int",
    "check_name",
    "check_real",
    "describe",
]


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 4, 90, 90, 90
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = _SHORT.maxfrozenset = _SHORT.maxdict = 30


def describe(value: Any) -> str:
    """A short ``repr`` of ``value`` with its type, for error messages (``reprlib``: a large
    value is never formatted whole)."""
    text = repr(value[:100]) if type(value) is str else _SHORT.repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


class Interval:
    """A real interval such as ``[0, 1)`` used to check and describe a hyperparameter range."""

    def __init__(
        self,
        low: float = -math.inf,
        high: float = math.inf,
        *,
        low_closed: bool = True,
        high_closed: bool = True,
    ) -> None:
        self.low = low
        self.high = high
        self.low_closed = low_closed and math.isfinite(low)
        self.high_closed = high_closed and math.isfinite(high)

    def __contains__(self, x: float) -> bool:
        if math.isnan(x):
            return False
        above = x >= self.low if self.low_closed else x > self.low
        below = x <= self.high if self.high_closed else x < self.high
        return above and below

    def __str__(self) -> str:
        def fmt(v: float) -> str:
            if math.isinf(v):
                return "inf" if v > 0 else "-inf"
            return f"{v:g}"

        left = "[" if self.low_closed else "("
        right = "]" if self.high_closed else ")"
        return f"{left}{fmt(self.low)}, {fmt(self.high)}{right}"


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


#: The largest finite float32: a larger finite hyperparameter would become inf in float32.
FLOAT32_MAX = 3.4028234663852886e38


def outside(value: torch.Tensor, interval: Interval) -> torch.Tensor:
    """A 0-dim bool tensor: True where the 0-dim ``value`` is NaN or outside ``interval``
    (computed on its device, nothing read on the host)."""
    value = value.detach()
    bad = torch.isnan(value)
    if math.isfinite(interval.low) or not interval.low_closed:
        bad = bad | ((value < interval.low) if interval.low_closed else (value <= interval.low))
    if math.isfinite(interval.high) or not interval.high_closed:
        bad = bad | ((value > interval.high) if interval.high_closed
                     else (value >= interval.high))
    return bad


def check_real(name: str, value: Any, interval: Interval | None = None) -> float:
    """Check that ``value`` is a real number (not a bool) in ``interval``; return it as float."""
    if not _is_real(value):
        raise TypeError(f"Expected `{name}` to be a real number, got {describe(value)}")
    value = float(value)
    if interval is not None and value not in interval:
        raise ValueError(f"Expected `{name}` in {interval}, got {value!r}")
    if interval is None and math.isnan(value):
        raise ValueError(f"Expected `{name}` to be a number, got nan")
    if math.isfinite(value) and abs(value) > FLOAT32_MAX:
        raise ValueError(f"Expected `{name}` in {interval or 'the real numbers'} and within "
                         f"float32's finite range (|x| <= {FLOAT32_MAX!r}: trainop's "
                         f"arithmetic rounds it to float32), got {value!r}")
    return value


def check_int(name: str, value: Any, interval: Interval | None = None) -> int:
    """Check that ``value`` is an integer (not a bool) inside ``interval``; return it as int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"Expected `{name}` to be an integer, got {describe(value)}")
    value = int(value)
    if interval is not None and value not in interval:
        raise ValueError(f"Expected `{name}` in {interval}, got {value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Check that ``value`` is a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"Expected `{name}` to be a bool, got {describe(value)}")
    return value


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """Check that ``value`` is one of the strings in ``choices``."""
    if not isinstance(value, str):
        raise TypeError(f"Expected `{name}` to be one of {list(choices)}, got {describe(value)}")
    if value not in choices:
        raise ValueError(f"Expected `{name}` to be one of {list(choices)}, got {value!r}")
    return value


def check_name(value: Any, arg: str = "name") -> str:
    """TF's optimizer-name rule: a non-empty string ("Must specify the optimizer name")."""
    if value is None or (isinstance(value, str) and not value):
        raise ValueError(f"Must specify the optimizer name: expected `{arg}` to be a non-empty "
                         f"string, got {value!r}")
    if not isinstance(value, str):
        raise TypeError(f"Expected `{arg}` to be a non-empty string, got {describe(value)}")
    return value


def check_hyper(name: str, value: Any, interval: Interval | None = None) -> Any:
    """Check a hyperparameter that may be a real number, a 1-element float tensor or a callable.

    Real numbers and tensors are range-checked now (a tensor is read once, at construction);
    a callable (or a learning-rate policy) is checked for callability only, since its value is
    only known when a step runs. A tensor may have any shape with one element (``(1,)`` and
    ``(1, 1)`` too, as torch accepts); it is kept as given and read as a 0-dim view.
    """
    if isinstance(value, torch.Tensor):
        check_hyper_tensor(name, value)
        check_real(name, float(value), interval)
        return value
    if callable(value) and not _is_real(value):
        return value
    return check_real(name, value, interval)


def check_hyper_tensor(name: str, value: torch.Tensor) -> None:
    """A tensor hyperparameter is floating point (else ``TypeError``) with exactly one element
    (else ``ValueError``, as torch raises for ``lr=tensor([a, b])``)."""
    if not value.is_floating_point():
        raise TypeError(f"Expected `{name}` to be a floating-point tensor, got a tensor of "
                        f"shape {tuple(value.shape)} and dtype {value.dtype}")
    if value.numel() != 1:
        torch_name = "lr" if name == "learning_rate" else name  # torch's words come first
        raise ValueError(f"Tensor {torch_name} must be 1-element: expected `{name}` to be a "
                         f"1-element tensor (a 0-dim one, or of shape (1,) or (1, 1)), got a "
                         f"tensor of shape {tuple(value.shape)}")


def check_callable_or_none(name: str, value: Callable | None) -> Callable | None:
    """Check that ``value`` is ``None`` or callable."""
    if value is not None and not callable(value):
        raise TypeError(f"Expected `{name}` to be callable or None, got {describe(value)}")
    return value
