"""Host cost per param group of a Triton step (issue #44): Adam over G groups of two tensors
each, launches replaced by no-ops (``trainop bench --host``'s way: Triton's interpreter with
``counted_launches(run=False)``), and the layouts made per step.

Each round builds one optimizer per group count and times ``steps`` steps of each after two
warm-up steps, the counts interleaved (32, 100, 32, 100, ...: a shared machine's slow spell
falls on both alike); a step's time is the thread's CPU time (``time.thread_time``: waits for a
core are not counted). Printed: per count the median over rounds of the per-round median step
time divided by G, every round's figure, and the ratio of the last count's figure to the
first's (issue #44's target: 100 groups at most 2x the per-group cost of 32).
Usage: ``python scripts/triton_group_cost.py [--rounds R] [G ...]`` (default 32 100, 5 rounds).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import trainop
from trainop.bench.host import counted_launches
from trainop.kernels.triton import tables


class _Built:
    """Counts ``tables.Layout`` objects made while entered."""

    def __enter__(self) -> list[int]:
        self.real = tables.Layout.__init__
        self.count: list[int] = []
        real, count = self.real, self.count

        def counted(layout, *args, **kwargs):
            count.append(1)
            real(layout, *args, **kwargs)

        tables.Layout.__init__ = counted
        return self.count

    def __exit__(self, *exc) -> None:
        tables.Layout.__init__ = self.real


def one_round(groups: int, steps: int = 7) -> tuple[float, list[int]]:
    """(the median step's CPU seconds per group after two warm-up steps, layouts made per
    step) of a fresh optimizer of ``groups`` groups."""
    params = [[torch.nn.Parameter(torch.randn(1 + (g + j) % 9)) for j in range(2)]
              for g in range(groups)]
    grads = [[[torch.randn(p.numel()) for p in ps] for ps in params] for _ in range(2)]
    opt = trainop.AdamOptimizer(0.01, params=[{"params": ps} for ps in params],
                                implementation="triton")
    times, made = [], []
    with _Built() as built, counted_launches(run=False):
        for k in range(steps):
            for ps, gs in zip(params, grads[k % 2], strict=True):
                for p, g in zip(ps, gs, strict=True):
                    p.grad = g  # (new addresses every step)
            built.clear()
            start = time.thread_time()
            opt.step()
            times.append(time.thread_time() - start)
            made.append(len(built))
    return statistics.median(times[2:]) / groups, made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("groups", type=int, nargs="*", default=[32, 100])
    args = parser.parse_args()
    figures: dict[int, list[float]] = {g: [] for g in args.groups}
    made: dict[int, list[int]] = {}
    for _ in range(args.rounds):
        for g in args.groups:
            cost, made[g] = one_round(g)
            figures[g].append(cost)
    for g in args.groups:
        rounds = ", ".join(f"{c * 1e3:.3f}" for c in figures[g])
        print(f"{g} groups: {statistics.median(figures[g]) * 1e3:.3f} ms per group "
              f"(rounds: {rounds}); layouts made per step {made[g]}")
    first, last = args.groups[0], args.groups[-1]
    ratio = statistics.median(figures[last]) / statistics.median(figures[first])
    print(f"per-group cost at {last} / at {first}: {ratio:.2f}")


if __name__ == "__main__":
    main()
