"""torch's ``betas`` key in the param groups of the classes with ``beta1`` and ``beta2``.

torch's Adam-family groups hold ``betas = (beta1, beta2)``; torch's schedulers that cycle the
momentum (``OneCycleLR``, ``CyclicLR`` with ``cycle_momentum=True``) look for ``betas`` in
``optimizer.defaults`` and write ``group["betas"] = (m, beta2)``. trainop's groups keep TF's
``beta1``/``beta2`` (what the update rule reads) and carry ``betas`` beside them, always equal to
``(beta1, beta2)`` when an update reads them:

- at the start of each update of a group (``sync``): if ``betas`` is the tuple recorded at the
  last reconciliation but ``beta1``/``beta2`` changed, ``betas`` is rewritten from them; if
  ``betas`` was replaced (a scheduler, a user), ``beta1``/``beta2`` are taken from it, after
  the same range checks the constructor makes (nothing changes when they fail). When both were
  written since the last update, ``betas`` wins (it is what torch's schedulers write). The
  cost when nothing changed is one identity check of two floats.
- ``add_param_group``: a group that gives ``betas`` gets ``beta1``/``beta2`` from it (giving
  both spellings with other values is a ``ValueError``); otherwise ``betas`` is made from them.
- Every group is checked before any is written: one group's invalid ``betas`` refuses the
  update with the group named, and no group has changed.
- ``state_dict`` saves reconciled groups; a group whose pending ``betas`` is invalid is saved
  with the ``beta1``/``beta2`` its updates so far used (and ``betas`` equal to them), with a
  warning naming the group, so a checkpoint can still be saved; the live group is left as it
  is. ``load_state_dict`` validates ``beta1``/``beta2`` and ``betas`` with the rest of the
  checkpoint; where they differ (a checkpoint saved by code that does not reconcile, such as
  a wrapper's own groups, after a scheduler wrote ``betas``) the group takes ``betas``, as
  its next update would have; a checkpoint saved before ``betas`` existed gets it from
  ``beta1``/``beta2``.

The torch spelling ``betas=`` as a constructor argument stays refused (``torch_style``): the
TF signature has ``beta1``/``beta2``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["KEY", "adopt_group", "check_given", "has_betas", "reconciled", "reset",
           "sync", "sync_valid"]

KEY = "betas"
_PAIR = ("beta1", "beta2")

#: ``id(group) -> (group, the betas tuple recorded at the last reconciliation)``.
Seen = dict[int, tuple[dict, tuple]]


def has_betas(defaults: Mapping[str, Any]) -> bool:
    """Whether a class's groups carry ``betas`` (its hyperparameters include both betas)."""
    return all(name in defaults for name in _PAIR)


def _record(seen: Seen, group: dict, betas: tuple) -> None:
    group[KEY] = betas
    seen[id(group)] = (group, betas)


def _as_pair(value: Any, where: str) -> tuple:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise TypeError(f"Expected `betas` {where} to be a pair (beta1, beta2), got {value!r}")
    return tuple(value)


def adopt_group(seen: Seen, group: dict, given: bool) -> None:
    """Make ``group`` (filled with the defaults) carry consistent betas. ``given``: the caller's
    group had a ``betas`` key, checked by ``check_given`` (then it decides ``beta1``/``beta2``)."""
    betas = tuple(group[KEY]) if given else (group["beta1"], group["beta2"])
    _record(seen, group, betas)
    group["beta1"], group["beta2"] = betas


def check_given(group: Mapping[str, Any], validate: Callable[[Mapping[str, Any]], None]) -> None:
    """Before a param group giving ``betas`` is added: ``TypeError`` unless it is a pair,
    ``ValueError`` where ``beta1``/``beta2`` are given beside it with other values, and
    ``validate``'s errors for a beta out of its range."""
    if KEY not in group:
        return
    betas = _as_pair(group[KEY], "in the param group")
    for name, value in zip(_PAIR, betas, strict=True):
        if name in group and group[name] is not value and group[name] != value:
            raise ValueError(f"Expected the param group's `{name}` to equal `betas`'s, got "
                             f"{name}={group[name]!r} and betas={betas!r}; give one spelling")
    validate(dict(zip(_PAIR, betas, strict=True)))


def reconciled(group: Mapping[str, Any]) -> bool:
    """Whether ``group``'s ``betas`` holds the very ``beta1``/``beta2`` objects (nothing
    written since the last reconciliation): one identity check of two floats."""
    betas = group.get(KEY)
    return (isinstance(betas, tuple | list) and len(betas) == 2
            and betas[0] is group["beta1"] and betas[1] is group["beta2"])


def _pending(seen: Seen, group: dict) -> tuple | None:
    """The pair ``sync`` would take from ``betas`` into ``beta1``/``beta2``; ``None`` when it
    takes nothing (``betas`` missing, unchanged, or equal to them). Writes nothing."""
    betas = group.get(KEY)
    beta1, beta2 = group["beta1"], group["beta2"]
    if betas is None or reconciled(group):
        return None  # nothing written since the last reconciliation (or the same objects)
    record = seen.get(id(group))
    if record is not None and record[0] is group and betas is record[1]:
        return None  # beta1/beta2 were written since: they win
    pair = _as_pair(betas, "in the param group")
    return None if pair == (beta1, beta2) else pair


def _check(seen: Seen, index: int, group: dict,
           validate: Callable[[Mapping[str, Any]], None]) -> tuple | None:
    """``_pending``, and its range checks, with the group named in the error."""
    try:
        pair = _pending(seen, group)
        if pair is not None:
            validate(dict(zip(_PAIR, pair, strict=True)))
    except (TypeError, ValueError) as error:
        raise type(error)(f"{error} (param_groups[{index}]['betas'] = {group[KEY]!r})"
                          ) from None
    return pair


def _take(seen: Seen, group: dict, pair: tuple | None) -> None:
    if pair is None:
        if not reconciled(group):
            _record(seen, group, (group["beta1"], group["beta2"]))
        return
    _record(seen, group, pair)
    group["beta1"], group["beta2"] = pair


def sync(seen: Seen, groups: list[dict],
         validate: Callable[[Mapping[str, Any]], None]) -> None:
    """Reconcile every group's ``betas`` with ``beta1``/``beta2`` (see the module docstring):
    every group is checked before any is written, so one group's invalid ``betas`` leaves the
    others as they were too."""
    pairs = [_check(seen, i, group, validate) for i, group in enumerate(groups)]
    for group, pair in zip(groups, pairs, strict=True):
        _take(seen, group, pair)


def sync_valid(seen: Seen, groups: list[dict],
               validate: Callable[[Mapping[str, Any]], None]) -> dict[int, str]:
    """``sync`` for ``state_dict``: the groups whose pending ``betas`` are invalid are left
    as they are and returned (index -> the reason), the others are reconciled."""
    invalid: dict[int, str] = {}
    for i, group in enumerate(groups):
        try:
            pair = _check(seen, i, group, validate)
        except (TypeError, ValueError) as error:
            invalid[i] = str(error)
            continue
        _take(seen, group, pair)
    return invalid


def reset(seen: Seen, groups: list[dict]) -> None:
    """After a load (the checkpoint validated whole): a group whose saved ``betas`` differs
    from its ``beta1``/``beta2`` takes ``betas``, as its next update would have; a group
    saved without ``betas`` gets it from ``beta1``/``beta2``."""
    seen.clear()
    for group in groups:
        pair = tuple(group[KEY]) if KEY in group else (group["beta1"], group["beta2"])
        _record(seen, group, pair)
        group["beta1"], group["beta2"] = pair
