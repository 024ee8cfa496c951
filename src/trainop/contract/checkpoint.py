"""Validation of an optimizer checkpoint before ``load_state_dict`` changes anything.

``validate_optimizer_state(opt, state_dict)`` reads the whole checkpoint and raises a
``ValueError``/``TypeError`` naming the group, the parameter index and the key of the first
problem; it never mutates ``opt`` or ``state_dict``. ``Optimizer.load_state_dict`` calls it
first, so a rejected checkpoint leaves the optimizer bit-identical. It checks:

- structure: ``state`` and ``param_groups`` present, as many groups and parameters per group as
  the optimizer has, integer parameter ids without repeats, ``state`` keyed by those ids only;
- hyperparameters: with the constructor's own ranges and choices (``lr`` NaN or negative,
  ``beta1`` 1.5, ``epsilon`` inf are rejected); values saved as "callable not saved" markers are
  allowed (the loading optimizer keeps its own);
- non-slot variables: 0-dim tensors, finite; the ``step`` counter an integer dtype and >= 0; a
  group whose parameters have slots must carry every non-slot variable (e.g. ``beta1_power``) —
  nothing is silently re-initialised;
- slots: exactly the algorithm's slot names (no missing, no extra), each a dense tensor of the
  parameter's shape (0-dim for scalar slots), of the dtype the optimizer would create
  (the parameter's, or the slot's fixed dtype), and finite.

Example::

    opt = trainop.AdamOptimizer([w], learning_rate=0.1)
    sd = opt.state_dict(); sd["param_groups"][0]["beta1"] = 1.5
    opt.load_state_dict(sd)   # ValueError: ... group 0: Expected `beta1` in [0, 1), got 1.5
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from trainop.contract.validation import describe

__all__ = ["validate_optimizer_state"]


def _fail(kind: type[Exception], where: str, message: str) -> None:
    raise kind(f"Invalid optimizer checkpoint, {where}: {message}")


def _check_finite_tensor(where: str, key: str, value: Any) -> None:
    if not isinstance(value, torch.Tensor):
        _fail(TypeError, where, f"Expected `{key}` to be a tensor, got {describe(value)}")
    if value.layout != torch.strided:
        _fail(ValueError, where, f"Expected `{key}` to be a dense tensor, got layout "
                                 f"{value.layout}")
    if (value.is_floating_point() or value.is_complex()) and not bool(
            torch.isfinite(value).all()):
        _fail(ValueError, where, f"Expected `{key}` to be finite, it holds NaN or inf")


def _check_structure(opt: Any, state_dict: Any) -> list[tuple[int, torch.Tensor, dict]]:
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"Expected `state_dict` to be a dict, got {describe(state_dict)}")
    for key in ("state", "param_groups"):
        if key not in state_dict:
            raise ValueError(f"Expected `state_dict` to have the key {key!r}, got keys "
                             f"{sorted(map(str, state_dict))}")
    groups, state = state_dict["param_groups"], state_dict["state"]
    if not isinstance(state, Mapping):
        raise TypeError(f"Expected `state_dict['state']` to be a dict, got {describe(state)}")
    if not isinstance(groups, list | tuple) or len(groups) != len(opt.param_groups):
        raise ValueError(f"Expected `state_dict['param_groups']` to be a list of "
                         f"{len(opt.param_groups)} groups, got {describe(groups)}")
    seen: set[int | str] = set()
    triples = []
    for g, (saved, own) in enumerate(zip(groups, opt.param_groups, strict=True)):
        where = f"group {g}"
        if not isinstance(saved, Mapping):
            _fail(TypeError, where, f"Expected a dict, got {describe(saved)}")
        ids = saved.get("params")
        if not isinstance(ids, list | tuple) or len(ids) != len(own["params"]):
            _fail(ValueError, where, f"Expected `params` to list {len(own['params'])} "
                                     f"parameter ids, got {describe(ids)}")
        for i, pid in enumerate(ids):
            # ints (torch's state_dict) or parameter names (torch.distributed.checkpoint's
            # get_optimizer_state_dict); matched by position, as torch does
            if not isinstance(pid, int | str) or isinstance(pid, bool) or pid in seen:
                _fail(ValueError, where, f"Expected `params[{i}]` to be a parameter id (int) "
                                         f"or name (str) not used before, got {describe(pid)}")
            seen.add(pid)
        triples.append((g, saved, own))
    extra = [k for k in state if k not in seen]
    if extra:
        raise ValueError(f"Invalid optimizer checkpoint: `state` has entries for ids {extra[:5]} "
                         f"that no group lists")
    return triples


def _check_hyperparameters(opt: Any, where: str, saved: Mapping, unsaved: str,
                           bookkeeping: tuple[str, ...]) -> None:
    values = {k: v for k, v in saved.items()
              if k not in bookkeeping and not (isinstance(v, str) and v == unsaved)}
    try:
        opt._validate_group_values(values)
    except (TypeError, ValueError) as err:
        raise type(err)(f"Invalid optimizer checkpoint, {where}: {err}") from None


def _check_non_slot(opt: Any, where: str, saved: Mapping, has_slots: bool) -> None:
    non_slot = saved.get("non_slot", {})
    if not isinstance(non_slot, Mapping):
        _fail(TypeError, where, f"Expected `non_slot` to be a dict, got {describe(non_slot)}")
    for key, value in non_slot.items():
        _check_finite_tensor(where, f"non_slot[{key!r}]", value)
        if value.dim() != 0:
            _fail(ValueError, where, f"Expected `non_slot[{key!r}]` to be 0-dim, got shape "
                                     f"{tuple(value.shape)}")
    step = non_slot.get("step")
    if step is not None:
        if step.is_floating_point() or step.is_complex() or step.dtype == torch.bool:
            _fail(TypeError, where, f"Expected the step counter `non_slot['step']` to have an "
                                    f"integer dtype, got {step.dtype}")
        if int(step) < 0:
            _fail(ValueError, where, f"Expected the step counter `non_slot['step']` >= 0, got "
                                     f"{int(step)}")
    missing = [n for n in opt._non_slot_names if n not in non_slot]
    if has_slots and missing:
        _fail(ValueError, where, f"Expected the non-slot variables {missing} (saved after "
                                 f"a step); they are missing and would be re-initialised")


def _check_slots(opt: Any, where: str, group: Mapping, param: torch.Tensor, saved: Any) -> None:
    if not isinstance(saved, Mapping):
        _fail(TypeError, where, f"Expected the slots to be a dict, got {describe(saved)}")
    specs = {s.name: s for s in opt._slot_specs(group)}
    missing = sorted(set(specs) - set(saved))
    extra = sorted(set(saved) - set(specs), key=str)
    if missing or extra:
        _fail(ValueError, where, f"Expected the slots {sorted(specs)}, got {sorted(saved, key=str)}"
                                 f" (missing {missing}, unexpected {extra})")
    for name, spec in specs.items():
        tensor = saved[name]
        _check_finite_tensor(where, name, tensor)
        shape = () if spec.scalar else tuple(param.shape)
        if tuple(tensor.shape) != shape:
            _fail(ValueError, where, f"Expected slot `{name}` of shape {shape}, got "
                                     f"{tuple(tensor.shape)}")
        dtype = spec.dtype or param.dtype
        if tensor.dtype != dtype:
            _fail(TypeError, where, f"Expected slot `{name}` of dtype {dtype}, got "
                                    f"{tensor.dtype}")


def validate_optimizer_state(opt: Any, state_dict: Any, *, unsaved: str,
                             bookkeeping: tuple[str, ...]) -> None:
    """Raise ``ValueError``/``TypeError`` if ``state_dict`` cannot be loaded into ``opt``
    exactly (see the module docstring); reads only.

    ``unsaved`` is the marker ``state_dict`` writes for a callable hyperparameter;
    ``bookkeeping`` the group keys that are not hyperparameters.
    """
    triples = _check_structure(opt, state_dict)
    state = state_dict["state"]
    index = 0
    for g, saved, own in triples:
        where = f"group {g}"
        _check_hyperparameters(opt, where, saved, unsaved, bookkeeping)
        merged = {**own, **{k: v for k, v in saved.items()
                            if not (isinstance(v, str) and v == unsaved)}}
        has_slots = any(pid in state for pid in saved["params"])
        _check_non_slot(opt, where, saved, has_slots and bool(opt._slot_specs(merged)))
        for pid, param in zip(saved["params"], own["params"], strict=True):
            if pid in state:
                _check_slots(opt, f"{where}, parameter index {index} (id {pid})", merged, param,
                             state[pid])
            index += 1

