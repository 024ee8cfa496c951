"""`PolicyScheduler`: drive any torch optimizer's learning rates with trainop policies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from trainop.contract.validation import Interval, check_int, describe

from ._base import Policy

__all__ = ["PolicyScheduler"]


class PolicyScheduler(LRScheduler):
    r"""A ``torch.optim.lr_scheduler.LRScheduler`` that sets ``lr = policy(step)``, in closed form.

    After construction the optimizer's ``param_groups[i]["lr"]`` is ``policy(0)``; after the
    ``n``-th ``scheduler.step()`` it is ``policy(n)``. ``n`` (``last_epoch``) should count
    *applied* updates, as TensorFlow's and OpenSeq2Seq's ``global_step`` does: call
    ``scheduler.step()`` after each ``optimizer.step()`` that really updated the parameters.
    Every value comes from the policy's formula at ``last_epoch`` (the Python-int path, so a
    Python float is written; a tensor ``lr`` in a param group is filled in place), never from
    the previous rate, so the schedule cannot drift and resuming is exact.

    The rate written is absolute: the ``lr`` the optimizer was built with is replaced (it is kept
    as ``initial_lr``, as every torch scheduler does, but unused).

    Args:
        optimizer: any ``torch.optim.Optimizer`` (``torch.optim.SGD``, trainop's optimizers, ...).
        policy: one :class:`~trainop.schedules.Policy` for all param groups, or a list with one
            policy per param group.
        last_epoch: ``-1`` (default) to start; a value ``>= 0`` resumes, as for any torch
            scheduler (then every group needs ``initial_lr``).

    ``state_dict()`` holds ``last_epoch``, the last rates and each policy's own state (the
    noisy policy's generator), but not the policies themselves: build the scheduler with the
    same policies, then ``load_state_dict``. Loading also writes the saved last rates back into
    the optimizer's param groups, so a scheduler loaded into a fresh optimizer continues with
    identical rates even before the optimizer's own state is loaded.

    Example:
        >>> import torch
        >>> from trainop import schedules
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> opt = torch.optim.SGD([w], lr=1.0)
        >>> sched = schedules.PolicyScheduler(opt, schedules.PolyDecay(0.1, decay_steps=4))
        >>> rates = []
        >>> for _ in range(5):
        ...     rates.append(round(opt.param_groups[0]["lr"], 6))
        ...     opt.step()
        ...     sched.step()
        >>> rates
        [0.1, 0.075, 0.05, 0.025, 0.0]

    Reference: ``torch.optim.lr_scheduler.LambdaLR`` (which multiplies instead of setting);
    OpenSeq2Seq's ``learning_rate_decay_fn(global_step)``.
    """

    def __init__(self, optimizer: Optimizer, policy: Policy | Sequence[Policy],
                 last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"Expected `optimizer` to be a torch.optim.Optimizer, got {describe(optimizer)}"
            )
        n_groups = len(optimizer.param_groups)
        if isinstance(policy, Policy):
            policies = [policy] * n_groups
        elif isinstance(policy, (list, tuple)):
            policies = list(policy)
            for i, p in enumerate(policies):
                if not isinstance(p, Policy):
                    raise TypeError(
                        f"Expected `policy[{i}]` to be a trainop.schedules.Policy, got "
                        f"{describe(p)}"
                    )
            if len(policies) != n_groups:
                raise ValueError(
                    f"Expected `policy` to have one policy per param group ({n_groups}), got "
                    f"{len(policies)}"
                )
        else:
            raise TypeError(
                f"Expected `policy` to be a trainop.schedules.Policy or a list of them, got "
                f"{describe(policy)}"
            )
        last_epoch = check_int("last_epoch", last_epoch, Interval(-1))
        self.policies = policies
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        """``[policy(last_epoch) for each param group]`` (closed form)."""
        return [p(self.last_epoch) for p in self.policies]

    def _get_closed_form_lr(self) -> list[float]:
        return self.get_lr()

    def _unique_policies(self) -> list[Policy]:
        seen: dict[int, Policy] = {}
        for p in self.policies:
            seen.setdefault(id(p), p)
        return list(seen.values())

    def state_dict(self) -> dict[str, Any]:
        """Everything in ``__dict__`` except the optimizer and the policies, plus
        ``"policy_states"``: each distinct policy's ``state_dict()``, in order."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "policies")}
        state["policy_states"] = [p.state_dict() for p in self._unique_policies()]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the scheduler and its policies' state, and write the saved last rates."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected `state_dict` to be a dict, got {describe(state_dict)}")
        state = dict(state_dict)
        policy_states = state.pop("policy_states", None)
        unique = self._unique_policies()
        if policy_states is None or len(policy_states) != len(unique):
            raise ValueError(
                f"Expected `state_dict['policy_states']` to hold {len(unique)} policy states, "
                f"got {policy_states!r}"
            )
        last_lr = state.get("_last_lr")
        if last_lr is None or len(last_lr) != len(self.optimizer.param_groups):
            raise ValueError(
                f"Expected `state_dict['_last_lr']` to hold one rate per param group "
                f"({len(self.optimizer.param_groups)}), got {last_lr!r}"
            )
        previous = [p.state_dict() for p in unique]
        try:
            for p, s in zip(unique, policy_states, strict=True):
                p.load_state_dict(s)
        except (TypeError, ValueError):
            for p, s in zip(unique, previous, strict=True):  # leave every policy as it was
                p.load_state_dict(s)
            raise
        self.__dict__.update(state)
        for group, lr in zip(self.optimizer.param_groups, self._last_lr, strict=True):
            if isinstance(group["lr"], Tensor) and isinstance(lr, Tensor):
                group["lr"].copy_(lr)
            elif isinstance(group["lr"], Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr
