"""The Triton path's host cost (``trainop bench --host``): Triton launches per step and the
marginal host time per tensor, on this machine, with no GPU.

The step runs as on a GPU (the dispatch, the boundary, the tables, the device scalars, every
launch's arguments) but under Triton's interpreter (``TRITON_INTERPRET=1``) with the
interpreter's launches replaced by no-ops that count them: what is left is the host's own work,
which on a GPU decides whether the device waits for the host. Plain, non-flattened
``Parameter``s of small mixed sizes (1, odd, aligned); before every step each gradient is set
to a new tensor (one of two saved sets, in turn: new addresses every step, as after
``zero_grad(set_to_none=True)``).

Workloads (issue #38's targets: at most 8 launches per Adam step and 16 per pipeline step over
any number of tensors, at most 3 us of host time per added tensor):

- ``adam``: ``AdamOptimizer.step()``, 400 and 2,000 tensors;
- ``post_backward``: ``GradientPipeline`` (dynamic loss scale, global clip at 1.0, Adam)
  ``step()``, 292 tensors (a 355M transformer's count) and 2,000.

Each row also counts every ATen operation of one step besides the Triton launches
(``bench.op_count``: each one a launch, a copy or an allocation on a GPU) and gives the fixed
cost per step (the step time at ``BASE`` tensors less ``BASE`` times the marginal cost) beside
the marginal cost per tensor; the result ends with the post-backward step's operations beside
torch's recipe's, counted in the same run (``bench.step_ops``).

The marginal cost is (time per step at N tensors - time at ``BASE`` tensors) / (N - ``BASE``),
the per-step time the process's CPU time in the step alone (a shared machine's waits for a core
are not counted; the gradients are set before the step, untimed), the median over ``rounds``
rounds of ``steps`` steps each.
"""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainop.bench.op_count import counting

__all__ = ["BASE", "LAUNCH_TARGETS", "PER_TENSOR_TARGET_US", "WORKLOADS", "counted_launches",
           "render_host", "run_host_benchmark", "stepper"]

#: The tensor count the marginal cost is measured from.
BASE = 8
#: Workload -> tensor counts measured.
WORKLOADS = {"adam": (400, 2000), "post_backward": (292, 2000)}
#: Workload -> the most Triton launches a step may take (issue #38).
LAUNCH_TARGETS = {"adam": 8, "post_backward": 16}
PER_TENSOR_TARGET_US = 3.0
#: Tensor sizes, in turn: 1, odd, a multiple of 16, a block -1 and +1 elements' worth of odd.
SIZES = (1, 7, 16, 33, 64, 5, 1023, 48)


@contextlib.contextmanager
def counted_launches(*, run: bool = False) -> Iterator[list[str]]:
    """Triton's interpreter on for the block (``TRITON_INTERPRET=1``); the list yielded
    collects the name of every kernel launched. ``run``: the launches run as usual, else they
    are no-ops (nothing computed, only the host's work left)."""
    from triton.runtime.interpreter import InterpretedFunction

    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    real = InterpretedFunction.run
    names: list[str] = []

    def counted(self, *args, **kwargs):
        names.append(self.fn.__name__)
        return real(self, *args, **kwargs) if run else None

    InterpretedFunction.run = counted
    try:
        yield names
    finally:
        InterpretedFunction.run = real
        if saved is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = saved


def _model(count: int, device: torch.device | None = None
           ) -> tuple[list[torch.nn.Parameter], list[list[torch.Tensor]]]:
    """``count`` parameters of ``SIZES`` in turn and two sets of gradients for them."""
    gen = torch.Generator().manual_seed(0)
    sizes = [SIZES[i % len(SIZES)] for i in range(count)]
    params = [torch.nn.Parameter((torch.randn(n, generator=gen) * 0.02).to(device))
              for n in sizes]
    grads = [[(torch.randn(n, generator=gen) * 1e-3).to(device) for n in sizes]
             for _ in range(2)]
    return params, grads


def stepper(workload: str, count: int, groups: int = 1, *, device: torch.device | None = None
            ) -> tuple[Callable[[int], None], Callable[[], Any]]:
    """(set the gradients of step ``k``, the step) of ``workload`` over ``count`` tensors, in
    ``groups`` param groups (the tensors dealt out in turn), on ``device`` (default CPU)."""
    import trainop
    from trainop.processing import (
        BackoffLossScaler,
        ClipByGlobalNorm,
        GradientPipeline,
        LossScale,
    )

    params, grads = _model(count, device)
    dealt = [{"params": params[g::groups]} for g in range(groups)]
    opt = trainop.AdamOptimizer(1e-3, params=dealt, implementation="triton")
    step = opt.step
    if workload == "post_backward":
        step = GradientPipeline(opt, [LossScale(BackoffLossScaler(scale_max=2.0 ** 14)),
                                      ClipByGlobalNorm(1.0)]).step

    def prepare(k: int) -> None:
        for p, g in zip(params, grads[k % 2], strict=True):
            p.grad = g

    return prepare, step


