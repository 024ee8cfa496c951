"""Interleaved rounds timed on the device (``trainop bench --gpu-suite``), and the median of
per-round ratios.

Each round runs ONE step of every candidate, in an order rotated from round to round. On CUDA a
step is timed by a pair of CUDA events recorded around it on the current stream (the device's
time, not the host's launch time), read once per round after one synchronisation; a candidate
that does not run on torch's stream (JAX) is timed on the host around a call that blocks until
its result is ready. On the CPU every step is timed with ``time.perf_counter``. ``prepare``
(untimed, before the step's first event) refills gradients where a step consumes them; the
device is synchronised between ``prepare`` and the start event, so a step's time starts with
an idle device and counts its whole launch time.

With ``back_to_back = B > 1`` (CUDA; what ``trainop bench --device cuda`` uses) a round times
``B`` steps of a candidate run back to back between one pair of events, as a training loop runs
them: the host's work before a step's first launch (trainop's 35-60 us of checks and tables)
overlaps the previous step's kernels instead of being charged to each step, as it is when the
device idles before every step. A candidate with ``prepare`` is timed as ``B`` (prepare, step)
pairs less ``B`` prepares alone (two event pairs in the same round): the refill is not the
step's.

The ratio of two candidates is the median over rounds of their per-round time ratio: a drift of
the machine's speed during the run falls on both sides of each ratio.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainop.bench.rounds import gc_paused, rotated

__all__ = ["Candidate", "median_ratio", "time_interleaved"]


@dataclass
class Candidate:
    """One side of a comparison: ``step`` timed, ``prepare`` run untimed before it; ``host``:
    time on the host around a blocking ``step`` (work outside torch's stream)."""

    step: Callable[[], object]
    prepare: Callable[[], object] | None = None
    host: bool = False


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def _events_around(fn: Callable[[], object], device: torch.device, count: int
                   ) -> tuple[object, object]:
    """``fn()`` ``count`` times back to back between two CUDA events (the device idle
    first)."""
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    torch.cuda.synchronize(device)
    start.record()
    for _ in range(count):
        fn()
    end.record()
    return start, end


def time_interleaved(cands: dict[str, Candidate], *, rounds: int, warmup: int,
                     device: torch.device, back_to_back: int = 1
                     ) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Seconds per step of each candidate, one entry per round, and the error of each
    candidate that raised (it is dropped from the rounds that follow; its times are
    discarded). ``back_to_back``: steps per timed run on CUDA (see the module doc)."""
    if back_to_back > 1 and device.type == "cuda":
        return _back_to_back(cands, rounds=rounds, warmup=warmup, device=device,
                             count=back_to_back)
    cuda = device.type == "cuda"
    live = dict(cands)
    errors: dict[str, str] = {}
    times: dict[str, list[float]] = {name: [] for name in cands}

    def run(name: str, part: str = "both") -> bool:
        """``prepare`` and/or ``step`` of ``name``; False (and dropped) when it raised."""
        cand = live[name]
        try:
            if part != "step" and cand.prepare is not None:
                cand.prepare()
            if part != "prepare":
                cand.step()
        except Exception as exc:  # one failing candidate must not stop the comparison
            errors[name] = _error(exc)
            del live[name]
            return False
        return True

    for _ in range(warmup):
        for name in list(live):
            run(name)
    if cuda:
        torch.cuda.synchronize(device)
    with gc_paused():
        for r in range(rounds):
            events = []
            for name in rotated(list(live), r):
                if not run(name, "prepare"):
                    continue
                if cuda and not live[name].host:
                    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                    # the preparation (and the side before) done on the device first: else the
                    # start event waits behind the refill while the host already launches the
                    # step, and part of a host-bound step's launch time is never counted
                    torch.cuda.synchronize(device)
                    start.record()
                    ok = run(name, "step")
                    end.record()
                    if ok:
                        events.append((name, start, end))
                else:
                    if cuda:
                        torch.cuda.synchronize(device)
                    t0 = time.perf_counter()
                    ok = run(name, "step")
                    elapsed = time.perf_counter() - t0
                    if ok:
                        times[name].append(elapsed)
            if cuda:
                torch.cuda.synchronize(device)
                for name, start, end in events:
                    times[name].append(start.elapsed_time(end) / 1e3)
    for name in errors:
        times[name] = []
    return times, errors


def median_ratio(times: dict[str, list[float]], name: str, base: str) -> float | None:
    """Median over rounds of ``times[name][r] / times[base][r]`` (None without both)."""
    pairs = [a / b for a, b in zip(times.get(name, []), times.get(base, []), strict=False)
             if b > 0]
    return statistics.median(pairs) if pairs else None


def _back_to_back(cands: dict[str, Candidate], *, rounds: int, warmup: int,
                  device: torch.device, count: int
                  ) -> tuple[dict[str, list[float]], dict[str, str]]:
    """``time_interleaved`` with ``count`` steps per timed run (CUDA; see the module doc)."""
    live = dict(cands)
    errors: dict[str, str] = {}
    times: dict[str, list[float]] = {name: [] for name in cands}

    def both(cand: Candidate) -> Callable[[], object]:
        if cand.prepare is None:
            return cand.step
        return lambda: (cand.prepare(), cand.step())

    for _ in range(warmup):
        for name in list(live):
            try:
                both(live[name])()
            except Exception as exc:
                errors[name] = _error(exc)
                del live[name]
    with gc_paused():
        for r in range(rounds):
            pending = []
            for name in rotated(list(live), r):
                cand = live[name]
                try:
                    if cand.host:
                        torch.cuda.synchronize(device)
                        t0 = time.perf_counter()
                        for _ in range(count):
                            both(cand)()
                        torch.cuda.synchronize(device)
                        times[name].append((time.perf_counter() - t0) / count)
                        continue
                    run = _events_around(both(cand), device, count)
                    alone = (None if cand.prepare is None
                             else _events_around(cand.prepare, device, count))
                except Exception as exc:
                    errors[name] = _error(exc)
                    del live[name]
                    continue
                pending.append((name, run, alone))
            torch.cuda.synchronize(device)
            for name, (start, end), alone in pending:
                seconds = start.elapsed_time(end) / 1e3
                if alone is not None:
                    seconds -= alone[0].elapsed_time(alone[1]) / 1e3
                times[name].append(max(seconds, 0.0) / count)
    for name in errors:
        times[name] = []
    return times, errors
