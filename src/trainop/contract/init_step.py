"""torch's state-initialising step, recognised so that it changes nothing.

``torch.distributed.checkpoint.state_dict`` (``get_optimizer_state_dict``,
``set_optimizer_state_dict``) makes an optimizer's state before it reads or loads one: on an
optimizer whose ``state`` is empty, it gives every parameter that requires a gradient a zero
gradient, sets every group's ``lr`` to 0, calls ``step()``, then restores the rates and sets the
gradients to ``None``. For torch's own optimizers that step leaves the parameters as they are.
For trainop's it would not: a TF step advances the counters (``step``, Adam's beta powers) and
the slots' first values, and the contrib-style decoupled decay of ``AdamWOptimizer`` /
``MomentumWOptimizer`` (``var -= weight_decay * var``, not scaled by the learning rate) shrinks
every parameter. Reading a state dict would change the model.

``Optimizer.step`` therefore takes that exact situation for what it is and creates what the step
would have created (the slots of the parameters with a gradient, every group's non-slot
variables, as ``create_slots`` makes them) without an update:

- no argument (no ``closure``, ``grad_multiplier`` or ``found_inf``);
- the state is empty (torch steps only then);
- the step is called by torch's ``_init_optim_state`` (``torch.distributed.checkpoint.
  state_dict``), found among the few frames above the step (torch's step hooks wrap it); a step
  of the user's own is never taken for it, and no tensor value is read on the host for one;
- every group has an ``lr`` of 0 (a number or a one-element tensor);
- at least one parameter has a gradient, and every gradient is dense and all zeros (on the
  local shard for a DTensor: each rank reads its own, without communication).

A user's own first ``step()`` with every learning rate 0 is a TF step as any other: its
counters advance and contrib's decoupled decay applies.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

__all__ = ["is_state_init_step"]

#: The function of torch that makes an optimizer's state by a step with every lr 0, its module.
_INIT = ("_init_optim_state", "torch.distributed.checkpoint.state_dict")
#: How many frames above ``is_state_init_step`` to look for it (the step, torch's step hooks'
#: wrappers, the profiler's): a handful.
_DEPTH = 8


def _called_by_torchs_init() -> bool:
    frame = sys._getframe(2)  # 0: here, 1: is_state_init_step, 2: the step
    for _ in range(_DEPTH):
        if frame is None:
            return False
        if (frame.f_code.co_name, frame.f_globals.get("__name__")) == _INIT:
            return True
        frame = frame.f_back
    return False


def _zero_lr(lr: Any) -> bool:
    if isinstance(lr, torch.Tensor):
        return lr.numel() == 1 and not lr.is_complex() and bool(lr.detach().cpu() == 0)
    return isinstance(lr, int | float) and not isinstance(lr, bool) and lr == 0


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def is_state_init_step(opt: Any) -> bool:
    """Whether ``opt.step()`` (without arguments) is torch's state-initialising step (see the
    module docstring). Reads only; the gradients are read only when the cheap conditions hold."""
    if opt.state or not opt.param_groups or not _called_by_torchs_init():
        return False
    if not all("lr" in g and _zero_lr(g["lr"]) for g in opt.param_groups):
        return False
    grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
    if not grads:
        return False
    for grad in grads:
        local = _local(grad)
        if not isinstance(local, torch.Tensor) or local.layout != torch.strided:
            return False
        if bool(torch.count_nonzero(local.detach()) != 0):
            return False
    return True
