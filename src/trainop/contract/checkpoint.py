"""Validation of an optimizer checkpoint before ``load_state_dict`` changes anything.

``validate_optimizer_state(opt, state_dict)`` reads the whole checkpoint and raises a
``ValueError``/``TypeError`` naming the group, the parameter index and the key of the first
problem; it never mutates ``opt`` or ``state_dict``. ``Optimizer.load_state_dict`` calls it
(after torch's load pre-hooks, before anything is loaded), so a rejected checkpoint leaves the
optimizer bit-identical. It checks:

- format: a ``torch.optim`` checkpoint (groups without trainop's ``non_slot`` counters and with
  torch's keys such as ``betas``/``amsgrad``/``momentum``/``foreach``, or state entries such as
  ``exp_avg``/``step``/``momentum_buffer``) is recognised and rejected with a message naming
  ``trainop.checkpoints.from_torch_optim`` (see ``checkpoint_foreign``);
- structure: ``state`` and ``param_groups`` present, as many groups and parameters per group as
  the optimizer has, integer parameter ids (or names) without repeats; ``state`` entries under a
  key no group lists are kept as non-parameter entries (``opt.state["note"] = {...}``, as torch
  does), except integer keys, which can only be a parameter's state that no group lists;
- group keys: every hyperparameter of the loading optimizer's group present, no key it does not
  have (``amsgrad``, ``betas`` in an Adam group are rejected, not carried along unused); the
  bookkeeping keys ``params``/``param_names``/``initial_lr`` and the keys torch's LR schedulers
  write are allowed;
- hyperparameters: with the constructor's own ranges and choices (``lr`` NaN or negative,
  ``beta1`` 1.5, ``epsilon`` inf are rejected); values saved as "callable not saved" markers are
  allowed (the loading optimizer keeps its own);
- non-slot variables: ``non_slot`` a dict holding only ``step`` and the algorithm's own
  variables; each a finite 0-dim tensor; ``step`` an integer dtype in [0, 2**62] (loaded as
  int64; the bound leaves 2**62 updates before int64 would wrap, so stepping never checks);
  the algorithm's variables float32 (TF's kernels read them so) and inside their declared range
  (Adam's beta powers in [0, 1): a power of 1 divides by zero at the next step); a group whose
  parameters have slots must carry every one of them and ``step`` (nothing is silently
  re-initialised);
- slots: every one of the algorithm's slot names and no other trainop optimizer's
  (``TRAINOP_SLOT_NAMES``); other keys are a wrapper's per-parameter state (timm's
  ``Lookahead`` keeps ``lookahead_slow_buff`` beside the slots), kept unchecked as torch keeps
  them. Each slot a dense real
  floating-point tensor of the parameter's shape (0-dim for scalar slots), finite, and >= 0 for
  the slots whose rule takes their root (``SlotSpec.nonnegative``: Adam's ``v``, Adagrad's
  accumulator, RMSProp's ``rms``, ...). A slot of another floating dtype is cast on load to the
  dtype the optimizer would create (the parameter's, as torch casts its state after
  ``model.double()``, or the slot's fixed dtype); it must be finite in that dtype. A slot of
  a DTensor parameter (FSDP2) is a DTensor, and a plain parameter's slot a plain tensor (a
  per-tensor 0-dim slot is plain for both).

Example::

    opt = trainop.AdamOptimizer([w], learning_rate=0.1)
    sd = opt.state_dict(); sd["param_groups"][0]["beta1"] = 1.5
    opt.load_state_dict(sd)   # ValueError: ... group 0: Expected `beta1` in [0, 1), got 1.5
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from trainop.contract.checkpoint_foreign import check_not_foreign
from trainop.contract.slots import TRAINOP_SLOT_NAMES, slot_dtype
from trainop.contract.state import STEP_LIMIT
from trainop.contract.validation import describe
from trainop.kernels.shards import is_sharded

__all__ = ["LR_SCHEDULER_KEYS", "validate_loadable",
           "validate_optimizer_state"]

#: Group keys torch's LR schedulers add (``OneCycleLR``, ``CyclicLR``; ``initial_lr`` is
#: bookkeeping): allowed in a checkpoint's group even where the loading optimizer has none yet.
LR_SCHEDULER_KEYS = frozenset({"initial_lr", "max_lr", "min_lr", "base_lr", "max_momentum",
                               "base_momentum"})


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


def _is_parameter_key(key: Any, listed: set) -> bool:
    """Whether a ``state`` key of a checkpoint is a parameter's entry: one a group lists, or any
    integer (torch's parameter ids). Other keys (``"note"``) are non-parameter entries."""
    return key in listed or (isinstance(key, int) and not isinstance(key, bool))


def _check_structure(opt: Any, state_dict: Any) -> list[tuple[int, Mapping, dict]]:
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
    extra = [k for k in state if k not in seen and _is_parameter_key(k, seen)]
    if extra:
        raise ValueError(f"Invalid optimizer checkpoint: `state` has entries for ids {extra[:5]} "
                         f"that no group lists")
    return triples


def _check_group_keys(where: str, saved: Mapping, own: Mapping,
                      bookkeeping: tuple[str, ...]) -> None:
    required = [k for k in own if k not in bookkeeping and k not in LR_SCHEDULER_KEYS
                and k != "betas"]  # optional: made from beta1/beta2 when missing (betas.py)
    missing = [k for k in [*required, "non_slot"] if k not in saved]
    unknown = sorted((k for k in saved if k not in own and k not in bookkeeping
                      and k not in LR_SCHEDULER_KEYS), key=str)
    if missing:
        _fail(ValueError, where, f"Expected the group keys {sorted([*required, 'non_slot'])}, "
                                 f"missing {missing}")
    if unknown:
        _fail(ValueError, where, f"Expected only the group keys of this optimizer "
                                 f"{sorted([*required, 'non_slot'])}, got unknown {unknown} "
                                 f"(they would be carried along unused)")


def _check_hyperparameters(opt: Any, where: str, saved: Mapping, unsaved: str,
                           bookkeeping: tuple[str, ...]) -> None:
    values = {k: v for k, v in saved.items()
              if k not in bookkeeping and not (isinstance(v, str) and v == unsaved)}
    try:
        opt._validate_group_values(values)
    except (TypeError, ValueError) as err:
        raise type(err)(f"Invalid optimizer checkpoint, {where}: {err}") from None
    betas = values.get("betas")  # taken over beta1/beta2 where they differ (betas.reset)
    if betas is None:
        return
    if not isinstance(betas, tuple | list) or len(betas) != 2:
        _fail(TypeError, where, f"Expected `betas` to be a pair (beta1, beta2), got {betas!r}")
    try:
        opt._validate_group_values({"beta1": betas[0], "beta2": betas[1]})
    except (TypeError, ValueError) as err:
        raise type(err)(f"Invalid optimizer checkpoint, {where}: {err} (in `betas` = "
                        f"{betas!r})") from None


def _check_step(where: str, step: torch.Tensor) -> None:
    if step.is_floating_point() or step.is_complex() or step.dtype == torch.bool:
        _fail(TypeError, where, f"Expected the step counter `non_slot['step']` to have an "
                                f"integer dtype, got {step.dtype}")
    if int(step) < 0:
        _fail(ValueError, where, f"Expected the step counter `non_slot['step']` >= 0, got "
                                 f"{int(step)}")
    if int(step) > STEP_LIMIT:
        _fail(ValueError, where, f"Expected the step counter `non_slot['step']` <= 2**62 (the "
                                 f"int64 counter must not wrap negative as training goes on), "
                                 f"got {int(step)}")


def _check_non_slot(opt: Any, where: str, saved: Mapping, has_slots: bool) -> None:
    non_slot = saved["non_slot"]
    if not isinstance(non_slot, Mapping):
        _fail(TypeError, where, f"Expected `non_slot` to be a dict, got {describe(non_slot)}")
    known = ("step", *opt._non_slot_names)
    unknown = sorted((k for k in non_slot if k not in known), key=str)
    if unknown:
        _fail(ValueError, where, f"Expected the non-slot variables to be among {list(known)}, "
                                 f"got unknown {unknown}")
    for key, value in non_slot.items():
        _check_finite_tensor(where, f"non_slot[{key!r}]", value)
        if value.dim() != 0:
            _fail(ValueError, where, f"Expected `non_slot[{key!r}]` to be 0-dim, got shape "
                                     f"{tuple(value.shape)}")
        if key == "step":
            _check_step(where, value)
            continue
        if value.dtype != torch.float32:
            _fail(TypeError, where, f"Expected `non_slot[{key!r}]` to be float32 (TF's "
                                    f"kernels read it so), got {value.dtype}")
        allowed = opt._non_slot_ranges.get(key)
        if allowed is not None and float(value) not in allowed:
            _fail(ValueError, where, f"Expected `non_slot[{key!r}]` in {allowed}, got "
                                     f"{float(value)!r}")
    missing = [n for n in ("step", *opt._non_slot_names) if n not in non_slot]
    if has_slots and missing:
        _fail(ValueError, where, f"Expected the non-slot variables {missing} (saved after "
                                 f"a step); they are missing and would be re-initialised")


#: A slot that is not sharded as its parameter is (a plain tensor for an FSDP2 DTensor
#: parameter: the step would fail with torch's "mixed Tensor and DTensor").
_SHARDED = ("Expected slot `{name}` to be a {param} like its parameter, got a {slot} (an FSDP2 "
            "optimizer loads the sharded state of `get_optimizer_state_dict`/"
            "`set_optimizer_state_dict`; a full, unsharded one through "
            "`set_optimizer_state_dict(..., options=StateDictOptions(full_state_dict=True))`)")


def _local(value: Any) -> Any:
    """This rank's shard of a DTensor; anything else as it is."""
    return value.to_local() if is_sharded(value) else value


def _kind(tensor: torch.Tensor) -> str:
    return "DTensor" if is_sharded(tensor) else "plain tensor"


def _check_slots(opt: Any, where: str, group: Mapping, param: torch.Tensor, saved: Any) -> None:
    if not isinstance(saved, Mapping):
        _fail(TypeError, where, f"Expected the slots to be a dict, got {describe(saved)}")
    specs = {s.name: s for s in opt._slot_specs(group)}
    missing = sorted(set(specs) - set(saved))
    # keys a wrapper adds (timm's Lookahead: ``lookahead_slow_buff``) are kept as torch keeps
    # them; another trainop optimizer's slot is refused (``TRAINOP_SLOT_NAMES``)
    extra = sorted((k for k in saved if k not in specs and k in TRAINOP_SLOT_NAMES), key=str)
    if missing or extra:
        _fail(ValueError, where, f"Expected the slots {sorted(specs)}, got {sorted(saved, key=str)}"
                                 f" (missing {missing}, unexpected {extra})")
    # values are checked on this rank's shard of a DTensor (no collective: under FSDP2 the
    # ranks' checks may stop at different points; contract/rank_agreement.py joins them)
    local = {name: _local(saved[name]) for name in specs}
    for name, spec in specs.items():
        tensor = saved[name]
        _check_finite_tensor(where, name, local[name])
        shape = () if spec.scalar else tuple(param.shape)
        if tuple(tensor.shape) != shape:
            _fail(ValueError, where, f"Expected slot `{name}` of shape {shape}, got "
                                     f"{tuple(tensor.shape)}")
        if not spec.scalar and is_sharded(param) != is_sharded(tensor):
            _fail(TypeError, where, _SHARDED.format(name=name, param=_kind(param),
                                                    slot=_kind(tensor)))
        dtype = slot_dtype(spec, param)
        if not tensor.is_floating_point() and tensor.dtype != dtype:
            _fail(TypeError, where, f"Expected slot `{name}` of dtype {dtype}, got "
                                    f"{tensor.dtype} (a floating dtype would be cast on load)")
        values = local[name]
        if tensor.dtype != dtype and not bool(torch.isfinite(values.to(dtype)).all()):
            _fail(ValueError, where, f"Expected slot `{name}` to be finite in {dtype} (it is "
                                     f"cast to the parameter's dtype on load), it overflows")
        if spec.nonnegative and bool((values < 0).any()):
            _fail(ValueError, where, f"Expected slot `{name}` >= 0 (the update takes its "
                                     f"square root), it holds {float(values.min())!r}")
    broken = opt._slot_invariant(group, {name: local[name].to(slot_dtype(spec, param))
                                         for name, spec in specs.items()})
    if broken:
        _fail(ValueError, where, broken)


def validate_loadable(obj: Any, state_dict: Any) -> None:
    """Raise if ``obj.load_state_dict(state_dict)`` would fail, changing nothing: trainop's
    objects check themselves (``validate_state_dict``); for another ``torch.optim`` optimizer
    (the Updater's torch backend) the checks torch makes before it changes anything (keys, the
    number of groups and of parameters per group) are made here, so that a composite (the
    Updater's groups) can check every part before loading the first."""
    validate = getattr(obj, "validate_state_dict", None)
    if validate is not None:
        validate(state_dict)
        return
    if not isinstance(obj, torch.optim.Optimizer):
        return
    if not isinstance(state_dict, Mapping) or not {"state", "param_groups"} <= set(state_dict):
        raise ValueError(f"Expected a {type(obj).__name__} state_dict with the keys 'state' and "
                         f"'param_groups', got {describe(state_dict)}")
    groups = state_dict["param_groups"]
    if not isinstance(groups, list | tuple) or [
            len(g.get("params", ())) if isinstance(g, Mapping) else None for g in groups] != [
            len(g["params"]) for g in obj.param_groups]:
        raise ValueError(f"Expected the param groups of the {type(obj).__name__} checkpoint to "
                         f"hold {[len(g['params']) for g in obj.param_groups]} parameters, got "
                         f"{describe(groups)}")
    _check_torch_entries(obj, state_dict)


def _check_torch_entries(obj: torch.optim.Optimizer, state_dict: Mapping) -> None:
    """What torch's ``load_state_dict`` does not check: each saved state belongs to a
    parameter id of the saved groups, and its tensors are finite and shaped for that parameter
    (0-dim, or each dimension the parameter's or 1: Adafactor's factored rows and columns)."""
    ids = [i for g in state_dict["param_groups"] for i in g["params"]]
    params = [p for g in obj.param_groups for p in g["params"]]
    shapes = dict(zip(ids, (tuple(p.shape) for p in params), strict=True))
    state = state_dict["state"]
    if not isinstance(state, Mapping):
        raise ValueError(f"Expected the {type(obj).__name__} checkpoint's 'state' to be a dict, "
                         f"got {describe(state)}")
    for key, entry in state.items():
        if key not in shapes or not isinstance(entry, Mapping):
            raise ValueError(f"Expected the {type(obj).__name__} checkpoint's state to be keyed "
                             f"by the parameter ids {describe(ids)}, got {describe(key)}")
        shape = shapes[key]
        for slot, value in entry.items():
            if not isinstance(value, torch.Tensor):
                continue
            if value.dim() and (value.dim() != len(shape) or any(
                    n not in (m, 1) for n, m in zip(value.shape, shape, strict=True))):
                raise ValueError(f"Expected the state {slot!r} of parameter {ids.index(key)} "
                                 f"in the {type(obj).__name__} checkpoint to have the "
                                 f"parameter's shape {shape}, got {tuple(value.shape)}: another "
                                 f"model's")
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise ValueError(f"Expected the state {slot!r} of parameter {ids.index(key)} in "
                                 f"the {type(obj).__name__} checkpoint to be finite, got NaN "
                                 f"or inf")


def validate_optimizer_state(opt: Any, state_dict: Any, *, unsaved: str,
                             bookkeeping: tuple[str, ...]) -> None:
    """Raise ``ValueError``/``TypeError`` if ``state_dict`` cannot be loaded into ``opt``
    exactly (see the module docstring); reads only.

    ``unsaved`` is the marker ``state_dict`` writes for a callable hyperparameter;
    ``bookkeeping`` the group keys that are not hyperparameters.
    """
    check_not_foreign(opt, state_dict)
    triples = _check_structure(opt, state_dict)
    state = state_dict["state"]
    index = 0
    for g, saved, own in triples:
        where = f"group {g}"
        _check_group_keys(where, saved, own, bookkeeping)
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
