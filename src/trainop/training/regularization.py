"""Regularizers attached to parameters, and ``get_regularization_loss``, as OpenSeq2Seq uses them.

OpenSeq2Seq configs name a regularizer for the model's weights (``"regularizer":
tf.contrib.layers.l2_regularizer, "regularizer_params": {"scale": 1e-4}``); the model adds the
sum of the regularization terms to its loss (``get_regularization_loss``), except, in mixed
precision, for float16 variables, whose regularization gradient the mixed-precision wrapper
adds in float32 through their master copies (so a tiny ``scale * w`` does not underflow).

Here a regularizer is a callable ``fn(param) -> scalar tensor`` registered on parameters with
``apply_regularization``; the registry holds parameters weakly.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch

from trainop.contract.validation import Interval, check_name, check_real, describe
from trainop.training._params import as_parameters

__all__ = ["apply_regularization", "get_regularization_loss", "get_regularizer",
           "l1_regularizer", "l2_regularizer"]

# id(param) -> (weak reference to param, regularizer); tensors compare elementwise, so they
# cannot be the keys of a WeakKeyDictionary.
_REGULARIZERS: dict[int, tuple[weakref.ref, Callable[[torch.Tensor], torch.Tensor]]] = {}


def _lookup(param: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor] | None:
    entry = _REGULARIZERS.get(id(param))
    if entry is None or entry[0]() is not param:
        return None
    return entry[1]


def _register(param: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    key = id(param)
    _REGULARIZERS[key] = (weakref.ref(param, lambda _, key=key: _REGULARIZERS.pop(key, None)),
                          fn)
_HALF = (torch.float16, torch.bfloat16)
_NON_NEGATIVE = Interval(0.0, float("inf"))


class _Scaled:
    """``scale * term(w)`` in float32: TF's ``l2_regularizer`` (``scale * sum(w²) / 2``) or
    ``l1_regularizer`` (``scale * sum(|w|)``)."""

    def __init__(self, kind: str, scale: float) -> None:
        self.kind, self.scale = kind, check_real("scale", scale, _NON_NEGATIVE)

    def __call__(self, w: torch.Tensor) -> torch.Tensor:
        w32 = w.to(torch.float32)
        term = (w32 * w32).sum() / 2 if self.kind == "l2" else w32.abs().sum()
        return term * self.scale

    def __repr__(self) -> str:
        return f"{self.kind}_regularizer(scale={self.scale:g})"


def l2_regularizer(scale: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """TF's ``tf.contrib.layers.l2_regularizer``: ``scale * sum(w**2) / 2`` (in float32).

    Example:
        >>> import torch, trainop
        >>> float(trainop.l2_regularizer(0.5)(torch.tensor([1.0, 2.0])))  # 0.5 * (1 + 4) / 2
        1.25
    """
    return _Scaled("l2", scale)


def l1_regularizer(scale: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """TF's ``tf.contrib.layers.l1_regularizer``: ``scale * sum(|w|)`` (in float32)."""
    return _Scaled("l1", scale)


def apply_regularization(params: Any, regularizer: Callable[[torch.Tensor], torch.Tensor],
                         *, weights_only: bool = True) -> list[torch.Tensor]:
    """Attach ``regularizer`` to ``params`` (a module's parameters, a tensor or a list).

    ``weights_only`` (default True, as OpenSeq2Seq applies ``regularizer`` to kernels, not
    biases or normalisation gains): only parameters with 2 or more dimensions. Returns the
    parameters it was attached to. A parameter keeps one regularizer (a new one replaces it).
    """
    if not callable(regularizer):
        raise TypeError(f"Expected `regularizer` to be callable, got {describe(regularizer)}")
    chosen = [p for p in as_parameters(params, "params", trainable=False)
              if not weights_only or p.dim() >= 2]
    for p in chosen:
        _register(p, regularizer)
    return chosen


def get_regularizer(param: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The regularizer attached to ``param``, or ``None``."""
    return _lookup(param)


def get_regularization_loss(params: Any = None, scope: str | None = None,
                            name: str = "total_regularization_loss", *,
                            mixed: bool = False) -> torch.Tensor:
    """The sum of the regularization terms of ``params`` (a module, tensors, or ``None``: every
    parameter with a regularizer), in float32 (OpenSeq2Seq's ``get_regularization_loss``).

    ``scope``: with a module, only parameters whose qualified name starts with it (TF's
    variable scope). ``mixed=True``: leave out float16/bfloat16 parameters, whose regularization
    the mixed-precision wrapper applies through their float32 masters (as OpenSeq2Seq's
    ``mp_regularizer_wrapper`` does); ``optimize_loss`` does that for you. Returns a 0-dim
    float32 zero when there is no term.
    """
    check_name(name)
    if scope is not None and not isinstance(scope, str):
        raise TypeError(f"Expected `scope` to be a str or None, got {describe(scope)}")
    if params is None:
        chosen = [p for p in (ref() for ref, _ in list(_REGULARIZERS.values()))
                  if p is not None]
    elif isinstance(params, torch.nn.Module):
        chosen = [p for n, p in params.named_parameters()
                  if scope is None or n.startswith(scope)]
    else:
        chosen = as_parameters(params, "params", trainable=False)
    total = None
    for p in chosen:
        fn = _lookup(p)
        if fn is None or (mixed and p.dtype in _HALF):
            continue
        term = fn(p).to(torch.float32)
        total = term if total is None else total + term
    if total is None:
        device = chosen[0].device if chosen else torch.device("cpu")
        return torch.zeros((), dtype=torch.float32, device=device)
    return total


def regularized(params: Iterable[torch.Tensor]) -> list[tuple[torch.Tensor, Any]]:
    """``(param, regularizer)`` for the parameters of ``params`` that have one."""
    return [(p, fn) for p in params if (fn := _lookup(p)) is not None]
