"""Host cost per param group of a Triton step (issue #44): Adam over G groups of two tensors
each, launches replaced by no-ops (``trainop bench --host``'s way: Triton's interpreter with
``counted_launches(run=False)``), the median of a few steps after two warm-up steps, divided by
G; and the layouts made per step. Usage: ``python scripts/triton_group_cost.py [G ...]``."""

from __future__ import annotations

import statistics
import sys
import time

import torch

import trainop
from trainop.bench.host import counted_launches
from trainop.kernels.triton import tables


def per_group(groups: int, steps: int = 7) -> tuple[float, list[int]]:
    params = [[torch.nn.Parameter(torch.randn(1 + (g + j) % 9)) for j in range(2)]
              for g in range(groups)]
    opt = trainop.AdamOptimizer(0.01, params=[{"params": ps} for ps in params],
                                implementation="triton")
    times, made, built = [], [], []
    real = tables.Layout.__init__

    def counted(self, *args, **kwargs):
        built.append(1)
        real(self, *args, **kwargs)

    tables.Layout.__init__ = counted
    try:
        with counted_launches(run=False):
            for _ in range(steps):
                for ps in params:
                    for p in ps:
                        p.grad = torch.randn(p.numel())
                built.clear()
                start = time.perf_counter()
                opt.step()
                times.append(time.perf_counter() - start)
                made.append(len(built))
    finally:
        tables.Layout.__init__ = real
    return statistics.median(times[2:]) / groups, made


if __name__ == "__main__":
    for g in [int(a) for a in sys.argv[1:]] or [32, 100]:
        cost, made = per_group(g)
        print(f"{g} groups: {cost * 1e3:.3f} ms per group; layouts made per step {made}")
