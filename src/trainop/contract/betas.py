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
- ``state_dict`` saves reconciled groups; ``load_state_dict`` takes the checkpoint's
  ``beta1``/``beta2`` (validated with the rest of the checkpoint) and rewrites ``betas`` from
  them, so a checkpoint saved before ``betas`` existed loads too.

The torch spelling ``betas=`` as a constructor argument stays refused (``torch_style``): the
TF signature has ``beta1``/``beta2``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["KEY", "adopt_group", "check_given", "has_betas", "reset", "sync"]

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


def sync(seen: Seen, group: dict, validate: Callable[[Mapping[str, Any]], None]) -> None:
    """Reconcile ``group``'s ``betas`` with ``beta1``/``beta2`` (see the module docstring)."""
    betas = group.get(KEY)
    beta1, beta2 = group["beta1"], group["beta2"]
    if betas is not None and len(betas) == 2 and betas[0] is beta1 and betas[1] is beta2:
        return  # nothing written since the last reconciliation (or equal objects anyway)
    record = seen.get(id(group))
    last = record[1] if record is not None and record[0] is group else None
    if betas is None or betas is last:  # beta1/beta2 were written (or betas never made)
        _record(seen, group, (beta1, beta2))
        return
    pair = _as_pair(betas, "in the param group")
    if pair == (beta1, beta2):
        _record(seen, group, (beta1, beta2))
        return
    validate(dict(zip(_PAIR, pair, strict=True)))
    _record(seen, group, pair)
    group["beta1"], group["beta2"] = pair


def reset(seen: Seen, groups: list[dict]) -> None:
    """After a load: ``betas`` rewritten from each group's (validated) ``beta1``/``beta2``."""
    seen.clear()
    for group in groups:
        _record(seen, group, (group["beta1"], group["beta2"]))