_stepper = stepper


def _measure(workload: str, count: int, *, rounds: int, steps: int, warmup: int
             ) -> tuple[float, int, int]:
    """(median host CPU seconds per step, launches per step, ATen operations per step) of
    ``workload`` over ``count`` tensors: the step alone (the gradients are set before it,
    untimed), in this process's CPU time (a shared machine's waits for a core are not the
    host's work)."""
    with counted_launches() as names:
        prepare, step = _stepper(workload, count)
        for k in range(warmup):
            prepare(k)
            step()
        prepare(warmup)
        names.clear()
        with counting() as ops:
            step()
        launches = len(names)
        per_round = []
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for _ in range(rounds):
                spent = 0.0
                for k in range(steps):
                    prepare(k)
                    start = time.process_time()
                    step()
                    spent += time.process_time() - start
                per_round.append(spent / steps)
        finally:
            if gc_was_enabled:
                gc.enable()
    return statistics.median(per_round), launches, ops.total


def run_host_benchmark(*, rounds: int = 5, steps: int = 10, warmup: int = 3,
                       op_counts: bool = True) -> dict:
    """Every workload of ``WORKLOADS``: launches and ATen operations per step, the fixed host
    cost per step and the marginal host microseconds per tensor against the targets; with
    ``op_counts`` also the post-backward step's operations beside torch's recipe
    (``step_ops``); a JSON-ready result (``passed``: every target met)."""
    from trainop.kernels import triton as tk

    out: dict = {"torch": torch.__version__, "threads": torch.get_num_threads(),
                 "rounds": rounds, "steps": steps, "warmup": warmup, "base_tensors": BASE,
                 "per_tensor_target_us": PER_TENSOR_TARGET_US, "rows": []}
    if not tk.available():
        out["error"] = "Triton is not installed"
        return out
    passed = True
    for workload, counts in WORKLOADS.items():
        base, _, _ = _measure(workload, BASE, rounds=rounds, steps=steps, warmup=warmup)
        for count in counts:
            seconds, launches, ops = _measure(workload, count, rounds=rounds, steps=steps,
                                              warmup=warmup)
            marginal = (seconds - base) / (count - BASE) * 1e6
            ok = launches <= LAUNCH_TARGETS[workload] and marginal <= PER_TENSOR_TARGET_US
            passed = passed and ok
            out["rows"].append({"workload": workload, "tensors": count, "launches": launches,
                                "launch_target": LAUNCH_TARGETS[workload], "ops": ops,
                                "step_ms": seconds * 1e3, "base_step_ms": base * 1e3,
                                "fixed_us_per_step": base * 1e6 - BASE * marginal,
                                "marginal_us_per_tensor": marginal, "met": ok})
    if op_counts:
        from trainop.bench.step_ops import measure_step_ops

        out["step_ops"] = measure_step_ops()
        passed = passed and out["step_ops"]["met"]
    out["passed"] = passed
    return out


def render_host(result: dict) -> str:
    """The result as a text table."""
    if "error" in result:
        return f"trainop bench --host: {result['error']}\n"
    lines = [f"torch {result['torch']}, {result['threads']} threads; Triton's interpreter with "
             f"no-op launches; host CPU time per step, median of {result['rounds']} rounds x "
             f"{result['steps']} steps after {result['warmup']} warm-up steps; gradients at new "
             "addresses every step"]
    header = (f"{'workload':<14} {'tensors':>7} {'launches':>9} {'ops':>4} {'step ms':>8} "
              f"{'fixed us':>9} {'us/tensor':>10} {'met':>4}")
    lines += [header, "-" * len(header)]
    for row in result["rows"]:
        lines.append(f"{row['workload']:<14} {row['tensors']:>7} "
                     f"{row['launches']:>4} <= {row['launch_target']:<2} "
                     f"{row.get('ops', 0):>4} {row['step_ms']:>8.2f} "
                     f"{row.get('fixed_us_per_step', 0.0):>9.1f} "
                     f"{row['marginal_us_per_tensor']:>10.2f} {'yes' if row['met'] else 'NO':>4}")
    lines.append(f"ops: every ATen operation of one step besides the Triton launches; fixed "
                 f"us: the step's cost at 0 tensors (step time at {result['base_tensors']} "
                 f"tensors less {result['base_tensors']} x us/tensor); us/tensor: (step time - "
                 f"step time at {result['base_tensors']} tensors) per added tensor (target <= "
                 f"{result['per_tensor_target_us']:g})")
    if "step_ops" in result:
        from trainop.bench.step_ops import render_step_ops

        lines += ["", render_step_ops(result["step_ops"]).rstrip("\n")]
    return "\n".join(lines) + "\n"
