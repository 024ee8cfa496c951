"""``load_tf``: a TF1 checkpoint into a torch model and a trainop optimizer, checked first.

Order: read the checkpoint; map every bound parameter through its layout; map the slots of
the parameters the optimizer updates (TF names from ``slot_names``), the non-slot variables
(Adam's ``beta1_power``/``beta2_power``, one per TF optimizer, copied to every group) and the
global step (trainop's per-group count of applied updates, and AdagradDA's ``global_step``
tensor); build the optimizer's new ``state_dict`` and run the optimizer's own checkpoint
validation (``Optimizer.validate_state_dict``) on it. Only when everything passed are the
parameters copied and ``load_state_dict`` called: a rejected checkpoint changes nothing.

Then the next update is the one TF would have made: the slots hold TF's values, the beta
powers are ``beta^t`` as TF's, and step-dependent rules (AdagradDA) see TF's step.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from trainop.contract.validation import check_bool
from trainop.interfaces.checkpoints.binding import resolve
from trainop.interfaces.checkpoints.bundle import read_bundle
from trainop.interfaces.checkpoints.convert import to_torch
from trainop.interfaces.checkpoints.layouts import identity
from trainop.interfaces.checkpoints.optimizer_vars import (
    bound_groups,
    check_optimizer,
    current_non_slot,
    current_slots,
    slot_refs,
)
from trainop.interfaces.checkpoints.report import LoadReport

__all__ = ["load_tf"]


class _Plan:
    """What a load will write, and what it could not find (filled before anything changes)."""

    def __init__(self, tensors: dict[str, torch.Tensor], strict: bool) -> None:
        self.tensors, self.strict = tensors, strict
        self.used: set[str] = set()
        self.missing: list[str] = []
        self.report = LoadReport(unsupported=dict(getattr(tensors, "unsupported", {})))

    def take(self, tf_name: str, target: str) -> torch.Tensor | None:
        tensor = self.tensors.get(tf_name)
        if tensor is None:
            self.missing.append(f"{target} (TF variable {tf_name!r})")
            self.report.left_at_initial.append(target)
            return None
        self.used.add(tf_name)
        self.report.loaded.append(f"{target} <- {tf_name}")
        return tensor


def _load_params(plan: _Plan, bindings) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    values = {}
    for b in bindings:
        tensor = plan.take(b.tf_name, b.param_name)
        if tensor is None:
            continue
        values[id(b.param)] = (b.param, to_torch(
            tensor, b.layout, tuple(b.param.shape), b.param.dtype,
            f"parameter {b.param_name!r} from {b.tf_name!r}", param=True))
        if b.layout.name != "identity":
            plan.report.transformed.append(b.param_name)
    return values


def _step_value(plan: _Plan, global_step: Any) -> int | None:
    if global_step is not None and not isinstance(global_step, str):
        raise TypeError(f"Expected `global_step` to be the TF name of the step variable (a "
                        f"str) or None (for 'global_step'), got {type(global_step).__name__}")
    name = global_step or "global_step"
    if name not in plan.tensors:
        if global_step is not None:
            plan.take(name, "the global step")
        return None
    tensor = plan.take(name, "the global step")
    if tensor.dim() != 0 or tensor.is_floating_point() or tensor.dtype == torch.bool:
        raise TypeError(f"Expected the global step {name!r} to be a 0-dim integer, got "
                        f"{tensor.dtype} of shape {tuple(tensor.shape)}")
    if int(tensor) < 0:
        raise ValueError(f"Expected the global step {name!r} >= 0, got {int(tensor)}")
    plan.report.global_step = int(tensor)
    return int(tensor)


def _load_optimizer(plan: _Plan, optimizer, bindings, step: int | None) -> dict:
    """The optimizer's new ``state_dict``."""
    sd = optimizer.state_dict()
    refs = slot_refs(optimizer, bindings)
    states = {}
    for ref in refs:
        if ref.index not in states:
            states[ref.index] = current_slots(optimizer, ref)
        target = f"{ref.binding.param_name}[{ref.slot}]"
        tensor = plan.take(ref.tf_name, target)
        if tensor is None:
            continue
        states[ref.index][ref.slot] = to_torch(
            tensor, ref.binding.layout, tuple(ref.binding.param.shape), ref.dtype,
            f"slot {ref.slot!r} of {ref.binding.param_name!r} from {ref.tf_name!r}",
            param=False)
        if ref.binding.layout.name != "identity":
            plan.report.transformed.append(target)
    sd["state"] = {**sd["state"], **states}
    groups = bound_groups(optimizer, bindings)
    sd["param_groups"] = [dict(g) for g in sd["param_groups"]]
    for gi in groups:
        non_slot = current_non_slot(optimizer, gi)
        for name in optimizer._non_slot_names:
            tensor = plan.take(name, f"group {gi} {name}")
            if tensor is not None:
                non_slot[name] = to_torch(tensor, identity, (), non_slot[name].dtype,
                                          f"non-slot variable {name!r}", param=False)
        if step is not None:
            non_slot["step"] = torch.tensor(step, dtype=torch.int64)
        sd["param_groups"][gi]["non_slot"] = non_slot
    return sd


