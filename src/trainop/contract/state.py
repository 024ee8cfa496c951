"""``optimizer.state`` that counts its own changes, so a cached step plan notices them.

The torch-style ``step()`` keeps the slot tensors of every parameter in a cached plan (see
``_step_plan``) instead of reading ``optimizer.state[p][name]`` for each parameter at each step.
Users change the state directly, though, as torch's optimizers allow: they replace a slot
(``opt.state[p]["momentum"] = t``), a parameter's whole entry (``opt.state[p] = {...}``,
``del opt.state[p]``), or everything (``opt.state.clear()``, ``opt.state = defaultdict(dict)``
to reset the optimizer). A plan that kept the old tensors would then update tensors that are
no longer the state: silently wrong training.

``OptimizerState`` is a ``defaultdict(dict)`` whose entries are ``SlotState`` dicts; every
mutating call on either bumps ``OptimizerState.version`` (one integer, compared in O(1) per
step). A state object that is not an ``OptimizerState`` (assigned by the user, or by torch's
``load_state_dict``) is adopted into one before the next step (``adopt``); plain entry dicts are
wrapped at the same time (``wrap_entries``), so after ``opt.state[p] = d`` the optimizer holds
a copy of ``d``: keep changing ``opt.state[p]``, not ``d``. Changes made in place to a slot
tensor (``opt.state[p]["m"].zero_()``) need no tracking: the plan holds that very tensor.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

__all__ = ["STEP_LIMIT", "STEP_MAX", "OptimizerState", "SlotState", "adopt"]

#: The largest int64 value.
STEP_MAX = 2**63 - 1
#: The largest step counter a checkpoint may hold: it leaves 2**62 (4.6e18) updates before the
#: int64 counter would wrap negative, so the per-step increment needs no check (no host read).
STEP_LIMIT = 2**62


class _Counted:
    """Mutating dict methods that report every change through ``_changed``."""

    __slots__ = ()

    def _changed(self) -> None:
        raise NotImplementedError

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        self._changed()

    def __ior__(self, other):
        super().__ior__(other)
        self._changed()
        return self

    def clear(self) -> None:
        super().clear()
        self._changed()

    def pop(self, *args):
        value = super().pop(*args)
        self._changed()
        return value

    def popitem(self):
        item = super().popitem()
        self._changed()
        return item

    def setdefault(self, key, default=None):
        value = super().setdefault(key, default)
        self._changed()
        return value

    def update(self, *args, **kwargs) -> None:
        super().update(*args, **kwargs)
        self._changed()


class SlotState(_Counted, dict):
    """One parameter's state entry (slot name -> tensor) that reports changes to its owner."""

    __slots__ = ("_owner",)

    def __init__(self, owner: OptimizerState | None = None, *args: Any, **kwargs: Any) -> None:
        self._owner = owner
        super().__init__(*args, **kwargs)

    def _changed(self) -> None:
        owner = getattr(self, "_owner", None)  # unset while unpickling: nothing to report
        if owner is not None:
            owner.version += 1

    def __reduce__(self):
        # Pickled and deep-copied without the owner, which re-links its entries when the next
        # step adopts it (``OptimizerState.wrap_entries``).
        return (SlotState, (None, dict(self)))


class OptimizerState(_Counted, defaultdict):
    """``defaultdict(dict)`` from parameter to its ``SlotState``, with a change counter."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.version = 0
        super().__init__(*args, **kwargs)

    def _changed(self) -> None:
        self.version += 1

    def __missing__(self, key):
        # an entry made by reading ``opt.state[p]`` is one of this state's own entries (an
        # entry assigned whole, ``opt.state[p] = {...}``, is a loader's: outside_load.py)
        if self.default_factory is not dict:
            return super().__missing__(key)
        self[key] = entry = SlotState(self)
        return entry

    def __reduce__(self):
        return (OptimizerState, (self.default_factory, dict(self)))

    def wrap_entries(self) -> None:
        """Make every entry a ``SlotState`` of this object (plain dicts are copied into one),
        without counting a change: the entries keep their contents."""
        for key, entry in self.items():
            if not isinstance(entry, Mapping):  # a non-parameter entry (opt.state["n"] = 1)
                continue
            if type(entry) is not SlotState or entry._owner is not self:
                dict.__setitem__(self, key, SlotState(self, entry))


def adopt(state: Mapping) -> OptimizerState:
    """``state`` itself if it is an ``OptimizerState``, else a new one with its entries (the
    user assigned ``opt.state``, or torch's ``load_state_dict`` did)."""
    if type(state) is OptimizerState:
        return state
    adopted = OptimizerState(dict, state)
    adopted.wrap_entries()
    return adopted

