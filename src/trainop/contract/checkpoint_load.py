"""``Optimizer.load_state_dict``: torch's load protocol with the whole checkpoint validated
between torch's load pre-hooks and the first change.

Order (torch's, with the check added): a shallow copy of ``state_dict``; the load pre-hooks
(which may edit it or return another); ``validate_optimizer_state`` on the result (nothing has
changed yet, so a rejected checkpoint leaves the optimizer as it was); the new groups and state
are built aside, then installed in one assignment; the load post-hooks.

What is loaded:

- groups: the saved hyperparameters (deep-copied, as torch does), the loading optimizer's own
  parameters (matched by position), its ``param_names`` where the checkpoint has none, its own
  value for a callable saved as the "not saved" marker; ``non_slot`` copied to the CPU (where
  trainop keeps its counters and beta powers, so reading them costs no device sync, also after
  ``torch.load(map_location="cuda")``), ``step`` as int64;
- state: each parameter's slots copied to the parameter's device, in the dtype the optimizer
  creates the slot in (``slot_dtype``: the parameter's dtype, so a checkpoint of a float32 model
  loads into ``model.double()`` as torch casts its state; fixed-dtype slots keep theirs); the
  other keys of a parameter's state (a wrapper's, timm Lookahead's ``lookahead_slow_buff``)
  copied and cast as torch casts them (``_loaded_extra``);
  entries under a key no group lists (``opt.state["note"] = {...}``) are kept as they are, as
  torch keeps them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch

from trainop.contract.checkpoint import validate_optimizer_state
from trainop.contract.rank_agreement import agree_across_ranks, counter_names, sharded_group
from trainop.contract.slots import slot_dtype

__all__ = ["load_optimizer_state"]


def _run_pre_hooks(opt: Any, state_dict: Any) -> Any:
    if isinstance(state_dict, Mapping):
        state_dict = dict(state_dict)
    for hook in opt._optimizer_load_state_dict_pre_hooks.values():
        result = hook(opt, state_dict)
        if result is not None:
            state_dict = result
    return state_dict


def _loaded_group(saved: Mapping, own: Mapping, unsaved: str) -> dict[str, Any]:
    # (the counters are copied below, not deep-copied: a tensor computed with autograd has no
    # deepcopy; ``params`` is set below)
    group = copy.deepcopy({k: v for k, v in saved.items() if k != "non_slot"})
    for key, value in group.items():
        if isinstance(value, str) and value == unsaved:
            group[key] = own.get(key)
    group["params"] = own["params"]
    if "param_names" in own and "param_names" not in group:
        group["param_names"] = own["param_names"]
    group["non_slot"] = {
        k: t.detach().to(device="cpu", dtype=torch.int64 if k == "step" else t.dtype, copy=True)
        for k, t in saved["non_slot"].items()}
    if "step" not in group["non_slot"]:
        group["non_slot"]["step"] = torch.zeros((), dtype=torch.int64)
    return group


def _loaded_extra(param: torch.Tensor, key: Any, value: Any) -> Any:
    """A wrapper's per-parameter entry as torch loads it: tensors (inside dicts, lists and
    tuples too) moved to the parameter's device and, for a floating-point parameter, cast to
    its dtype; a ``step`` tensor kept as it is; copied, as trainop copies its slots."""
    if isinstance(value, torch.Tensor):
        if key == "step":
            return value.detach().clone()
        dtype = param.dtype if param.is_floating_point() else value.dtype
        return value.detach().to(device=param.device, dtype=dtype, copy=True)
    if isinstance(value, dict):
        return {k: _loaded_extra(param, k, v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_loaded_extra(param, None, v) for v in value)
    return copy.deepcopy(value)


def _loaded_slots(opt: Any, group: Mapping, param: torch.Tensor, saved: Mapping
                  ) -> dict[str, Any]:
    specs = {s.name: s for s in opt._slot_specs(group)}
    return {name: t.detach().to(device=param.device, dtype=slot_dtype(specs[name], param),
                                memory_format=torch.contiguous_format, copy=True)
            if name in specs else _loaded_extra(param, name, t)
            for name, t in saved.items()}


def load_optimizer_state(opt: Any, state_dict: Any, *, unsaved: str,
                         bookkeeping: tuple[str, ...]) -> None:
    """Load ``state_dict`` into ``opt`` as described in the module docstring; raises (with
    ``opt`` unchanged) where ``validate_optimizer_state`` does. ``opt._after_load()`` runs
    before the post-hooks."""
    state_dict = _run_pre_hooks(opt, state_dict)
    params = [p for group in opt.param_groups for p in group["params"]]
    group = sharded_group(params)
    if group is None:
        validate_optimizer_state(opt, state_dict, unsaved=unsaved, bookkeeping=bookkeeping)
    else:  # FSDP2: the counters must also agree across the ranks (contract/rank_agreement.py)
        error = None
        try:
            validate_optimizer_state(opt, state_dict, unsaved=unsaved, bookkeeping=bookkeeping)
        except (TypeError, ValueError) as exc:
            error = exc
        agree_across_ranks(counter_names(opt), None if error else [
            g.get("non_slot") for g in state_dict["param_groups"]], error, group=group,
            device=params[0].device)
    groups = [_loaded_group(saved, own, unsaved)
              for saved, own in zip(state_dict["param_groups"], opt.param_groups, strict=True)]
    owner = {pid: (param, group) for saved, group in zip(state_dict["param_groups"], groups,
                                                         strict=True)
             for pid, param in zip(saved["params"], group["params"], strict=True)}
    state: dict[Any, Any] = {}  # (made an OptimizerState by ``opt._after_load()``)
    for key, entry in state_dict["state"].items():
        if key not in owner:
            state[key] = entry  # a non-parameter entry, kept as torch keeps it
        else:
            param, group = owner[key]
            state[param] = _loaded_slots(opt, group, param, entry)
    opt.__setstate__({"state": state, "param_groups": groups})
    opt._after_load()
    for hook in opt._optimizer_load_state_dict_post_hooks.values():
        hook(opt)


