"""Recognising a checkpoint of another format before it is read as trainop's.

A ``torch.optim`` optimizer's ``state_dict`` has torch's per-parameter state (``exp_avg``,
``exp_avg_sq``, ``momentum_buffer``, a per-parameter ``step``, ...) and torch's group keys
(``betas``, ``amsgrad``, ``momentum``/``dampening``, ``foreach``, ``maximize``, ...), and no
``non_slot`` counters. Loaded as it is into a trainop optimizer it would either fail at the
next step or, worse, load (a never-stepped ``torch.optim.Adam``) and leave torch's keys in the
groups, unused. ``check_not_foreign`` rejects it with one ``ValueError`` that says what it is
and what to use: ``trainop.checkpoints.from_torch_optim`` converts one to trainop's TF-named
state, or it loads into the ``torch.optim`` class it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainop.contract.torch_style import TORCH_SPELLINGS

__all__ = ["TORCH_GROUP_KEYS", "TORCH_STATE_KEYS", "check_not_foreign"]

#: Group keys of torch.optim's optimizers that no trainop group has under torch's meaning.
TORCH_GROUP_KEYS = frozenset(TORCH_SPELLINGS) | {"lambd", "t0", "etas", "step_sizes"}
#: Per-parameter state keys of torch.optim's optimizers (never a trainop slot name).
TORCH_STATE_KEYS = frozenset({"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer",
                              "square_avg", "acc_delta", "sum", "step", "mu_product", "ax",
                              "eta", "prev", "step_size", "grad_avg"})


def _torch_marks(opt: Any, state_dict: Mapping) -> tuple[list[str], list[str]]:
    """(torch's group keys in groups without ``non_slot``, torch's state keys that are not
    slots of ``opt``)."""
    group_keys: set[str] = set()
    groups = state_dict.get("param_groups")
    groups = groups if isinstance(groups, list | tuple) else ()
    for saved, own in zip(groups, opt.param_groups, strict=False):
        if isinstance(saved, Mapping) and "non_slot" not in saved:
            group_keys.update(k for k in saved if k in TORCH_GROUP_KEYS and k not in own)
    slot_names = {s.name for g in opt.param_groups for s in opt._slot_specs(g)}
    state = state_dict.get("state")
    state_keys: set[str] = set()
    if isinstance(state, Mapping):
        for entry in state.values():
            if isinstance(entry, Mapping):
                state_keys.update(k for k in entry
                                  if k in TORCH_STATE_KEYS and k not in slot_names)
    return sorted(group_keys), sorted(state_keys)


def check_not_foreign(opt: Any, state_dict: Any) -> None:
    """Raise ``ValueError`` if ``state_dict`` is a ``torch.optim`` checkpoint (see the module
    docstring); reads only."""
    if not isinstance(state_dict, Mapping):
        return
    group_keys, state_keys = _torch_marks(opt, state_dict)
    if not group_keys and not state_keys:
        return
    marks = "; ".join(part for part in (
        f"param group keys {group_keys} and no `non_slot` counters" if group_keys else "",
        f"per-parameter state {state_keys}" if state_keys else "") if part)
    raise ValueError(
        f"Invalid optimizer checkpoint: this is a torch.optim optimizer's checkpoint ({marks}), "
        f"not one of trainop's {type(opt).__name__}; trainop keeps TF's state (slots under TF's "
        f"names, per-group `non_slot` counters such as Adam's beta powers), which torch's state "
        f"does not hold. Convert it with trainop.checkpoints.from_torch_optim(state_dict, "
        f"optimizer), or load it into the torch.optim class that saved it")
