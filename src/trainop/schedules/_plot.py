"""`plot`: draw policies to a PNG file (needs the optional ``plot`` extra, matplotlib)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import torch

from trainop.contract.validation import check_bool, check_int, describe

from ._base import NON_NEGATIVE, POSITIVE, Policy

__all__ = ["plot"]


def _steps_tensor(steps: int | Iterable[int]) -> torch.Tensor:
    if isinstance(steps, bool):
        raise TypeError(f"Expected `steps` to be an int or integers, got {describe(steps)}")
    if isinstance(steps, int):
        return torch.arange(check_int("steps", steps, POSITIVE), dtype=torch.int64)
    if isinstance(steps, torch.Tensor):
        values = steps.flatten().tolist()
    elif isinstance(steps, Iterable) and not isinstance(steps, (str, bytes)):
        values = list(steps)
    else:
        raise TypeError(f"Expected `steps` to be an int or integers, got {describe(steps)}")
    if not values:
        raise ValueError("Expected `steps` to be non-empty, got no steps")
    checked = [check_int(f"steps[{i}]", v, NON_NEGATIVE) for i, v in enumerate(values)]
    return torch.tensor(checked, dtype=torch.int64)


def plot(
    policy: Policy | Sequence[Policy],
    steps: int | Iterable[int],
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
    log_scale: bool = False,
) -> str:
    """Plot the learning rate of one or more policies against the step and save it as a PNG.

    Each policy is evaluated once on all steps through its tensor path (float32), so the plot
    shows exactly what an optimizer would use. matplotlib is imported only here; the global
    pyplot state and backend are left alone (the figure is drawn with the Agg canvas).

    Args:
        policy: a :class:`Policy` or a list of them (one line each, labelled by class name).
        steps: ``n`` (plots steps ``0 .. n-1``, ``n`` in [1, inf)) or the steps themselves,
            integers in [0, inf).
        path: the PNG file to write.
        title: the figure title. Default None (the policy's ``repr`` for a single policy).
        log_scale: logarithmic rate axis. Default False.

    Returns:
        ``str(path)``.

    Raises:
        ImportError: if matplotlib is missing (``pip install 'trainop[plot]'``).

    Example:
        >>> from trainop import schedules
        >>> p = schedules.PolyDecay(0.1, decay_steps=1000, warmup_steps=100)
        >>> schedules.plot(p, 1200, "poly_decay.png")  # doctest: +SKIP
        'poly_decay.png'
    """
    policies = [policy] if isinstance(policy, Policy) else policy
    if not isinstance(policies, (list, tuple)) or not policies:
        raise TypeError(
            f"Expected `policy` to be a Policy or a non-empty list of them, got {describe(policy)}"
        )
    for i, p in enumerate(policies):
        if not isinstance(p, Policy):
            raise TypeError(f"Expected `policy[{i}]` to be a Policy, got {describe(p)}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"Expected `path` to be a str or os.PathLike, got {describe(path)}")
    if title is not None and not isinstance(title, str):
        raise TypeError(f"Expected `title` to be a string or None, got {describe(title)}")
    log_scale = check_bool("log_scale", log_scale)
    x = _steps_tensor(steps)
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            "trainop.schedules.plot needs matplotlib: install the `plot` extra with "
            "`pip install 'trainop[plot]'` (or `pip install matplotlib`)"
        ) from exc

    fig = Figure(figsize=(7.0, 4.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for p in policies:
        ax.plot(x.numpy(), p(x).double().cpu().numpy(), label=type(p).__name__)
    ax.set_xlabel("global step")
    ax.set_ylabel("learning rate")
    if log_scale:
        ax.set_yscale("log")
    if title is None and len(policies) == 1:
        title = repr(policies[0])
    if title:
        ax.set_title(title, fontsize=8, wrap=True)
    if len(policies) > 1:
        ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.fspath(path), format="png")
    return os.fspath(path)
