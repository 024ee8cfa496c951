"""``load_tf``: a TF1 checkpoint into a torch model and a trainop optimizer, checked first.

Order: read the checkpoint; map every bound parameter through its layout; map the slots of
the parameters the optimizer updates (TF names from ``slot_names``, found as ``naming``
says), the non-slot variables (Adam's ``beta1_power``/``beta2_power``, one per TF optimizer,
copied to every group) and the global step (trainop's per-group count of applied updates, and
AdagradDA's ``global_step`` tensor); for OpenSeq2Seq's mixed precision also the float32
masters and the loss scaler's state (``mixed``). Then the new ``state_dict`` goes through the
optimizer's (or the wrapper's) own validation. Only when everything passed are the parameters
copied and ``load_state_dict`` called: a rejected checkpoint changes nothing.

Then the next update is the one TF would have made: the slots hold TF's values, the beta
powers are ``beta^t`` as TF's, and step-dependent rules (AdagradDA) see TF's step.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from trainop.contract.state import STEP_LIMIT
from trainop.contract.validation import check_bool
from trainop.interfaces.checkpoints.binding import resolve
from trainop.interfaces.checkpoints.bundle import read_bundle
from trainop.interfaces.checkpoints.convert import to_torch
from trainop.interfaces.checkpoints.dtypes import exact_int
from trainop.interfaces.checkpoints.layouts import identity
from trainop.interfaces.checkpoints.mixed import master_bindings, scaler_of, unwrap
from trainop.interfaces.checkpoints.naming import MASTER_SCOPE, SCALER_NAMES, find
from trainop.interfaces.checkpoints.optimizer_vars import (
    bound_groups,
    check_optimizer,
    current_non_slot,
    current_slots,
    slot_refs,
)
from trainop.interfaces.checkpoints.report import LoadReport
from trainop.processing._checkpoint import validate_wrapper_state

__all__ = ["load_tf"]


class _Plan:
    """What a load will write, and what it could not find (filled before anything changes)."""

    def __init__(self, tensors: dict[str, torch.Tensor], strict: bool,
                 overrides: dict[str, str]) -> None:
        self.tensors, self.strict, self.overrides = tensors, strict, overrides
        self.used: set[str] = set()
        self.missing: list[str] = []
        self.report = LoadReport(unsupported=dict(getattr(tensors, "unsupported", {})))

    def take(self, target: str, default: str, *, state: bool = True) -> tuple[str, Any]:
        """``(TF name, tensor or None)`` for ``target``; optimizer state may sit in a scope."""
        name = (find(self.tensors, target, default, self.overrides) if state
                else default)
        tensor = self.tensors.get(name)
        if tensor is None:
            self.missing.append(f"{target} (TF variable {name!r})")
            self.report.left_at_initial.append(target)
            return name, None
        self.used.add(name)
        self.report.loaded.append(f"{target} <- {name}")
        if state:
            self.report.tf_names[target] = name
        return name, tensor


def _load_params(plan: _Plan, bindings, *, state: bool) -> dict[int, tuple]:
    values = {}
    for b in bindings:
        target = f"{b.param_name}[master]" if state else b.param_name
        name, tensor = plan.take(target, b.tf_name, state=state)
        if tensor is None:
            continue
        values[id(b.param)] = (b.param, to_torch(
            tensor, b.layout, tuple(b.param.shape), b.param.dtype,
            f"{'the master of' if state else 'parameter'} {b.param_name!r} from {name!r}",
            param=True))
        if b.layout.name != "identity":
            plan.report.transformed.append(target)
    return values


def _step_value(plan: _Plan, global_step: Any) -> int | None:
    if global_step is not None and not isinstance(global_step, str):
        raise TypeError(f"Expected `global_step` to be the TF name of the step variable (a "
                        f"str) or None (for 'global_step'), got {type(global_step).__name__}")
    target = "optimizer.global_step"
    if global_step is not None:
        plan.overrides = {**plan.overrides, target: global_step}
    name = find(plan.tensors, target, "global_step", plan.overrides)
    if name not in plan.tensors and global_step is None and target not in plan.overrides:
        return None  # no step in the checkpoint, none asked for
    name, tensor = plan.take(target, name)
    if tensor is None:
        return None
    if tensor.dim() != 0 or tensor.is_floating_point() or tensor.dtype == torch.bool:
        raise TypeError(f"Expected the global step {name!r} to be a 0-dim integer, got "
                        f"{tensor.dtype} of shape {tuple(tensor.shape)}")
    value = exact_int(tensor)
    if not 0 <= value <= STEP_LIMIT:
        raise ValueError(f"Expected the global step {name!r} in [0, 2**62] (the int64 counter "
                         f"must not wrap), got {value}")
    plan.report.global_step = value
    return value


def _load_slots(plan: _Plan, optimizer, bindings) -> dict[int, dict]:
    states: dict[int, dict] = {}
    for ref in slot_refs(optimizer, bindings):
        if ref.index not in states:
            states[ref.index] = current_slots(optimizer, ref)
        target = f"{ref.binding.param_name}[{ref.slot}]"
        name, tensor = plan.take(target, ref.tf_name)
        if tensor is None:
            continue
        states[ref.index][ref.slot] = to_torch(
            tensor, ref.layout, ref.shape, ref.dtype,
            f"slot {ref.slot!r} of {ref.binding.param_name!r} from {name!r}", param=False)
        if ref.layout.name != "identity":
            plan.report.transformed.append(target)
    return states


def _load_optimizer(plan: _Plan, optimizer, bindings, step: int | None) -> dict:
    """The (inner) optimizer's new ``state_dict``."""
    sd = optimizer.state_dict()
    sd["state"] = {**sd["state"], **_load_slots(plan, optimizer, bindings)}
    sd["param_groups"] = [dict(g) for g in sd["param_groups"]]
    taken: dict[str, torch.Tensor | None] = {}
    for gi in bound_groups(optimizer, bindings):
        non_slot = current_non_slot(optimizer, gi)
        for key in optimizer._non_slot_names:
            if key not in taken:
                name, tensor = plan.take(f"optimizer.{key}", key)
                taken[key] = None if tensor is None else to_torch(
                    tensor, identity, (), non_slot[key].dtype,
                    f"non-slot variable {key!r} from {name!r}", param=False)
            if taken[key] is not None:
                non_slot[key] = taken[key].clone()
        if step is not None:
            non_slot["step"] = torch.tensor(step, dtype=torch.int64)
        sd["param_groups"][gi]["non_slot"] = non_slot
    return sd


