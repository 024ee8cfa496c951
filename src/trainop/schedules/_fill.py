"""OpenSeq2Seq's automatic filling of ``lr_policy_params`` from the run length."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from trainop.contract.validation import check_int, describe

from ._base import NON_NEGATIVE, POSITIVE, Policy, _resolve

__all__ = ["fill_policy_params"]


def _parameter_names(policy: Any) -> set[str]:
    if isinstance(policy, str):
        policy = _resolve(policy)
    if isinstance(policy, Policy):
        policy = type(policy)
    if not callable(policy):
        raise TypeError(
            f"Expected `policy` to be a policy name, a Policy class or a function, got "
            f"{describe(policy)}"
        )
    return set(inspect.signature(policy).parameters)


def fill_policy_params(
    policy: str | type[Policy] | Callable[..., Any],
    params: Mapping[str, Any],
    *,
    num_steps: int | None = None,
    num_epochs: int | None = None,
    steps_per_epoch: int | None = None,
) -> dict[str, Any]:
    """Fill ``decay_steps``, ``begin_decay_at`` and ``steps_per_epoch`` as OpenSeq2Seq's model does.

    The run ends at ``last_step = num_steps``, or ``num_epochs * steps_per_epoch`` (give exactly
    one of ``num_steps`` and ``num_epochs``; ``steps_per_epoch`` goes with ``num_epochs`` only,
    like OpenSeq2Seq's ``max_steps`` / ``num_epochs``). The rules, by the names the policy's
    signature takes:

    1. If it takes ``decay_steps`` and ``params`` has none: ``decay_steps = last_step``. Then,
       if it also takes ``begin_decay_at``: if it also takes ``warmup_steps``,
       ``begin_decay_at = max(begin_decay_at, warmup_steps)`` (each 0 when absent); and
       ``decay_steps -= begin_decay_at``. So warmup, then decay, join smoothly and the decay
       ends at the last step.
    2. If it takes ``steps_per_epoch``, ``params`` has none and the run is given in epochs:
       ``steps_per_epoch`` is filled in (``piecewise_constant`` then reads its boundaries as
       epochs).

    A user-supplied ``decay_steps`` leaves ``begin_decay_at`` untouched (OpenSeq2Seq's rule), so
    warmup and decay may then overlap. Note that ``inv_poly_decay`` ignores ``begin_decay_at``
    but still gets a shortened ``decay_steps`` (upstream behaviour).

    Args:
        policy: a registered policy name (``"poly_decay"``), a :class:`Policy` class or instance,
            or any function, e.g. :func:`trainop.schedules.tf1.cosine_decay`; only the names
            of its parameters are used.
        params: the policy's hyperparameters; **not modified**.
        num_steps: the last step (OpenSeq2Seq's ``max_steps``), an int in [1, inf).
        num_epochs: the number of epochs, an int in [1, inf); needs ``steps_per_epoch``.
        steps_per_epoch: steps per epoch, an int in [1, inf); only with ``num_epochs``.

    Returns:
        A new dict: ``params`` plus the filled entries.

    Raises:
        ValueError: on a bad run length, or when the filled ``decay_steps`` is not positive
            (``num_steps <= begin_decay_at``; upstream then divides by zero).

    Example:
        >>> from trainop import schedules
        >>> schedules.fill_policy_params("poly_decay", {"learning_rate": 0.1,
        ...                               "warmup_steps": 100}, num_steps=1000)
        {'learning_rate': 0.1, 'warmup_steps': 100, 'begin_decay_at': 100, 'decay_steps': 900}

    Reference: OpenSeq2Seq ``Model.compile`` (``models/model.py``).
    """
    if not isinstance(params, Mapping):
        raise TypeError(f"Expected `params` to be a dict, got {describe(params)}")
    names = _parameter_names(policy)
    if (num_steps is None) == (num_epochs is None):
        raise ValueError(
            f"Expected exactly one of `num_steps` and `num_epochs`, got num_steps={num_steps!r} "
            f"and num_epochs={num_epochs!r}"
        )
    if num_steps is not None:
        last_step = check_int("num_steps", num_steps, POSITIVE)
        if steps_per_epoch is not None:
            raise ValueError(
                f"Expected `steps_per_epoch` to be None with `num_steps` (it is only used with "
                f"`num_epochs`), got {steps_per_epoch!r}"
            )
    else:
        num_epochs = check_int("num_epochs", num_epochs, POSITIVE)
        if steps_per_epoch is None:
            raise ValueError("Expected `steps_per_epoch` with `num_epochs`, got None")
        steps_per_epoch = check_int("steps_per_epoch", steps_per_epoch, POSITIVE)
        last_step = num_epochs * steps_per_epoch

    filled = dict(params)
    if "decay_steps" in names and "decay_steps" not in filled:
        decay_steps = last_step
        if "begin_decay_at" in names:
            begin = check_int("begin_decay_at", filled.get("begin_decay_at", 0), NON_NEGATIVE)
            if "warmup_steps" in names:
                warmup = check_int("warmup_steps", filled.get("warmup_steps", 0), NON_NEGATIVE)
                begin = max(begin, warmup)
                filled["begin_decay_at"] = begin
            decay_steps -= begin
            if decay_steps <= 0:
                raise ValueError(
                    f"Expected `decay_steps` in (0, inf), got {decay_steps} (filled as last step "
                    f"{last_step} - begin_decay_at {begin})"
                )
        filled["decay_steps"] = decay_steps
    if "steps_per_epoch" in names and "steps_per_epoch" not in filled and num_epochs is not None:
        filled["steps_per_epoch"] = steps_per_epoch
    return filled
