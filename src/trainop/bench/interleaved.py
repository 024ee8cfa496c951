"""Interleaved timing: the candidates of one comparison step in turn, round after round.

On a shared or throttled machine the speed of memory and cores drifts over seconds (seen on
the 2-vCPU development VM: the same kernel 6 ms in one minute, 10 ms in the next). Timing one
candidate after another lets that drift into the ratios; here every candidate of a group
(trainop's implementations and their torch peers) is built at once, warmed up, and then each
round times ONE step of every candidate, in an order rotated from round to round, so the
candidates share the machine's states and the per-candidate medians are comparable.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from trainop.bench.candidates import Candidate, build
from trainop.bench.memory import peak_extra_bytes
from trainop.bench.rounds import gc_paused, rotated

__all__ = ["measure_interleaved", "new_row"]


def new_row(cand: Candidate) -> dict[str, Any]:
    """An empty result row for ``cand``."""
    return {
        "id": cand.id, "kind": cand.kind, "name": cand.name,
        "implementation": cand.implementation, "label": cand.label, "short": cand.short,
        "note": cand.note,
        "median_s": None, "min_s": None, "times_s": [], "peak_extra_bytes": None,
        "error": None, "wall_s": None,
    }


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def measure_interleaved(cands: list[Candidate], data, *, warmup: int, repeats: int,
                        memory: bool, device: torch.device, sync: Callable[[], None],
                        tick: Callable[[], None]) -> dict[str, dict[str, Any]]:
    """Rows for ``cands`` (torch and trainop candidates) timed in interleaved rounds."""
    rows = {c.id: new_row(c) for c in cands}
    runnables = {}
    start = time.perf_counter()
    try:
        for cand in cands:
            try:
                runnables[cand.id] = build(cand, data, device=device, tf=None,
                                           threads=torch.get_num_threads())
            except Exception as exc:  # one failing candidate must not stop the benchmark
                rows[cand.id]["error"] = _error(exc)
        for _ in range(warmup):
            for cid in list(runnables):
                _step_or_drop(cid, runnables, rows, tick)
        sync()
        with gc_paused():
            for round_index in range(repeats):
                for cid in rotated(list(runnables), round_index):
                    t0 = time.perf_counter()
                    if _step_or_drop(cid, runnables, rows, lambda: None):
                        sync()
                        rows[cid]["times_s"].append(time.perf_counter() - t0)
                    tick()
        for cid, runnable in runnables.items():
            if memory and runnable.measures_memory:
                try:
                    rows[cid]["peak_extra_bytes"] = peak_extra_bytes(runnable.step, device)
                except Exception as exc:
                    rows[cid]["error"] = _error(exc)
                tick()
    finally:
        for runnable in runnables.values():
            runnable.close()
        runnables.clear()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    wall = time.perf_counter() - start
    for row in rows.values():
        if row["times_s"] and row["error"] is None:
            row["median_s"] = statistics.median(row["times_s"])
            row["min_s"] = min(row["times_s"])
        row["wall_s"] = wall
    return rows


def _step_or_drop(cid: str, runnables: dict, rows: dict, tick: Callable[[], None]) -> bool:
    """One step of ``cid``; on an error the candidate is closed, dropped and its row marked."""
    try:
        runnables[cid].step()
    except Exception as exc:
        rows[cid]["error"] = _error(exc)
        runnables.pop(cid).close()
        return False
    finally:
        tick()
    return True
