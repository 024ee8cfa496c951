"""The Updater's optimizer checked whole when the Updater is built (it is built lazily, at the
first step): unknown options with the closest valid one, then every value as the class's
constructor checks it, on a stand-in parameter of the model's dtype and device (a trainop
class; a ``torch.optim`` class's names are checked by ``torch_classes``)."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from trainop.configs import check_keys
from trainop.contract.torch_style import TORCH_SPELLINGS

__all__ = ["check_optimizer"]


def check_optimizer(spec: tuple[type, dict[str, Any], float, dict[str, Any] | None],
                    like: torch.Tensor | None) -> None:
    """``ValueError``/``TypeError`` for what the optimizer of ``spec`` (``optimizer_spec``'s
    result) would refuse at the first step; nothing is kept."""
    cls, kwargs, _, group_options = spec
    if group_options is not None:  # a torch.optim class: torch_classes checked the names;
        return  # building one imports torch._dynamo, left to the first step
    taken = inspect.signature(cls.__init__).parameters
    probe = torch.nn.Parameter(torch.zeros(1) if like is None else
                               torch.zeros(1, dtype=like.dtype, device=like.device))
    if not any(p.kind is p.VAR_KEYWORD for p in taken.values()):
        valid = [name for name in taken if name not in ("self", "params", "learning_rate", "lr")]
        check_keys({k: v for k, v in kwargs.items() if k not in TORCH_SPELLINGS}, valid,
                   f"`optimizer` ({cls.__name__})")
    cls(learning_rate=0.1, params=[probe], **kwargs)
