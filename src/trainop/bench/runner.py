"""Run a benchmark: probe the bandwidth, then time every candidate of every workload.

Everything is measured in this one process, each candidate over its own copies of the
workload's tensors. By default the torch and trainop candidates of one optimizer's comparison
are timed interleaved (``interleaved``: one step of each in turn, round after round), so drift
in the machine's speed does not leak into the ratios; a torch peer shared by several
optimizers is timed again with each. TF1 peers run last, one at a time, so that TensorFlow's
thread pools never overlap a torch measurement. ``interleave=False`` times one candidate after
another instead. The result is a JSON-ready dict; ``report`` renders it and ``checks`` judges
it against the issue.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from trainop.bench.candidates import Candidate, build, plan_groups
from trainop.bench.checks import run_checks
from trainop.bench.interleaved import measure_interleaved, new_row
from trainop.bench.memory import peak_extra_bytes
from trainop.bench.probe import measure_bandwidth
from trainop.bench.progress import Progress
from trainop.bench.specs import spec_for
from trainop.bench.tf1_peer import load_tensorflow
from trainop.bench.timing import synchronizer, time_steps
from trainop.bench.verdict import judge
from trainop.bench.workloads import build_data, make_workload

__all__ = ["SCHEMA", "BenchConfig", "run_benchmark"]

SCHEMA = "trainop.bench/1"


@dataclass
class BenchConfig:
    """What to run (the CLI's options, validated)."""

    optimizers: Sequence[str]  # trainop class names
    implementations: Sequence[str] | None = None  # None: all each class offers
    workloads: Sequence[str] = ("a", "b", "c", "d")
    scale: float = 1.0
    dtype: str = "float32"
    device: str = "cpu"
    repeats: int = 10
    warmup: int = 3
    seed: int = 0
    torch_peers: bool = True
    tf1_peers: bool = True
    memory: bool = True
    probe_mib: int = 128
    progress: bool = True
    interleave: bool = True


def run_benchmark(config: BenchConfig) -> dict[str, Any]:
    """Run ``config``; returns the JSON-ready result (see ``report`` for its layout).

    Sparse tensors are built with torch's invariant checks explicitly off (its default), so
    that torch's own sparse optimizers, as peers, do not warn about the implicit default."""
    with torch.sparse.check_sparse_tensor_invariants(enable=False):
        return _run_benchmark(config)


def _run_benchmark(config: BenchConfig) -> dict[str, Any]:
    device = torch.device(config.device)
    dtype = getattr(torch, config.dtype)
    notes: list[str] = []
    tf, tf_version = None, None
    if config.tf1_peers:
        tf, reason = load_tensorflow()
        if tf is None:
            notes.append(f"TF1 peers skipped: {reason}")
        else:
            tf_version = tf.__version__
    plans = []
    for key in config.workloads:
        workload = make_workload(key, config.scale)
        groups, candidates, plan_notes = plan_groups(
            workload, config.optimizers, config.implementations,
            torch_peers=config.torch_peers, tf1_peers=tf is not None)
        # TF1 last: its session threads must not overlap torch's timed steps.
        ordered = sorted(candidates.values(), key=lambda c: c.kind == "tf1")
        plans.append((workload, groups, {c.id: c for c in ordered}))
        notes.extend(n for n in plan_notes if n not in notes)
    per_run = config.warmup + config.repeats
    if config.interleave:
        total = 1 + sum(per_run + (config.memory and cands[i].kind != "tf1")
                        for _, groups, cands in plans for g in groups
                        for i in (*g.subjects, *g.peers) if cands[i].kind != "tf1")
        total += sum(per_run for _, _, cands in plans for c in cands.values() if c.kind == "tf1")
    else:
        total = 1 + sum(per_run + (config.memory and c.kind != "tf1")
                        for _, _, cands in plans for c in cands.values())
    load_before = _load_average()
    progress = Progress(total, enabled=config.progress)
    progress.start("bandwidth probe")
    bandwidth = measure_bandwidth(device, config.probe_mib << 20)
    progress.tick()
    progress.finish_run(f"{bandwidth['best_gbps']:.1f} GB/s")

    workloads_out = []
    for workload, groups, candidates in plans:
        data = build_data(workload, dtype, device, config.seed)
        param_bytes = workload.num_params * data.params[0].element_size()
        results: dict[str, dict[str, Any]] = {}
        per_group: list[dict[str, dict[str, Any]]] = []
        rate = (candidates, workload, dtype, param_bytes, bandwidth["best_gbps"])

        if config.interleave:
            for group in groups:
                cands = [candidates[i] for i in (*group.subjects, *group.peers)
                         if candidates[i].kind != "tf1"]
                progress.start(f"({workload.key}) {group.optimizer}: {len(cands)} interleaved")
                rows = _rated(*rate, measure_interleaved(
                    cands, data, warmup=config.warmup, repeats=config.repeats,
                    memory=config.memory, device=device, sync=synchronizer(device),
                    tick=progress.tick))
                per_group.append(rows)
                progress.finish_run(f"{sum(r['error'] is None for r in rows.values())} timed")
        for cand in candidates.values():
            if config.interleave and cand.kind != "tf1":
                continue
            progress.start(f"({workload.key}) {cand.label}")
            results[cand.id] = _measure(cand, data, config, device, tf, progress)
            _rated(*rate, {cand.id: results[cand.id]})
            err = results[cand.id]["error"]
            progress.finish_run(f"error: {err}" if err else
                                f"{results[cand.id]['median_s'] * 1e3:.3f} ms")
        if not per_group:
            per_group = [results] * len(groups)
        del data
        gc.collect()
        workloads_out.append({
            "key": workload.key,
            "title": workload.title,
            "sparse": workload.sparse,
            "num_tensors": len(workload.shapes),
            "num_params": workload.num_params,
            "touched_params": workload.touched_params,
            "param_bytes": param_bytes,
            "groups": [_group_out(g, {**results, **rows}, dtype)
                       for g, rows in zip(groups, per_group, strict=True)],
        })
    progress.close()
    out = {
        "schema": SCHEMA,
        "config": {**asdict(config), "optimizers": list(config.optimizers),
                   "implementations": (None if config.implementations is None
                                       else list(config.implementations)),
                   "workloads": list(config.workloads)},
        "environment": {
            "torch": torch.__version__, "tensorflow": tf_version,
            "python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": _load_average(),
            "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                            else "cpu"),
        },
        "bandwidth": bandwidth,
        "workloads": workloads_out,
        "notes": notes,
    }
    out["checks"] = run_checks(out)
    out["verdict"] = judge(out)
    return out


def _measure(cand: Candidate, data, config: BenchConfig, device: torch.device, tf,
             progress: Progress) -> dict[str, Any]:
    row = new_row(cand)
    runnable = None
    ticks_left = config.warmup + config.repeats + (config.memory and cand.kind != "tf1")
    sync = synchronizer(device)

    def tick() -> None:
        nonlocal ticks_left
        ticks_left -= 1
        progress.tick()

    start = time.perf_counter()
    try:
        runnable = build(cand, data, device=device, tf=tf, threads=torch.get_num_threads())
        times = time_steps(runnable.step, warmup=config.warmup, repeats=config.repeats,
                           sync=sync, tick=tick)
        row["times_s"] = times
        row["median_s"] = statistics.median(times)
        row["min_s"] = min(times)
        if config.memory and runnable.measures_memory:
            row["peak_extra_bytes"] = peak_extra_bytes(runnable.step, device)
            tick()
    except Exception as exc:  # one failing candidate must not stop the benchmark
        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    finally:
        # close() drops every tensor it holds, so no gc.collect (slow) is needed per run.
        if runnable is not None:
            runnable.close()
        del runnable
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if ticks_left > 0:
        progress.tick(ticks_left)
    row["wall_s"] = time.perf_counter() - start
    return row


def _load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (other work on the machine skews timings)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _rates(row: dict[str, Any], cand: Candidate, workload, dtype: torch.dtype,
           param_bytes: int, best_gbps: float) -> dict[str, Any]:
    """Bytes per parameter, effective GB/s, % of the probe's bandwidth, extra memory in %."""
    bpp = cand.arrays * torch.empty((), dtype=dtype).element_size()
    out: dict[str, Any] = {"bytes_per_param": bpp, "gb_per_s": None, "bandwidth_pct": None,
                           "peak_extra_pct": None}
    if row["median_s"]:
        gbps = bpp * workload.touched_params / row["median_s"] / 1e9
        out["gb_per_s"] = gbps
        out["bandwidth_pct"] = 100.0 * gbps / best_gbps
    if row["peak_extra_bytes"] is not None:
        out["peak_extra_pct"] = 100.0 * row["peak_extra_bytes"] / param_bytes
    return out


def _rated(candidates, workload, dtype, param_bytes, best_gbps,
           rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for cid, row in rows.items():
        row.update(_rates(row, candidates[cid], workload, dtype, param_bytes, best_gbps))
    return rows


def _group_out(group, results: dict[str, dict[str, Any]], dtype: torch.dtype) -> dict[str, Any]:
    spec = spec_for(group.optimizer)
    subjects = [dict(results[i]) for i in group.subjects]
    peers = [dict(results[i]) for i in group.peers]
    by_impl = {r["implementation"]: r for r in subjects}
    reference = by_impl.get("reference")
    for row in subjects:
        ratios = {}
        others = list(peers)
        if row["implementation"] != "reference" and reference is not None:
            others.insert(0, reference)
        for peer in others:
            if row["median_s"] and peer["median_s"]:
                ratios[peer["id"]] = peer["median_s"] / row["median_s"]
        row["ratios"] = ratios
    return {
        "optimizer": group.optimizer,
        "bytes_per_param": spec.arrays * torch.empty((), dtype=dtype).element_size(),
        "traffic": spec.traffic,
        "torch_relation": spec.torch_relation,
        "subjects": subjects,
        "peers": peers,
    }
