"""``trainop bench --boundary``: what the checked C boundary costs the native step, on the
workloads (a)-(d), interleaved in one process.

One optimizer (``implementation="native"``) is stepped two ways, on the same tensors:

- ``checked``: the step as shipped, every tensor handed to C verified by
  ``kernels.native.boundary`` (one pass per step; the full check cached by data pointer and
  size);
- ``unchecked``: the same step with the boundary replaced by what the native step read before
  it existed (the data pointers of every list and the variables' element counts, no other
  check; sparse rows with no check at all): the step before the boundary existed, for
  comparison only.

Each round times ``steps`` steps of both, in rotating order (``bench.rounds``). The verdict per
row is ``checked / unchecked`` against ``TARGET`` (the same speed, with room for the machine's
noise); exit status 1 if a row misses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch

import trainop
from trainop.bench.rounds import time_rounds
from trainop.bench.workloads import build_data, make_workload
from trainop.kernels.native import boundary
from trainop.kernels.native._binding import pointers, sizes

__all__ = ["CASES", "TARGET", "render_boundary", "run_boundary_benchmark"]

TARGET = 1.05
#: (workload, optimizer) pairs: the dense rules with the most lists, and the sparse row path.
CASES = (("a", "AdamOptimizer"), ("a", "FtrlOptimizer"),
         ("b", "AdamOptimizer"), ("b", "GradientDescentOptimizer"), ("b", "FtrlOptimizer"),
         ("c", "AdamOptimizer"), ("c", "GradientDescentOptimizer"), ("c", "FtrlOptimizer"),
         ("d", "LazyAdamOptimizer"), ("d", "AdagradOptimizer"))


def _pre_hardening_checked(lists, *, cache=None, **_) -> tuple | None:
    addresses = pointers(lists)
    return None if addresses is None else (addresses, sizes(lists[0]))


def _pre_hardening_rows(tables, indices, values, *, rule: str = "rows") -> bytes:
    return np.fromiter((t.data_ptr() for t in tables), dtype=np.uint64,
                       count=len(tables)).tobytes()  # no check at all: the tables' pointers


@contextmanager
def _unchecked() -> Iterator[None]:
    saved = boundary.checked, boundary.checked_rows
    boundary.checked, boundary.checked_rows = _pre_hardening_checked, _pre_hardening_rows
    try:
        yield
    finally:
        boundary.checked, boundary.checked_rows = saved


def _steppers(key: str, name: str, scale: float) -> dict[str, Callable[[], None]]:
    """Both candidates step the same optimizer (same tensors, same memory layout)."""
    data = build_data(make_workload(key, scale), torch.float32, torch.device("cpu"))
    params, grads = data.clone()
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    opt = getattr(trainop, name)(learning_rate=1e-3, params=params, implementation="native")

    def unchecked() -> None:
        with _unchecked():
            opt.step()
    return {"checked": opt.step, "unchecked": unchecked}


def run_boundary_benchmark(*, scale: float = 1.0, rounds: int = 8, steps: int = 5,
                           warmup: int = 3, cases=CASES) -> dict:
    """Median step of ``checked`` and ``unchecked`` per case (see the module doc)."""
    if not trainop.kernels.native.available():
        raise RuntimeError("trainop bench --boundary needs the native kernels: "
                           f"{trainop.kernels.native.unavailable_reason()}")
    rows = []
    for key, name in cases:
        steps_of = _steppers(key, name, scale)
        medians = time_rounds(steps_of, rounds=rounds, steps=steps, warmup=warmup)
        ratio = medians["checked"] / medians["unchecked"]
        rows.append({"workload": key, "optimizer": name, "median_s": medians, "ratio": ratio,
                     "passed": ratio <= TARGET})
        del steps_of
    return {"scale": scale, "rounds": rounds, "steps_per_round": steps, "target": TARGET,
            "threads": torch.get_num_threads(), "rows": rows,
            "passed": all(r["passed"] for r in rows)}


def render_boundary(result: dict) -> str:
    lines = ["## The checked C boundary vs the unchecked native step", "",
             f"Scale {result['scale']}, {result['rounds']} interleaved rounds of "
             f"{result['steps_per_round']} steps, {result['threads']} threads; "
             "implementation='native'.", "",
             "| workload | optimizer | unchecked (ms) | checked (ms) | checked / unchecked |",
             "|---|---|---:|---:|---:|"]
    for r in result["rows"]:
        m = r["median_s"]
        verdict = "" if r["passed"] else " FAIL"
        lines.append(f"| ({r['workload']}) | {r['optimizer']} | {m['unchecked'] * 1e3:.3f} | "
                     f"{m['checked'] * 1e3:.3f} | {r['ratio']:.3f}{verdict} |")
    lines += ["", f"Target: checked / unchecked <= {result['target']} on every row: "
              f"{'PASS' if result['passed'] else 'FAIL'}", ""]
    return "\n".join(lines)