def _optimizer_like(name: str, bound: set[str]) -> bool:
    """Whether a TF name is optimizer state of a bound variable or a well-known non-slot."""
    return (name in ("beta1_power", "beta2_power", "global_step")
            or any(name.startswith(f"{b}/") for b in bound))


def _finish_plan(plan: _Plan, optimizer, bindings) -> None:
    bound = {b.tf_name for b in bindings}
    unexpected = []
    for name in plan.tensors:
        if name in plan.used:
            continue
        plan.report.skipped.append(name)
        if optimizer is None and _optimizer_like(name, bound):
            continue  # optimizer state, not asked for
        unexpected.append(name)
    plan.report.skipped.extend(plan.report.unsupported)
    if plan.strict and (plan.missing or unexpected):
        parts = []
        if plan.missing:
            parts.append(f"missing from the checkpoint: {', '.join(plan.missing[:8])}"
                         f"{' ...' if len(plan.missing) > 8 else ''}")
        if unexpected:
            parts.append(f"in the checkpoint but not mapped: {', '.join(sorted(unexpected)[:8])}"
                         f"{' ...' if len(unexpected) > 8 else ''}")
        raise ValueError(f"Cannot load the TF checkpoint exactly (strict=True): "
                         f"{'; '.join(parts)}. Nothing was changed; strict=False loads the "
                         f"rest and reports these")


def load_tf(path: str | os.PathLike, model: torch.nn.Module, optimizer: Any = None, *,
            names: Any, global_step: str | None = None, strict: bool = True) -> LoadReport:
    """Load the TF1 checkpoint at ``path`` into ``model`` (and ``optimizer``'s state).

    Args:
        path: the checkpoint prefix (``Saver.save``'s return value; the files are
            ``path.index`` and ``path.data-*``).
        model: the torch model. optimizer: a trainop optimizer over (some of) its parameters,
            or None to load the weights only.
        names: ``{parameter name: TF name | (TF name, layout) | None}`` (see ``binding``).
        global_step: the TF name of the step variable; None: ``"global_step"`` when present.
        strict: True refuses a checkpoint that lacks a mapped variable or a slot, or holds
            variables the map does not account for; False loads the rest and reports them.

    Returns a ``LoadReport``. Raises ``ValueError``/``TypeError`` before anything changes.
    """
    check_bool("strict", strict)
    bindings, unmapped = resolve(model, names, require_all=strict)
    if optimizer is not None:
        check_optimizer(optimizer)
    plan = _Plan(read_bundle(path), strict)
    plan.report.left_at_initial.extend(unmapped)
    params = _load_params(plan, bindings)
    step = _step_value(plan, global_step)
    sd = None if optimizer is None else _load_optimizer(plan, optimizer, bindings, step)
    _finish_plan(plan, optimizer, bindings)
    if sd is not None:
        optimizer.validate_state_dict(sd)
    with torch.no_grad():  # from here on nothing can fail on the checkpoint's account
        for param, value in params.values():
            param.copy_(value)
    if sd is not None:
        optimizer.load_state_dict(sd)
        external = getattr(optimizer, "_global_step", None)
        if step is not None and isinstance(external, torch.Tensor):
            external.fill_(step)
    return plan.report

