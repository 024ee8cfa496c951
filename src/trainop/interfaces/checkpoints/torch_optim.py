"""``from_torch_optim`` / ``to_torch_optim``: move a running experiment between
``torch.optim`` and trainop, moments included (the pairs and what differs: ``torch_rules``).

Parameters are matched by position (group by group, as ``load_state_dict`` does) and must
have the same shapes. From torch: each parameter's state maps to trainop's slots, torch's
per-parameter ``step`` becomes the group's step count, and for Adam the beta powers become
``beta^step`` as TF and trainop hold them (float32, multiplied step by step). The new
``state_dict`` goes through the optimizer's own ``load_state_dict`` (validated before
anything changes). To torch: the same maps reversed, ``step`` from the group's count, loaded
with the torch optimizer's ``load_state_dict``. Both return the notes of ``torch_rules`` that
apply (where the update rules differ), so they are stated, not hidden.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from trainop.contract.state import STEP_LIMIT
from trainop.contract.validation import describe
from trainop.interfaces.checkpoints.torch_rules import Rule, rule_for

__all__ = ["from_torch_optim", "to_torch_optim"]


def _torch_state_dict(value: Any) -> dict:
    if isinstance(value, torch.optim.Optimizer):
        return value.state_dict()
    if isinstance(value, Mapping) and "state" in value and "param_groups" in value:
        return dict(value)
    raise TypeError(f"Expected `torch_optimizer_or_state_dict` to be a torch.optim optimizer or "
                    f"its state_dict, got {describe(value)}")


def _check_groups(rule: Rule, torch_groups: list, optimizer: Any, torch_name: str) -> None:
    own = optimizer.param_groups
    if len(torch_groups) != len(own) or any(
            len(t["params"]) != len(o["params"]) for t, o in zip(torch_groups, own, strict=True)):
        raise ValueError(f"Expected the torch optimizer to have the trainop optimizer's groups "
                         f"({[len(g['params']) for g in own]} parameters), got "
                         f"{[len(g['params']) for g in torch_groups]}")
    for gi, group in enumerate(torch_groups):
        for option, allowed in rule.refused.items():
            if option in group and group[option] != allowed and group[option] is not None:
                raise ValueError(f"Cannot map torch.optim.{rule.torch_name} with {option}="
                                 f"{group[option]!r} (group {gi}) to "
                                 f"{type(optimizer).__name__}: TF's rule has no counterpart "
                                 f"(only {option}={allowed!r} maps)")
        for option in rule.foreign:
            if option in group:
                raise ValueError(f"Cannot map group {gi} to {type(optimizer).__name__}: its "
                                 f"option {option!r} belongs to another torch optimizer (a "
                                 f"NAdam state_dict?), not torch.optim.{rule.torch_name}")
        _check_agree(rule, group, own[gi], gi)
        if rule.torch_name == "SGD" and not group.get("momentum", 0) > 0:
            raise ValueError(f"Cannot map torch.optim.SGD with momentum={group.get('momentum')} "
                             f"(group {gi}) to MomentumOptimizer: it keeps no momentum buffer")
    if torch_name and torch_name != rule.torch_name and not (
            rule.torch_name == "AdamW" and torch_name == "Adam"):
        raise TypeError(f"Expected a torch.optim.{rule.torch_name} for "
                        f"{type(optimizer).__name__}, got torch.optim.{torch_name}")


def _plain(value: Any) -> float | None:
    """A hyperparameter as a number, or None for one that is not a plain value (a schedule)."""
    if isinstance(value, bool | int | float):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    return None


def _check_agree(rule: Rule, tgroup: dict, group: dict, gi: int) -> None:
    for option, index, own in rule.agree:
        if option not in tgroup or own not in group:
            continue
        theirs = tgroup[option] if index is None else tgroup[option][index]
        mine = _plain(group[own])
        if mine is not None and _plain(theirs) != mine:
            where = option if index is None else f"{option}[{index}]"
            raise ValueError(f"Cannot map torch.optim.{rule.torch_name} with {where}={theirs!r} "
                             f"(group {gi}): the trainop optimizer has {own}={group[own]!r}; "
                             f"the state depends on it (build either with the other's value)")


#: Up to this step the beta powers are TF's float32 product, one multiplication per step;
#: beyond it, ``beta ** step`` in float64 rounded to float32 (no loop; the two differ by
#: about ``step * 2**-24`` relative, torch's own bias correction being float64's).
EXACT_POWER_STEPS = 1 << 16


def _power(beta: float, step: int) -> torch.Tensor:
    """``beta^step`` as TF accumulates it (see ``EXACT_POWER_STEPS``)."""
    factor = np.float32(beta)
    if step > EXACT_POWER_STEPS:
        return torch.tensor(float(factor) ** step, dtype=torch.float32)
    value = np.float32(1.0)
    for _ in range(step):
        value = np.float32(value * factor)
    return torch.tensor(value, dtype=torch.float32)


def _step_of(entry: dict, gi: int) -> int:
    raw = entry["step"]
    try:
        value = float(raw)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"Expected the torch state's `step` (group {gi}) to be a number, got "
                        f"{describe(raw)}") from None
    if not (math.isfinite(value) and value == int(value) and 0 <= value <= STEP_LIMIT):
        raise ValueError(f"Expected the torch state's `step` (group {gi}) to be a whole number "
                         f"in [0, 2**62], got {value!r}")
    return int(value)


def _group_step(entries: list[dict], gi: int) -> int | None:
    steps = {_step_of(e, gi) for e in entries if "step" in e}
    if len(steps) > 1:
        raise ValueError(f"Cannot map group {gi}: its parameters are at different steps "
                         f"{sorted(steps)} (torch counts per parameter; trainop and TF keep one "
                         f"count per group)")
    return steps.pop() if steps else None


def from_torch_optim(torch_optimizer_or_state_dict: Any, optimizer: Any) -> list[str]:
    """Load a ``torch.optim`` optimizer's state (or its ``state_dict``) into the trainop
    ``optimizer`` over the same parameters, so the run continues with the moments it had.

    The pairs (``docs/checkpoints.md``): Adam/AdamW ``exp_avg``, ``exp_avg_sq``, ``step`` ->
    ``m``, ``v`` and the float32 beta powers ``beta ** step``; SGD's ``momentum_buffer`` ->
    Momentum's accumulator (``accum = momentum * accum + g``, as torch's with dampening 0);
    RMSprop's ``square_avg`` (and ``grad_avg`` when centered, ``momentum_buffer``); Adagrad's
    ``sum``. Refused with a ``ValueError`` naming the option: ``amsgrad``, dampening, coupled
    weight decay, ``lr_decay``, ``maximize``, parameters at different steps in one group.
    Everything is checked before the optimizer changes (its own ``load_state_dict``).

    Returns:
        notes on what maps but differs (torch's epsilon outside the square root where TF's is
        inside, RMSprop's momentum buffer holding ``lr`` times TF's, AdamW's decay meaning).

    Example::

        notes = trainop.checkpoints.from_torch_optim(torch_adam, trainop.AdamOptimizer(
            model.parameters(), lr=1e-3))
    """
    rule = rule_for(optimizer)
    torch_name = (type(torch_optimizer_or_state_dict).__name__
                  if isinstance(torch_optimizer_or_state_dict, torch.optim.Optimizer) else "")
    source = _torch_state_dict(torch_optimizer_or_state_dict)
    _check_groups(rule, source["param_groups"], optimizer, torch_name)
    if torch_name:
        _check_shapes(torch_optimizer_or_state_dict, optimizer)
    _check_ids(source)
    sd = optimizer.state_dict()
    sd["param_groups"] = [dict(g) for g in sd["param_groups"]]
    state = dict(sd["state"])
    index = 0
    for gi, (tgroup, group) in enumerate(zip(source["param_groups"], optimizer.param_groups,
                                             strict=True)):
        entries = []
        for tid, param in zip(tgroup["params"], group["params"], strict=True):
            entry = source["state"].get(tid)
            if entry:
                missing = [k for k in rule.keys(tgroup) if k not in entry]
                if missing:
                    raise ValueError(f"Expected the torch state of parameter {index} to hold "
                                     f"{list(rule.keys(tgroup))}, it lacks {missing}")
                extra = sorted(set(entry) - set(rule.keys(tgroup)) - {"step"})
                if extra:
                    raise ValueError(f"Expected the torch state of parameter {index} to hold "
                                     f"{list(rule.keys(tgroup))} (torch.optim."
                                     f"{rule.torch_name}), it also holds {extra}: another "
                                     f"optimizer's state (NAdam's mu_product?)")
                slots = {k: v.detach().to(device=param.device, dtype=param.dtype).clone()
                         for k, v in rule.to_trainop(entry, tgroup).items()}
                for k, v in slots.items():
                    if v.shape != param.shape:
                        raise ValueError(f"Expected the torch state {k!r} of parameter {index} "
                                         f"to have shape {tuple(param.shape)}, got "
                                         f"{tuple(v.shape)}")
                state[index] = slots
                entries.append(entry)
            index += 1
        step = _group_step(entries, gi)
        if step is None:
            continue
        non_slot = {k: v.detach().clone() for k, v in group["non_slot"].items()}
        non_slot["step"] = torch.tensor(step, dtype=torch.int64)
        if rule.beta_powers:
            beta1, beta2 = tgroup["betas"]
            non_slot["beta1_power"] = _power(beta1, step + 1)
            non_slot["beta2_power"] = _power(beta2, step + 1)
        sd["param_groups"][gi]["non_slot"] = non_slot
    sd["state"] = state
    optimizer.load_state_dict(sd)
    return list(rule.notes)


def _check_shapes(torch_optimizer: torch.optim.Optimizer, optimizer: Any) -> None:
    for gi, (tgroup, group) in enumerate(zip(torch_optimizer.param_groups,
                                             optimizer.param_groups, strict=True)):
        for pi, (theirs, mine) in enumerate(zip(tgroup["params"], group["params"],
                                                strict=True)):
            if theirs.shape != mine.shape:
                raise ValueError(f"Expected parameter {pi} of group {gi} to have the same shape "
                                 f"in both optimizers, got {tuple(theirs.shape)} (torch) and "
                                 f"{tuple(mine.shape)} (trainop): not the same model")


def _check_ids(source: dict) -> None:
    known = {tid for g in source["param_groups"] for tid in g["params"]}
    stray = [k for k in source["state"] if k not in known]
    if stray:
        raise ValueError(f"Expected the torch state's keys to be the parameter ids of its "
                         f"param_groups ({describe(sorted(known, key=repr))}), got "
                         f"{describe(stray)}: nothing would be loaded for them")


def _check_powers(group: dict, step: int, gi: int) -> None:
    """The beta powers must be ``beta^(step + 1)``: torch keeps only ``step``."""
    non_slot = group["non_slot"]
    for name, beta in (("beta1_power", "beta1"), ("beta2_power", "beta2")):
        if name not in non_slot or _plain(group.get(beta)) is None:
            continue
        held, want = float(non_slot[name]), float(_power(_plain(group[beta]), step + 1))
        if abs(held - want) > abs(want) * (step + 2) * 2.0 ** -23 + 1e-45:
            raise ValueError(f"Cannot map group {gi} to torch: its {name} {held!r} is not "
                             f"{beta}^(step + 1) = {want!r} for its step {step} (torch keeps "
                             f"only the step; the state was changed by hand or loaded from "
                             f"a TF checkpoint whose global_step is not Adam's count)")


def to_torch_optim(optimizer: Any, torch_optimizer: torch.optim.Optimizer) -> list[str]:
    """Load the trainop ``optimizer``'s state into ``torch_optimizer`` (a ``torch.optim``
    optimizer over the same parameters): the inverse of ``from_torch_optim``, by the same
    pairs (``step`` from the group's update count, which the beta powers must agree with).
    Raises ``TypeError``/``ValueError`` before ``torch_optimizer`` changes; returns the notes on
    what maps but differs.

    Example::

        notes = trainop.checkpoints.to_torch_optim(opt, torch.optim.Adam(model.parameters()))
    """
    rule = rule_for(optimizer)
    if not isinstance(torch_optimizer, torch.optim.Optimizer):
        raise TypeError(f"Expected `torch_optimizer` to be a torch.optim optimizer, got "
                        f"{describe(torch_optimizer)}")
    target = torch_optimizer.state_dict()
    _check_groups(rule, target["param_groups"], optimizer, type(torch_optimizer).__name__)
    _check_shapes(torch_optimizer, optimizer)
    state = {}
    for gi, (tgroup, group) in enumerate(zip(target["param_groups"], optimizer.param_groups,
                                             strict=True)):
        step = int(group["non_slot"]["step"])
        if rule.beta_powers:
            _check_powers(group, step, gi)
        for tid, param in zip(tgroup["params"], group["params"], strict=True):
            slots = optimizer.state.get(param)
            if not slots:
                continue
            entry = {k: v.detach().clone() for k, v in rule.to_torch(slots, tgroup).items()}
            if rule.steps:
                entry["step"] = torch.tensor(float(step), dtype=torch.float32)
            state[tid] = entry
    target["state"] = state
    torch_optimizer.load_state_dict(target)
    return list(rule.notes)
