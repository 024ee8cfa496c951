"""State loaded around ``load_state_dict``: validated whole before the next update.

Some loaders write an optimizer's state and group keys directly instead of calling its
``load_state_dict``: ``torch.distributed.optim.ZeroRedundancyOptimizer.load_state_dict`` assigns
``local_optimizer.state[param]`` and copies every group key (trainop's ``non_slot`` counters
included) into the local optimizer's groups; RETURNN-style code may replace a group's
``non_slot``. trainop's own validation (``contract/checkpoint.py``) would not run, so a
checkpoint ``load_state_dict`` refuses (a group whose parameters have slots but whose Adam beta
powers are missing: they would be re-initialised, restarting the bias correction) would train
on silently.

Every such loader replaces the groups' ``non_slot`` dicts (a load never edits the optimizer's
own dicts in place). ``Optimizer`` remembers the ``non_slot`` dict of each group it made or
loaded (``noted``); when, at the start of an update, a group holds another one (or the groups
changed in number), ``check_outside_load`` validates the optimizer's whole live state as
``load_state_dict`` validates a checkpoint (the same checks, the same messages), before anything
changes. Per step that costs one identity comparison per group.

A loader that assigns the same state to several processes (ZeRO: each rank's local optimizer
holds only its own parameters' slots) is checked by each process on what it holds: the ranks
that hold a parameter of a group without its counters refuse it.
"""

from __future__ import annotations

from typing import Any

from trainop.contract.checkpoint import validate_optimizer_state

__all__ = ["check_outside_load", "noted"]


def noted(opt: Any) -> tuple:
    """The groups' ``non_slot`` dicts as they are now (what ``check_outside_load`` compares)."""
    return tuple(group.get("non_slot") for group in opt.param_groups)


def _unchanged(opt: Any) -> bool:
    seen, groups = getattr(opt, "_counters_seen", ()), opt.param_groups
    return len(seen) == len(groups) and all(
        s is group.get("non_slot") for s, group in zip(seen, groups, strict=True))


def _live_state_dict(opt: Any) -> dict[str, Any]:
    """The optimizer's groups and state in ``state_dict``'s shape (parameter ids by position),
    without running its state-dict hooks; entries not yet made (empty, as reading
    ``opt.state[p]`` leaves them) are left out, as the update makes them."""
    state, groups, index = {}, [], 0
    for group in opt.param_groups:
        ids = []
        for p in group["params"]:
            entry = opt.state.get(p)
            if entry:
                state[index] = dict(entry)
            ids.append(index)
            index += 1
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
    return {"state": state, "param_groups": groups}


def check_outside_load(opt: Any, *, unsaved: str, bookkeeping: tuple[str, ...]) -> None:
    """Raise as ``load_state_dict`` would if a group's ``non_slot`` was replaced since the
    optimizer last made or checked it (see the module docstring); reads only."""
    if _unchanged(opt):
        return
    validate_optimizer_state(opt, _live_state_dict(opt), unsaved=unsaved,
                             bookkeeping=bookkeeping)
    opt._counters_seen = noted(opt)
