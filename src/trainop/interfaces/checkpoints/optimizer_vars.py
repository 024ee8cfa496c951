"""Which TF variables an optimizer's state is, for the parameters a ``names`` map binds.

``slot_refs`` lists every slot of every bound parameter the optimizer updates, with its TF
name (``<variable>/<suffix>``, see ``slot_names``), the group and the parameter's index in
``state_dict``. ``current_state`` gives the slots and non-slot variables as they are, or as
the optimizer would create them (without creating them: nothing changes before a load is
checked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trainop.contract.optimizer import Optimizer
from trainop.contract.validation import describe
from trainop.interfaces.checkpoints.binding import Binding
from trainop.interfaces.checkpoints.layouts import Layout, identity
from trainop.interfaces.checkpoints.slot_names import scalar_slot_name, slot_names

__all__ = ["SlotRef", "bound_groups", "check_optimizer", "current_non_slot", "current_slots",
           "slot_refs"]


@dataclass(frozen=True)
class SlotRef:
    """One slot of a bound parameter and the TF variable that holds it."""

    binding: Binding
    group: int
    index: int  # the parameter's id in ``state_dict()["state"]``
    slot: str
    tf_name: str
    dtype: torch.dtype
    layout: Layout  # the parameter's, identity for a 0-dim slot
    shape: tuple[int, ...]


def check_optimizer(optimizer: Any, bindings: list[Binding]) -> None:
    """A trainop optimizer that updates at least one bound parameter (one that updates none,
    e.g. made TF style and not stepped yet, has no state to load or save)."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"Expected `optimizer` to be a trainop optimizer (e.g. "
                        f"trainop.AdamOptimizer(model.parameters(), ...)) or None, got "
                        f"{describe(optimizer)}")
    if bindings and not bound_groups(optimizer, bindings):
        raise ValueError(f"Expected `optimizer` to update parameters of the model, it updates "
                         f"none of {[b.param_name for b in bindings][:5]} (construct it with "
                         f"the model's parameters, torch style, or pass optimizer=None)")


def _positions(optimizer: Optimizer) -> dict[int, tuple[int, int]]:
    out, index = {}, 0
    for gi, group in enumerate(optimizer.param_groups):
        for p in group["params"]:
            out[id(p)] = (gi, index)
            index += 1
    return out


def bound_groups(optimizer: Optimizer, bindings: list[Binding]) -> list[int]:
    """The indices of the groups that update at least one bound parameter."""
    positions = _positions(optimizer)
    return sorted({positions[id(b.param)][0] for b in bindings if id(b.param) in positions})


def slot_refs(optimizer: Optimizer, bindings: list[Binding]) -> list[SlotRef]:
    """The slots of the bound parameters the optimizer updates (parameters it does not
    update have none)."""
    positions = _positions(optimizer)
    refs = []
    for b in bindings:
        if id(b.param) not in positions:
            continue
        gi, index = positions[id(b.param)]
        group = optimizer.param_groups[gi]
        suffixes = slot_names(optimizer, group)
        for spec in optimizer._slot_specs(group):
            dtype = spec.dtype or b.param.dtype
            if spec.scalar:
                refs.append(SlotRef(b, gi, index, spec.name,
                                    scalar_slot_name(optimizer, spec.name, index), dtype,
                                    identity, ()))
            else:
                refs.append(SlotRef(b, gi, index, spec.name,
                                    f"{b.tf_name}/{suffixes[spec.name]}", dtype, b.layout,
                                    tuple(b.param.shape)))
    return refs


def current_slots(optimizer: Optimizer, ref: SlotRef) -> dict[str, torch.Tensor]:
    """The parameter's slots now, or new ones at their initial values if it has none yet."""
    group = optimizer.param_groups[ref.group]
    state = optimizer.state.get(ref.binding.param)
    if state is None or optimizer._lacks_slots(state, group):
        return optimizer._make_slots(ref.binding.param.detach(), group)
    return dict(state)


def current_non_slot(optimizer: Optimizer, group_index: int) -> dict[str, torch.Tensor]:
    """A copy of the group's non-slot variables, with the initial ones the optimizer would
    create before its first update added where missing."""
    group = optimizer.param_groups[group_index]
    non_slot = {k: v.detach().clone() for k, v in group["non_slot"].items()}
    if any(name not in non_slot for name in optimizer._non_slot_names) and group["params"]:
        optimizer._init_non_slot(non_slot, optimizer._step_hyper(group),
                                 group["params"][0].device)
    return non_slot
