"""``save_tf``: a torch model and its trainop optimizer as a TF1 checkpoint.

Every bound parameter goes through its layout back to TF's array (parameters sharing one TF
variable, as ``lstm_kernel_ih``/``lstm_kernel_hh``, are joined along axis 0 in part order);
the slots of the parameters the optimizer updates are written under TF's slot names (slots not
made yet: their initial values), the non-slot variables once (every group holding bound
parameters must agree, as TF keeps one per optimizer) and the global step as int64. With
OpenSeq2Seq's mixed precision (a ``MixedPrecisionOptimizerWrapper``) the float32 masters, their
slots and the loss scaler's state are written too. Names are the defaults of ``naming`` unless
``names`` gives others (``load_tf``'s ``report.tf_names`` holds those a checkpoint used). The
files are the V2 format ``tf.compat.v1.train.Saver`` restores (``bundle.write_bundle``);
TensorFlow is not needed.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from trainop.contract.state import STEP_LIMIT
from trainop.interfaces.checkpoints.binding import resolve
from trainop.interfaces.checkpoints.bundle import write_bundle
from trainop.interfaces.checkpoints.convert import to_tf
from trainop.interfaces.checkpoints.dtypes import exact_int
from trainop.interfaces.checkpoints.layouts import Layout
from trainop.interfaces.checkpoints.mixed import master_bindings, scaler_of, unwrap
from trainop.interfaces.checkpoints.naming import SCALER_NAMES
from trainop.interfaces.checkpoints.optimizer_vars import (
    bound_groups,
    check_optimizer,
    current_non_slot,
    current_slots,
    slot_refs,
)

__all__ = ["save_tf"]


class _Variables:
    """TF variables being assembled: whole ones, and the parts of shared ones."""

    def __init__(self) -> None:
        self.whole: dict[str, torch.Tensor] = {}
        self.parts: dict[str, dict[int, torch.Tensor]] = {}

    def add(self, name: str, value: torch.Tensor, layout: Layout | None = None) -> None:
        part = None if layout is None else layout.part
        if name in self.whole or (name in self.parts and (part is None
                                                          or part in self.parts[name])):
            raise ValueError(f"Two values for the TF variable {name!r}: check `names` (a name "
                             f"given twice, or the same as a default name)")
        if part is None:
            self.whole[name] = value
        else:
            self.parts.setdefault(name, {})[part] = value

    def joined(self) -> dict[str, torch.Tensor]:
        out = dict(self.whole)
        for name, parts in self.parts.items():
            out[name] = torch.cat([parts[i] for i in sorted(parts)], dim=0)
        return out


def _step(optimizer: Any, groups: list[int], global_step: Any) -> torch.Tensor | None:
    if global_step is None:
        if optimizer is None or not groups:
            return None
        steps = {int(optimizer.param_groups[g]["non_slot"]["step"]) for g in groups}
        if len(steps) != 1:
            raise ValueError(f"Expected the groups of the saved parameters to have taken the "
                             f"same number of steps (TF keeps one global step), got "
                             f"{sorted(steps)}; pass `global_step` to choose")
        return torch.tensor(steps.pop(), dtype=torch.int64)
    if isinstance(global_step, torch.Tensor) and global_step.dim() == 0 and not (
            global_step.is_floating_point() or global_step.dtype == torch.bool):
        global_step = exact_int(global_step)
    if (isinstance(global_step, bool) or not isinstance(global_step, int)
            or not 0 <= global_step <= STEP_LIMIT):
        raise ValueError(f"Expected `global_step` to be an integer in [0, 2**62] (the int64 "
                         f"counter must not wrap) or None, got {global_step!r}")
    return torch.tensor(global_step, dtype=torch.int64)


def _non_slot(optimizer: Any, groups: list[int],
              overrides: dict[str, str]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for gi in groups:
        values = current_non_slot(optimizer, gi)
        for name in optimizer._non_slot_names:
            if name in out and not torch.equal(out[name], values[name]):
                raise ValueError(f"Expected every group of the saved parameters to hold the "
                                 f"same {name!r} (TF keeps one per optimizer), got "
                                 f"{float(out[name])} and {float(values[name])} (group {gi})")
            out[name] = values[name].detach().to("cpu")
    return {overrides.get(f"optimizer.{k}", k): v for k, v in out.items()}


def _scaler(wrapper: Any, overrides: dict[str, str]) -> dict[str, torch.Tensor]:
    scaler = scaler_of(wrapper)
    if scaler is None:
        return {}
    defaults = SCALER_NAMES.get(type(scaler).__name__, {})
    return {overrides.get(f"loss_scaler.{k}", defaults.get(k, k)): v.detach().to("cpu")
            for k, v in scaler.state_dict().items()
            if k in defaults or f"loss_scaler.{k}" in overrides}


def save_tf(path: str | os.PathLike, model: torch.nn.Module, optimizer: Any = None, *,
            names: Any, global_step: int | torch.Tensor | None = None) -> None:
    """Write ``model`` (and ``optimizer``'s state) as a TF1 checkpoint at the prefix ``path``,
    and the folder's ``checkpoint`` file naming it the latest, as TF's ``Saver.save`` does
    (``tf.train.latest_checkpoint(folder)`` finds it; ``load_tf(folder, ...)`` reads it).

    ``names`` as for ``load_tf`` (every parameter mapped, or to ``None`` to leave it out).
    ``global_step``: the value to write as ``global_step``; None writes the optimizer's count
    of applied updates (nothing without an optimizer).
    """
    bindings, _, overrides = resolve(model, names, require_all=True)
    inner, wrapper = (None, None) if optimizer is None else unwrap(optimizer)
    updated, masters = master_bindings(wrapper, bindings)
    if inner is not None:
        check_optimizer(inner, updated)
    variables = _Variables()
    for b in bindings:
        variables.add(b.tf_name, to_tf(b.param, b.layout, param=True), b.layout)
    for b in masters:
        variables.add(overrides.get(f"{b.param_name}[master]", b.tf_name),
                      to_tf(b.param, b.layout, param=True), b.layout)
    groups: list[int] = []
    if inner is not None:
        slots: dict[int, dict[str, torch.Tensor]] = {}
        for ref in slot_refs(inner, updated):
            if ref.index not in slots:
                slots[ref.index] = current_slots(inner, ref)
            name = overrides.get(f"{ref.binding.param_name}[{ref.slot}]", ref.tf_name)
            variables.add(name, to_tf(slots[ref.index][ref.slot], ref.layout, param=False),
                          ref.layout)
        groups = bound_groups(inner, updated)
        for name, value in {**_non_slot(inner, groups, overrides),
                            **_scaler(wrapper, overrides)}.items():
            variables.add(name, value)
    step = _step(inner, groups, global_step)
    if step is not None:
        variables.add(overrides.get("optimizer.global_step", "global_step"), step)
    write_bundle(path, variables.joined())
