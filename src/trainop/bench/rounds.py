"""Interleaved rounds for whole-step comparisons (``--train-step``, ``--numerics``).

Every round times ``steps`` steps of each candidate, in an order rotated from round to round,
so that drifts of the machine's speed fall on every candidate alike; the garbage collector is
off while timing. ``prepare`` (untimed) runs before each timed step, e.g. to refill gradients.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

__all__ = ["gc_paused", "rotated", "time_rounds"]

T = TypeVar("T")


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The garbage collector off while timing (back to its earlier state after)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def rotated(items: Sequence[T], round_index: int) -> list[T]:
    """``items`` started at ``round_index mod len(items)``: each round another order."""
    shift = round_index % len(items) if items else 0
    return [*items[shift:], *items[:shift]]


def time_rounds(steps_of: dict[str, Callable[[], None]], *, rounds: int, steps: int,
                warmup: int, prepare: dict[str, Callable[[], None]] | None = None
                ) -> dict[str, float]:
    """Median seconds per step of each candidate."""
    names = list(steps_of)
    prepare = prepare or {}
    for name in names:
        for _ in range(warmup):
            if name in prepare:
                prepare[name]()
            steps_of[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    with gc_paused():
        for r in range(rounds):
            for name in rotated(names, r):
                step, before = steps_of[name], prepare.get(name)
                for _ in range(steps):
                    if before is not None:
                        before()
                    t0 = time.perf_counter()
                    step()
                    times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}
