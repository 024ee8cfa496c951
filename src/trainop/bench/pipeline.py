"""The gradient-pipeline comparison (``trainop bench --pipeline``): trainop's fused step versus
PyTorch's canonical AMP recipe.

The pipeline: loss-scale unscale, finite check (skip on overflow), global-norm clip at 1.0, Adam.

- torch:   ``GradScaler.unscale_`` -> ``clip_grad_norm_(foreach=True)`` -> ``GradScaler.step`` with
  ``torch.optim.Adam(fused=True)`` -> ``GradScaler.update``;
- trainop: ``GradientPipeline(AdamOptimizer, [LossScale(BackoffLossScaler()),
  ClipByGlobalNorm(1.0)])``: one read pass (per-tensor norms) plus the single Adam pass with the
  multiplier (1/S times the clip coefficient) and the skip flag folded in.

Workloads: (a) one tensor of 32M float32 params, (b) 400 tensors holding 8M params (times
``scale``). Before every step the gradients are refilled from a saved copy (untimed), so both
sides see the same scaled gradients. Rounds alternate the two sides; the table gives the median
over every timed step of every round, the spread of the per-round medians, the effective
bandwidth against the floor of 32 bytes per parameter (read param, grad, m, v; write param, m,
v; one more read of the grad) and that bandwidth as a fraction of the machine's measured
bandwidth (copy/triad/update probe).
"""


from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

import torch

import trainop
from trainop.bench.probe import measure_bandwidth
from trainop.processing import BackoffLossScaler, ClipByGlobalNorm, GradientPipeline, LossScale

__all__ = ["render_pipeline", "run_pipeline_benchmark"]

BYTES_PER_PARAM = 32
TARGET = 1.4  # the gradient-processing issue's speed criterion
INIT_SCALE = 2.0 ** 14
CPU = torch.device("cpu")