def _load_scaler(plan: _Plan, scaler) -> dict[str, torch.Tensor] | None:
    if scaler is None:
        return None
    state = scaler.state_dict()
    defaults = SCALER_NAMES.get(type(scaler).__name__, {})
    for key, own in state.items():
        if key not in defaults and f"loss_scaler.{key}" not in plan.overrides:
            continue
        name, tensor = plan.take(f"loss_scaler.{key}", defaults.get(key, key))
        if tensor is not None:
            state[key] = to_torch(tensor, identity, tuple(own.shape), own.dtype,
                                  f"loss scaler state {key!r} from {name!r}", param=False)
    return state


def _optimizer_like(name: str, bound: set[str]) -> bool:
    """Whether a TF name is optimizer state of a bound variable (a slot, in a scope or not; a
    mixed-precision master) or a well-known non-slot variable."""
    return (name.rsplit("/", 1)[-1] in ("beta1_power", "beta2_power", "global_step")
            or any(name.startswith(f"{b}/") or f"/{b}/" in name
                   or f"{MASTER_SCOPE}/{b}" in name for b in bound))


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
            ``path.index`` and ``path.data-*``), or the folder TF saved into: its latest
            checkpoint, as ``tf.train.latest_checkpoint`` finds it.
        model: the torch model. optimizer: a trainop optimizer over (some of) its parameters,
            a ``MixedPrecisionOptimizerWrapper`` around one, or None for the weights only.
        names: ``{parameter name: TF name | (TF name, layout) | None}`` (see ``binding``),
            plus TF names of optimizer state where they differ from the defaults (``naming``).
        global_step: the TF name of the step variable; None: ``"global_step"`` when present.
        strict: True refuses a checkpoint that lacks a mapped variable or a slot, or holds
            variables the map does not account for; False loads the rest and reports them.

    Returns a ``LoadReport``. Raises ``ValueError``/``TypeError`` before anything changes.
    """
    check_bool("strict", strict)
    bindings, unmapped, overrides = resolve(model, names, require_all=strict)
    inner, wrapper = (None, None) if optimizer is None else unwrap(optimizer)
    updated, masters = master_bindings(wrapper, bindings)
    if inner is not None:
        check_optimizer(inner, updated)
    plan = _Plan(read_bundle(path), strict, overrides)
    plan.report.left_at_initial.extend(unmapped)
    params = _load_params(plan, bindings, state=False)
    master_values = _load_params(plan, masters, state=True)
    step = _step_value(plan, global_step)
    sd = None if inner is None else _load_optimizer(plan, inner, updated, step)
    scaler_state = _load_scaler(plan, scaler_of(wrapper))
    _finish_plan(plan, optimizer, bindings)
    if wrapper is not None:
        full = wrapper.state_dict()
        full["optimizer"] = sd
        full["masters"] = [master_values.get(id(m), (m, m))[1].clone() for m in
                           wrapper.master_params()]
        if scaler_state is not None:
            full["loss_scaler"] = {**full["loss_scaler"], **scaler_state}
        validate_wrapper_state(wrapper, full)
    elif sd is not None:
        inner.validate_state_dict(sd)
    with torch.no_grad():  # from here on nothing can fail on the checkpoint's account
        for param, value in params.values():
            param.copy_(value)
    if wrapper is not None:
        wrapper.load_state_dict(full)
    elif sd is not None:
        inner.load_state_dict(sd)
    external = getattr(inner, "_global_step", None)
    if step is not None and isinstance(external, torch.Tensor):
        external.fill_(step)
    return plan.report
