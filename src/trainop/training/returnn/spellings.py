"""RETURNN's spellings of Updater options and what each backend makes of them.

The same config means the same thing in RETURNN and in ``trainop.Updater``; where RETURNN's two
backends differ, ``backend`` picks one (``docs/updater.md``):

- ``backend``: ``"tf"`` or RETURNN's ``"tensorflow"``/``"tensorflow-net-dict"`` (the TF
  updater's semantics), ``"torch"`` (the torch updater's);
- ``log_grad_norm``: torch takes any p > 0 (``True`` is 2, ``float("inf")`` the max norm) and
  logs the norm of the accumulated gradients; tf takes p = 2 only (RETURNN's TF updater raises
  otherwise) and logs the micro-step's raw norm;
- ``accum_grad_multiple_step``: an int ``N``; torch also takes a callable
  ``fn(epoch=, epoch_continuous=, global_train_step=, **kwargs) -> N`` evaluated every
  micro-step (RETURNN's torch engine); tf reads an int;
- ``optimizer``: a dict with ``"class"``; torch also takes an optimizer instance (used as it
  is) or a class/callable (``{"class": it}``), as RETURNN's torch updater; tf takes the dict.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainop.contract.validation import describe

__all__ = ["BACKENDS", "DYNAMIC_LR_CONVENTIONS", "accum_steps", "check_accum_value",
           "check_instance_params", "log_grad_norm_p", "optimizer_instance"]

#: RETURNN's backend names -> the Updater's semantics.
BACKENDS = {"tf": "tf", "tensorflow": "tf", "tensorflow-net-dict": "tf", "torch": "torch"}

#: backend -> (the argument a ``dynamic_learning_rate`` may not take, RETURNN's reason, what it
#: gets instead).
DYNAMIC_LR_CONVENTIONS = {
    "torch": ("network", "RETURNN's torch backend: 'network is TF specific'",
              "global_train_step, epoch, epoch_continuous and learning_rate as host numbers"),
    "tf": ("epoch", "RETURNN's TF updater: 'dynamic_learning_rate with epoch not supported'",
           "network, global_train_step and learning_rate as tensors (backend='torch' passes "
           "the epoch)"),
}


def log_grad_norm_p(value: Any, torch_backend: bool) -> float | None:
    """The p of ``log_grad_norm`` (``None``: off); RETURNN's parsing of each backend."""
    if isinstance(value, str):
        if value.lower() not in ("true", "false", "none"):
            raise ValueError(f"Expected `log_grad_norm` to be a bool, a number p > 0 or one of "
                             f"['true', 'false', 'none'], got {value!r}")
        value = value.lower() == "true"
    if value is None or value is False or (value == 0 and not torch_backend):
        return None
    if value is True:
        return 2
    if not isinstance(value, (int, float)) or math.isnan(value) or value <= 0:
        raise ValueError(f"Expected `log_grad_norm` to be a bool, a number p > 0 or one of "
                         f"['true', 'false', 'none'], got {value!r}")
    if not torch_backend and value != 2:
        raise ValueError(f"Expected `log_grad_norm` to be one of [False, True, 2, 'true', "
                         f"'false', 'none'] with backend='tf' (RETURNN's TF updater logs the "
                         f"2-norm only; backend='torch' takes any p > 0), got {value!r}")
    return value


def check_accum_value(value: Any) -> int:
    """An ``accum_grad_multiple_step`` value: an int >= 0 (0 and 1: no accumulation)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"Expected `accum_grad_multiple_step` to be an int >= 0, got "
                         f"{describe(value)}")
    return value


def accum_steps(value: Any, torch_backend: bool) -> Any:
    """``accum_grad_multiple_step``: an int (False: 0; None: 0 with backend tf, as RETURNN's TF
    updater reads it), or with backend torch a callable (RETURNN's torch engine calls it every
    micro-step)."""
    if value is None and torch_backend:
        raise TypeError("Expected `accum_grad_multiple_step` to be an int >= 0 or a callable "
                        "with backend='torch', got None (RETURNN's torch engine reads it with "
                        "Config.int, which keeps the None, and fails comparing with it)")
    if value is None or value is False:
        return 0
    if callable(value):
        if not torch_backend:
            raise ValueError("Expected `accum_grad_multiple_step` to be an int with "
                             "backend='tf' (RETURNN's TF updater reads an int; a callable is "
                             f"RETURNN's torch engine's), got {describe(value)}")
        return value
    return check_accum_value(value)


def optimizer_instance(options: dict[str, Any], torch_backend: bool
                       ) -> torch.optim.Optimizer | None:
    """RETURNN torch's other ``optimizer`` forms: an instance is returned (and ``optimizer``
    becomes ``{"class": its class}`` for the checks); a class or callable becomes
    ``{"class": it}``. ``options`` is changed in place; tf refuses both."""
    value = options["optimizer"]
    if isinstance(value, dict) or value is None or isinstance(value, str):
        return None
    instance = isinstance(value, torch.optim.Optimizer)
    if not (instance or callable(value)):
        return None
    if not torch_backend:
        what = f"an instance of {type(value).__name__}" if instance else describe(value)
        raise ValueError(f"Expected `optimizer` to be a dict with a 'class' key with "
                         f"backend='tf' (RETURNN's TF updater builds the optimizer from it), "
                         f"got {what}; an optimizer instance or a bare class is RETURNN's "
                         f"torch backend's")
    options["optimizer"] = {"class": type(value) if instance else value}
    return value if instance else None


def check_instance_params(instance: torch.optim.Optimizer, params: list[torch.Tensor]) -> None:
    """An ``optimizer`` instance updates parameters of the model only."""
    wanted = {id(p) for p in params}
    foreign = [tuple(p.shape) for g in instance.param_groups for p in g["params"]
               if id(p) not in wanted]
    if foreign:
        raise ValueError(f"Expected the `optimizer` instance to hold trainable parameters of "
                         f"the model only, got {len(foreign)} others (shapes {foreign[:4]})")
