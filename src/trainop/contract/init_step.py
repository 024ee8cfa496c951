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
variables, as ``create_slots`` makes them) without an update, when:

- the step has no argument (no ``closure``, ``grad_multiplier`` or ``found_inf``);
- the state is empty (torch steps only then);
- the step is called by torch's ``_init_optim_state`` (``torch.distributed.checkpoint.
  state_dict``), found among the frames above the step (torch's step hooks and a wrapping
  optimizer's step may lie between).

What torch does before that step (zero gradients, every ``lr`` 0) is not checked again: it
needs no host read of a gradient or a tensor ``lr`` (a device sync each on a GPU), and whatever
torch's helper sets, its step is there to make the state, never to update the model.

A user's own first ``step()``, even with every learning rate 0 and every gradient zero, is a
TF step as any other: its counters advance and contrib's decoupled decay applies.
"""

from __future__ import annotations

import traceback
from typing import Any

__all__ = ["is_state_init_step"]

#: The function of torch that makes an optimizer's state by a step with every lr 0, its module.
_INIT = ("_init_optim_state", "torch.distributed.checkpoint.state_dict")


def _called_by_torchs_init() -> bool:
    """Whether torch's helper is among the frames above: anywhere, so that a wrapper's step
    calling this one (ZeRO's, timm's ``Lookahead``) is recognised too. Walked only while the
    state is empty (a step gives every parameter it updates a state: in practice once)."""
    return any((f.f_code.co_name, f.f_globals.get("__name__")) == _INIT
               for f, _ in traceback.walk_stack(None))


def is_state_init_step(opt: Any) -> bool:
    """Whether ``opt.step()`` (without arguments) is torch's state-initialising step (see the
    module docstring): the state is empty and torch's helper called the step. Reads no tensor."""
    return not opt.state and _called_by_torchs_init()