def make_tensors(sizes: list, seed: int, device: torch.device = CPU
                 ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Parameters N(0, 0.02^2) and gradients N(0, (S * 1e-3)^2) of the given sizes (ints or
    shapes), drawn on ``device`` from a generator seeded with ``seed``."""
    g = torch.Generator(device=device).manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(n, generator=g, device=device) * 0.02)
              for n in sizes]
    grads = [torch.randn(n, generator=g, device=device) * (INIT_SCALE * 1e-3) for n in sizes]
    return params, grads


def torch_recipe(sizes: list, device: torch.device = CPU
                 ) -> tuple[Callable[[], None], Callable[[], None]]:
    """(refill, step) of torch's recipe: GradScaler unscale_, clip_grad_norm_, fused Adam."""
    params, saved = make_tensors(sizes, 0, device)
    for p, g in zip(params, saved, strict=True):
        p.grad = g.clone()
    opt = torch.optim.Adam(params, lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler(device.type, init_scale=INIT_SCALE)
    scaler.scale(torch.ones((), device=device))  # creates the scale tensor, as scaling a loss does

    def refill() -> None:
        for p, g in zip(params, saved, strict=True):
            p.grad.copy_(g)

    def step() -> None:
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        scaler.step(opt)
        scaler.update()

    return refill, step


def trainop_pipeline(sizes: list, device: torch.device = CPU, implementation: str | None = None
                     ) -> tuple[Callable[[], None], Callable[[], None]]:
    """(refill, step) of trainop's pipeline: loss-scale unscale, finite check, clip 1.0, Adam."""
    params, saved = make_tensors(sizes, 0, device)
    for p, g in zip(params, saved, strict=True):
        p.grad = g.clone()
    opt = trainop.AdamOptimizer(1e-3, params=params, implementation=implementation)
    pipe = GradientPipeline(opt, [LossScale(BackoffLossScaler(scale_max=INIT_SCALE)),
                                  ClipByGlobalNorm(1.0)])

    def refill() -> None:
        for p, g in zip(params, saved, strict=True):
            p.grad.copy_(g)

    def step() -> None:
        pipe.step()

    return refill, step


def time_rounds(sides: dict[str, tuple[Callable, Callable]], *, rounds: int, steps: int,
                warmup: int) -> dict[str, list[list[float]]]:
    for refill, step in sides.values():
        for _ in range(warmup):
            refill()
            step()
    out: dict[str, list[list[float]]] = {name: [] for name in sides}
    names = list(sides)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                refill, step = sides[name]
                times = []
                for _ in range(steps):
                    refill()
                    start = time.perf_counter()
                    step()
                    times.append(time.perf_counter() - start)
                out[name].append(times)
    finally:
        if gc_was_enabled:
            gc.enable()
    return out


def run_pipeline_benchmark(*, scale: float = 1.0, rounds: int = 7, steps: int = 10,
                           warmup: int = 3, probe_mib: int = 128) -> dict:
    """Both sides on workloads (a) and (b) (sizes times ``scale``); a JSON-ready result with
    per-side medians, per-round medians, GB/s at the 32-byte floor and the speed-up."""
    machine = measure_bandwidth(torch.device("cpu"), probe_mib << 20)["best_gbps"]
    workloads = {
        "(a) 1 x 32M": [max(1, round(32 * 2 ** 20 * scale))],
        "(b) 400 / 8M": [max(1, round(8 * 2 ** 20 * scale / 400))] * 400,
    }
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(),
           "machine_gbps": machine, "rounds": rounds, "steps": steps, "warmup": warmup,
           "scale": scale, "bytes_per_param": BYTES_PER_PARAM, "target_speedup": TARGET,
           "workloads": []}
    for label, sizes in workloads.items():
        n = sum(sizes)
        sides = {"torch": torch_recipe(sizes), "trainop": trainop_pipeline(sizes)}
        times = time_rounds(sides, rounds=rounds, steps=steps, warmup=warmup)
        medians = {name: statistics.median([t for rnd in ts for t in rnd])
                   for name, ts in times.items()}
        rows = []
        for name, ts in times.items():
            gbps = BYTES_PER_PARAM * n / medians[name] / 1e9
            rows.append({"side": name, "median_s": medians[name],
                         "round_medians_s": [statistics.median(rnd) for rnd in ts],
                         "gb_per_s": gbps, "machine_pct": 100 * gbps / machine,
                         "speedup": medians["torch"] / medians[name]})
        out["workloads"].append({"label": label, "num_params": n, "sides": rows})
        del sides
        gc.collect()
    return out


def render_pipeline(result: dict) -> str:
    """The comparison as a text table."""
    lines = [f"torch {result['torch']}, {result['threads']} threads; machine bandwidth "
             f"{result['machine_gbps']:.1f} GB/s (best of copy/triad/update); "
             f"{result['rounds']} rounds x {result['steps']} timed steps after "
             f"{result['warmup']} warm-up steps, sides alternating; scale {result['scale']:g}"]
    header = (f"{'workload':<14} {'side':<8} {'median ms':>10} {'round medians ms':>19} "
              f"{'GB/s @32B/p':>12} {'% machine':>10} {'speedup':>8}")
    lines += [header, "-" * len(header)]
    for wl in result["workloads"]:
        for row in wl["sides"]:
            per_round = [t * 1e3 for t in row["round_medians_s"]]
            lines.append(f"{wl['label'] if row['side'] == 'torch' else '':<14} "
                         f"{row['side']:<8} {row['median_s'] * 1e3:>10.2f} "
                         f"{min(per_round):>8.2f} - {max(per_round):>8.2f} "
                         f"{row['gb_per_s']:>12.1f} {row['machine_pct']:>9.0f}% "
                         f"{row['speedup']:>7.2f}x")
    lines.append(f"speedup = torch median / side median (target: trainop >= "
                 f"{result['target_speedup']:.2f}x); GB/s counts the 32-byte floor for both "
                 f"sides (torch moves more bytes).")
    return "\n".join(lines) + "\n"
