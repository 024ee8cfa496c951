"""A torch LR scheduler over a param group whose learning rate is a trainop schedule.

``Optimizer(lr=ExponentialDecay(...))`` evaluates the schedule at the group's applied-step
counter inside each update. A torch scheduler (``StepLR``, ``OneCycleLR``, ``CyclicLR``,
``LambdaLR``, ...) writes ``group["lr"]`` as a number, which would silently replace the
schedule (``OneCycleLR``) or fail deep inside torch at its first decay (``StepLR``: ``lr *
gamma``). The two do not compose: when a torch scheduler attaches itself to the optimizer
(every ``LRScheduler`` wraps ``optimizer.step`` in its constructor, before it writes any
rate; ``CyclicLR`` writes its base rate first, so the optimizer remembers each group's
schedule in ``Seen``), ``refuse`` raises one ``TypeError`` naming the group and what to do
instead, after putting the group back as it was.
``ReduceLROnPlateau`` does not attach itself: it fails at its first reduction, in
``Policy.__float__``, with the same advice (``trainop.schedules``).
"""

from __future__ import annotations

from typing import Any

from trainop.contract import betas
from trainop.contract.hyper import is_policy

__all__ = ["SCHEDULER_KEYS", "Seen", "note", "refuse"]

#: ``id(group) -> (group, the trainop schedule that was its lr)``: kept at add_param_group and
#: at each update of a group whose lr is a schedule, forgotten at an update with a plain rate.
#: ``CyclicLR`` writes its base rate into ``lr`` before it attaches itself; this is how the
#: refusal still sees (and puts back) the schedule it replaced.
Seen = dict[int, tuple[dict, Any]]


def note(seen: Seen, group: dict) -> None:
    """Remember ``group``'s lr if it is a trainop schedule."""
    if is_policy(group.get("lr")):
        seen[id(group)] = (group, group["lr"])


#: Group keys torch's schedulers add (``initial_lr``, OneCycleLR's and CyclicLR's bounds).
SCHEDULER_KEYS = ("initial_lr", "max_lr", "min_lr", "base_lr", "max_momentum", "base_momentum")


def refuse(opt: Any) -> None:
    """Raise ``TypeError`` if a group's ``lr`` is a trainop schedule; the keys the refused
    scheduler added to those groups are removed and ``betas`` (which ``OneCycleLR``/``CyclicLR``
    set to their first momentum) is put back, so the optimizer runs on as before."""
    seen = opt._lr_policies
    groups = [i for i, group in enumerate(opt.param_groups)
              if is_policy(group.get("lr")) or (id(group) in seen and seen[id(group)][0] is group)]
    if not groups:
        return
    for i in groups:
        group = opt.param_groups[i]
        if id(group) in seen:
            group["lr"] = seen[id(group)][1]  # CyclicLR wrote its base rate over it
        for key in SCHEDULER_KEYS:
            group.pop(key, None)
        record = opt._betas_seen.get(id(group))
        if record is not None and record[0] is group:
            group[betas.KEY] = record[1]
    name = type(opt).__name__
    policy = opt.param_groups[groups[0]]["lr"]
    raise TypeError(
        f"{name}: a torch LR scheduler cannot drive param group(s) {groups}: their learning "
        f"rate is a trainop schedule ({type(policy).__name__}), evaluated at each update, which "
        f"the scheduler would replace or scale as a number; give the optimizer a float "
        f"learning rate for the torch scheduler (trainop.schedules.PolicyScheduler(optimizer, "
        f"policy) applies a trainop schedule as a torch scheduler and composes with "
        f"SequentialLR/ChainedScheduler), or keep the trainop schedule without a torch "
        f"scheduler")
