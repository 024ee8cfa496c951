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

A loader may also bring the parameters' state without the counters: ZeRO copies only the group
keys the checkpoint has, so from one whose groups lack ``non_slot`` it assigns the slots and
leaves the local groups' counters as they were (a restart of the step count and of Adam's bias
correction, where ``load_state_dict`` refuses the same file). Such a loader assigns whole state
entries (``opt.state[p] = {...}``: a plain dict, not the entry the optimizer keeps). When the
state changed since the optimizer last looked (its change count, one comparison per step), the
entries are scanned once; a non-empty entry assigned whole in a group whose ``non_slot`` is
still the one the optimizer noted is refused as ``load_state_dict`` refuses a group without
``non_slot`` (the same message).

Under torch.distributed with more than one rank, the validation also compares every group's
counters across the ranks (one ``all_gather``, ``contract/rank_agreement.py``): ZeRO's ranks
each keep a copy, and copies that differ (ranks that loaded different files) are refused on every
rank. Every rank takes that update, as ZeRO's step is collective.

A loader that assigns the same state to several processes (ZeRO: each rank's local optimizer
holds only its own parameters' slots) is checked by each process on what it holds: the ranks
that hold a parameter of a group without its counters refuse it.
"""

from __future__ import annotations

from typing import Any

from trainop.contract.checkpoint import validate_optimizer_state
from trainop.contract.rank_agreement import agree_across_ranks, counter_names
from trainop.contract.state import SlotState

__all__ = ["check_outside_load", "noted", "state_noted"]


def noted(opt: Any) -> tuple:
    """The groups' ``non_slot`` dicts as they are now (what ``check_outside_load`` compares)."""
    return tuple(group.get("non_slot") for group in opt.param_groups)


def state_noted(opt: Any) -> tuple:
    """The state object and its change count as they are now (see the module docstring)."""
    return opt.state, getattr(opt.state, "version", None)


def _unchanged(opt: Any) -> bool:
    # the same dicts in the same places (both tuples hold them alive: no id is reused)
    return list(map(id, opt._counters_seen)) == list(map(id, noted(opt)))


def _live_state_dict(opt: Any, without_counters: frozenset[int] = frozenset()
                     ) -> dict[str, Any]:
    """The optimizer's groups and state in ``state_dict``'s shape (parameter ids by position),
    without running its state-dict hooks; entries not yet made (empty, as reading
    ``opt.state[p]`` leaves them) are left out, as the update makes them. The groups at the
    positions ``without_counters`` are given without ``non_slot`` (what their loader brought)."""
    state, groups, index = {}, [], 0
    for g, group in enumerate(opt.param_groups):
        ids = []
        for p in group["params"]:
            entry = opt.state.get(p)
            if entry:
                state[index] = dict(entry)
            ids.append(index)
            index += 1
        groups.append({**{k: v for k, v in group.items()
                          if not (k == "non_slot" and g in without_counters)}, "params": ids})
    return {"state": state, "param_groups": groups}


def _loaded_without_counters(opt: Any) -> frozenset[int]:
    """The positions of the groups holding a non-empty state entry assigned whole (a plain
    dict, not a ``SlotState``) while their ``non_slot`` is the one noted."""
    seen = opt._counters_seen
    state = opt.state
    out = set()
    for g, group in enumerate(opt.param_groups):
        if g >= len(seen) or seen[g] is not group.get("non_slot"):
            continue  # counters replaced too: the whole check below
        for p in group["params"]:
            entry = state.get(p)
            if entry and type(entry) is not SlotState:
                out.add(g)
                break
    return frozenset(out)


def check_outside_load(opt: Any, *, unsaved: str, bookkeeping: tuple[str, ...]) -> None:
    """Raise as ``load_state_dict`` would if a group's ``non_slot`` was replaced since the
    optimizer last made or checked it (see the module docstring); reads only."""
    seen = opt._state_seen
    same_state = seen[0] is opt.state and seen[1] == state_noted(opt)[1]
    if _unchanged(opt) and same_state:
        return
    # entries assigned whole into the state the optimizer holds (a state object replaced as a
    # whole is the user's reset or copy: adopted as it is)
    bare = frozenset() if same_state or seen[0] is not opt.state \
        else _loaded_without_counters(opt)
    if bare or not _unchanged(opt):
        error = None
        try:
            validate_optimizer_state(opt, _live_state_dict(opt, bare), unsaved=unsaved,
                                     bookkeeping=bookkeeping)
        except (TypeError, ValueError) as exc:
            error = exc
        # ZeRO's ranks each hold their own copy of the counters: they must agree (every rank
        # takes this update; contract/rank_agreement.py)
        params = [p for group in opt.param_groups for p in group["params"]]
        agree_across_ranks(counter_names(opt), None if error else [
            group.get("non_slot") for group in opt.param_groups], error,
            device=params[0].device if params else None)
    opt._counters_seen = noted(opt)
    opt._state_seen = state_noted(opt)
