"""Interleaved rounds for whole-step comparisons (``--train-step``, ``--numerics``).

Every round times ``steps`` steps of each candidate, in an order rotated from round to round,
so that drifts of the machine's speed fall on every candidate alike; the garbage collector is
off while timing. ``prepare`` (untimed) runs before each timed step, e.g. to refill gradients.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

__all__ = ["time_rounds"]


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
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                step, before = steps_of[name], prepare.get(name)
                for _ in range(steps):
                    if before is not None:
                        before()
                    t0 = time.perf_counter()
                    step()
                    times[name].append(time.perf_counter() - t0)
    finally:
        if was_enabled:
            gc.enable()
    return {name: statistics.median(ts) for name, ts in times.items()}
