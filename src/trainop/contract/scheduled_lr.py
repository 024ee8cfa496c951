"""A torch LR scheduler over a param group whose learning rate is a trainop schedule.

``Optimizer(lr=ExponentialDecay(...))`` evaluates the schedule at the group's applied-step
counter inside each update. A torch scheduler (``StepLR``, ``OneCycleLR``, ``CyclicLR``,
``LambdaLR``, ``ReduceLROnPlateau``, ...) or a timm one (``CosineLRScheduler``, ...) writes
``group["lr"]`` as a number, which would silently replace the schedule or fail deep inside the
scheduler (``StepLR``: ``lr * gamma``), after the first epoch or update. The two do not
compose.

Every torch scheduler reads ``optimizer.param_groups`` before it writes anything into a group:
its constructor (``initial_lr``, ``OneCycleLR``'s bounds and momentum, ``CyclicLR``'s base
rate) and each ``step()`` (the new rates). trainop's ``Optimizer.param_groups`` is a property
that calls ``check_reader``: when the code reading the groups is a torch scheduler (a frame of
``torch.optim.lr_scheduler``/``swa_utils``, a method of an ``LRScheduler`` subclass, or
``timm.scheduler``, whose base class reads the groups as it attaches, before it writes
``initial_lr``) and a group's ``lr`` is a trainop schedule, it raises one ``TypeError`` naming
the groups and what to do instead. Nothing has been written yet, so every group stays exactly
as it was, keys included. Wrappers that forward ``param_groups`` through a property of that
name (accelerate's ``AcceleratedOptimizer``, which HF Trainer builds) are looked through, so
the same refusal comes on every path; a schedule assigned to ``group["lr"]`` after a
scheduler was attached is refused at that scheduler's next ``step()``, before it writes a rate.

timm's ``Lookahead`` keeps the optimizer's list as its own ``param_groups`` attribute, so a
scheduler over the wrapper reads a plain attribute and never this property. A read from that
wrapper gets ``SharedGroups``: a list of the same group dicts whose iteration makes the check
above (every scheduler iterates the groups before it writes), so the refusal comes there too,
at attach and at each step.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler

from trainop.contract.hyper import is_policy

__all__ = ["SharedGroups", "check_reader", "for_reader", "own"]

#: Modules whose code is torch's LR schedulers.
_SCHEDULER_MODULES = frozenset({"torch.optim.lr_scheduler", "torch.optim.swa_utils"})
#: timm's schedulers (``timm.scheduler``: ``CosineLRScheduler``, ``StepLRScheduler``, ...; not
#: torch ``LRScheduler`` subclasses): their base class reads the groups when it attaches
#: (``initial_lr``) and at each ``step``/``step_update``, then writes ``group["lr"]``.
_TIMM_SCHEDULERS = "timm.scheduler."
#: Wrappers that hold the optimizer's group list as their own ``param_groups`` attribute
#: (timm's ``Lookahead``), read past the property by a scheduler over the wrapper.
_SHARING_WRAPPERS = frozenset({"timm.optim.lookahead"})
#: A property of this name forwarding to the optimizer's (``AcceleratedOptimizer``'s).
_FORWARDING = "param_groups"
#: How many forwarding frames are looked through (a wrapper of a wrapper of ...).
_MAX_FORWARDING = 8


def own(frame: FrameType) -> bool:
    """Whether ``frame`` is trainop's own code (the optimizer's reads in each step: the cheap
    way out of ``check_reader``)."""
    return frame.f_globals.get("__name__", "").startswith("trainop.")


def _reader(frame: FrameType | None) -> FrameType | None:
    """The frame that asked for the groups, past forwarding ``param_groups`` properties."""
    for _ in range(_MAX_FORWARDING):
        if frame is None or frame.f_code.co_name != _FORWARDING:
            return frame
        frame = frame.f_back
    return frame


def _scheduler(frame: FrameType) -> str | None:
    """Whose LR scheduler is reading the groups in ``frame`` ("torch", "timm"), or None."""
    module = frame.f_globals.get("__name__", "")
    if module in _SCHEDULER_MODULES:
        return "torch"
    if module.startswith(_TIMM_SCHEDULERS):
        return "timm"
    if module.startswith(("torch.", "trainop.")):  # torch's and trainop's own reads
        return None
    code = frame.f_code  # a method of an LRScheduler subclass written elsewhere
    if (code.co_argcount > 0 and code.co_varnames[0] == "self"
            and isinstance(frame.f_locals.get("self"), LRScheduler)):
        return "torch"
    return None


def check_reader(opt: Any, groups: list[dict]) -> None:
    """Raise ``TypeError`` if a torch LR scheduler is reading ``opt``'s ``groups`` while a
    group's ``lr`` is a trainop schedule. Called by ``Optimizer.param_groups``."""
    frame = _reader(sys._getframe(2))  # 0: here, 1: the property, 2: who read it
    kind = None if frame is None else _scheduler(frame)
    if kind is None:
        return
    policies = [i for i, group in enumerate(groups) if is_policy(group.get("lr"))]
    if not policies:
        return
    policy = groups[policies[0]]["lr"]
    raise TypeError(
        f"{type(opt).__name__}: a {kind} LR scheduler cannot drive param group(s) {policies}: "
        f"their learning rate is a trainop schedule ({type(policy).__name__}), evaluated at "
        f"each update, which the scheduler would replace or scale as a number; give the "
        f"optimizer a float learning rate for the {kind} scheduler "
        f"(trainop.schedules.PolicyScheduler(optimizer, policy) applies a trainop schedule as "
        f"a torch scheduler and composes with SequentialLR/ChainedScheduler), or keep the "
        f"trainop schedule without a {kind} scheduler")


class SharedGroups(list):
    """The optimizer's param groups (the same dicts) as a wrapper that keeps them holds them:
    iterating them is ``check_reader``'s check."""

    def __init__(self, opt: Any, groups: list[dict]) -> None:
        super().__init__(groups)
        self.optimizer = opt

    def __iter__(self):
        if not torch.compiler.is_compiling():
            check_reader(self.optimizer, self)  # 0: check_reader, 1: here, 2: who iterates
        return super().__iter__()


def for_reader(opt: Any, groups: list[dict], frame: FrameType) -> list[dict]:
    """``groups`` as ``Optimizer.param_groups`` returns them to the code in ``frame``: a
    ``SharedGroups`` for a wrapper that keeps them (``_SHARING_WRAPPERS``), else the list."""
    if frame.f_globals.get("__name__") in _SHARING_WRAPPERS:
        return SharedGroups(opt, groups)
    return groups
