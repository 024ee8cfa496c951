"""``trainop bench --gpu-suite`` (what ``trainop bench --device cuda`` runs): issue #31's GPU
workloads, trainop's Triton kernels against torch's fused and foreach Adam, torch's
post-backward recipe, optax's ``adam`` under ``jax.jit`` and a device-to-device copy, in one
process, interleaved, with the issue's targets and a met/missed verdict per target.

Workloads (``--scale`` multiplies the sizes; 1 gives the issue's):

- ``adam_1x256M``: Adam on one tensor of 256M (2^28) parameters;
- ``adam_400``: Adam on 400 tensors of 20,000; ``adam_2000``: on 2,000 tensors of 1,000 (the
  count scales); optax only on the one-tensor workload (XLA's compile of a jit over 2,000
  leaves takes ~44 s);
- ``post_backward``: unscale, finite check, clip 1.0, Adam on a 355M-parameter transformer's
  tensor shapes (``gpu_peers.transformer_shapes``), against GradScaler ``unscale_`` +
  ``clip_grad_norm_`` + fused Adam; gradients refilled before each step (untimed);
- ``mixed_bf16``: bfloat16 weights, float32 master and slots (``MixedPrecisionOptimizerWrapper``),
  Adam, on 256M parameters: 30 B/param (the read pass's half gradient in, 2; the update's half
  grad in, float32 master/m/v in and out, half weight out, 28);
- ``other_<class>``: every other optimizer on one tensor of 256M;
- ``captured_step``: a whole step in a CUDA graph against eager (CUDA only).

Columns: the median step time, bytes per parameter (the floor: ``bench.specs``), effective
GB/s, that as a percentage of the copy's GB/s measured in the same rounds, and the median over
rounds of the per-round ratio to the workload's baseline. trainop appears as ``triton``
(``implementation="triton"``, where it runs) and ``auto`` (today's default path). Targets are
binding only for a run on CUDA at ``--scale 1`` with at least 10 rounds; any other run is
informational (exit status 0).
"""

from __future__ import annotations

import gc
import importlib.metadata
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainop.bench import gpu_peers as peers
from trainop.bench.gpu_capture import eager_and_captured
from trainop.bench.gpu_timing import Candidate, median_ratio, time_interleaved
from trainop.bench.pipeline import torch_recipe, trainop_pipeline
from trainop.bench.specs import SPECS

__all__ = ["TARGETS", "WORKLOAD_KEYS", "render_gpu_suite", "run_gpu_suite", "summarize"]

M = 2 ** 20
BIG = 256 * M
COPY = "copy (bandwidth probe)"
#: Steps timed back to back per round on CUDA (``gpu_timing``): a training loop's overlap of
#: one step's host work with the previous step's kernels, not an idle device before each.
BACK_TO_BACK = 4
TRITON_ROW, AUTO_ROW = "trainop triton", "trainop auto (today's path)"


@dataclass(frozen=True)
class Target:
    """``row``'s ``metric`` (``ratio``: to the baseline, ``pct``: % of copy bandwidth)
    compared with ``value`` (``<=`` for ratios, ``>=`` for percentages)."""

    row: str
    metric: str
    value: float

    def met(self, row: dict) -> bool | None:
        got = row.get(self.metric)
        if got is None:
            return None
        return got <= self.value if self.metric == "ratio" else got >= self.value

    def text(self) -> str:
        return (f"{self.row}: ratio <= {self.value:g}" if self.metric == "ratio"
                else f"{self.row}: >= {self.value:g}% of copy bandwidth")


#: The issue's table: workload key -> targets (each the triton row's).
TARGETS: dict[str, tuple[Target, ...]] = {
    "adam_1x256M": (Target(TRITON_ROW, "ratio", 1.0), Target(TRITON_ROW, "pct", 85)),
    "adam_400": (Target(TRITON_ROW + " flat", "ratio", 0.7),),
    "adam_2000": (Target(TRITON_ROW + " flat", "ratio", 0.3),),
    "post_backward": (Target(TRITON_ROW, "ratio", 1 / 1.4), Target(TRITON_ROW, "pct", 85)),
    "mixed_bf16": (Target(TRITON_ROW, "pct", 85),),
    "other": (Target(TRITON_ROW, "pct", 85),),
    "captured_step": (Target("captured (graph replay)", "ratio", 1.0),),
}


#: Every workload's key, in the order of a run.
WORKLOAD_KEYS = ("adam_1x256M", "adam_400", "adam_2000", "post_backward", "mixed_bf16",
                 *(f"other_{n}" for n in SPECS if n != "AdamOptimizer"), "captured_step")


def _scaled(n: int, scale: float, least: int = 1) -> int:
    return max(least, round(n * scale))


def _adam_sides(sizes: list, device, triton: bool, flat: bool) -> dict[str, Callable]:
    sides: dict[str, Callable] = {}
    if triton:
        sides[TRITON_ROW] = lambda: peers.trainop_optimizer("AdamOptimizer", sizes, device,
                                                            peers.TRITON)
        if flat:
            sides[TRITON_ROW + " flat"] = lambda: peers.trainop_optimizer(
                "AdamOptimizer", sizes, device, peers.TRITON, flat=True)
    sides[AUTO_ROW] = lambda: peers.trainop_optimizer("AdamOptimizer", sizes, device, None)
    if flat:
        sides[AUTO_ROW + " flat"] = lambda: peers.trainop_optimizer(
            "AdamOptimizer", sizes, device, None, flat=True)
    sides["torch Adam fused"] = lambda: peers.torch_adam(sizes, device, fused=True)
    sides["torch Adam foreach"] = lambda: peers.torch_adam(sizes, device, fused=False)
    if len(sizes) == 1:  # XLA compiles a jit over 2,000 leaves for ~44 s: one tensor only
        sides["optax adam (jax.jit)"] = lambda: peers.optax_adam(sizes, device)
    return sides


def _refilled(make: Callable[[], tuple[Callable, Callable]]) -> Callable[[], Candidate]:
    def build() -> Candidate:
        refill, step = make()
        return Candidate(step, prepare=refill)
    return build


def _workloads(scale: float, device, triton: bool) -> list[dict]:
    """(key, label, sizes, bytes/param, baseline, sides) of each workload but the graph."""
    big = [_scaled(BIG, scale)]
    b = [_scaled(20_000, scale)] * 400
    c = [1_000] * _scaled(2_000, scale, least=2)
    shapes = peers.transformer_shapes(scale)
    out = [
        {"key": "adam_1x256M", "label": "Adam, one 256M tensor", "sizes": big, "bpp": 28,
         "baseline": "torch Adam fused", "sides": _adam_sides(big, device, triton, False)},
        {"key": "adam_400", "label": "Adam, 400 tensors", "sizes": b, "bpp": 28,
         "baseline": "torch Adam fused", "sides": _adam_sides(b, device, triton, True)},
        {"key": "adam_2000", "label": "Adam, 2,000 small tensors", "sizes": c, "bpp": 28,
         "baseline": "torch Adam fused", "sides": _adam_sides(c, device, triton, True)},
    ]
    post = {"torch recipe (GradScaler + clip_grad_norm_ + fused Adam)":
            _refilled(lambda: torch_recipe(shapes, device))}
    if triton:
        post[TRITON_ROW] = _refilled(lambda: trainop_pipeline(shapes, device, peers.TRITON))
    post[AUTO_ROW] = _refilled(lambda: trainop_pipeline(shapes, device, None))
    out.append({"key": "post_backward", "label": "post-backward, 355M transformer shapes",
                "sizes": shapes, "bpp": 32, "baseline": next(iter(post)), "sides": post})
    mixed = {"torch (cast, fused Adam on masters, cast back)":
             lambda: peers.torch_mixed(big[0], device)}
    if triton:
        mixed[TRITON_ROW] = lambda: peers.trainop_mixed(big[0], device, peers.TRITON)
    mixed[AUTO_ROW] = lambda: peers.trainop_mixed(big[0], device, None)
    out.append({"key": "mixed_bf16", "label": "bf16 weights + fp32 master, Adam", "sizes": big,
                "bpp": 30, "baseline": next(iter(mixed)), "sides": mixed})
    for name, spec in SPECS.items():
        if name == "AdamOptimizer":
            continue
        sides = {AUTO_ROW: (lambda n=name: peers.trainop_optimizer(n, big, device, None))}
        if triton:
            sides = {TRITON_ROW: (lambda n=name: peers.trainop_optimizer(n, big, device,
                                                                         peers.TRITON)),
                     **sides}
        out.append({"key": f"other_{name}", "label": f"{name}, one 256M tensor", "sizes": big,
                    "bpp": spec.arrays * 4, "baseline": AUTO_ROW, "sides": sides})
    return out


def _measure(workload: dict, device, rounds: int, warmup: int) -> dict:
    n = peers.numel(workload["sizes"])
    cands: dict[str, Candidate] = {}
    rows: dict[str, dict] = {}
    builders = {**workload["sides"], COPY: lambda: peers.copy_probe(n, device)}
    for name, build in builders.items():
        rows[name] = {"name": name, "median_s": None, "error": None}
        try:
            cands[name] = build()
        except Exception as exc:  # a side that cannot be built here (no JAX, no Triton...)
            rows[name]["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    times, errors = time_interleaved(cands, rounds=rounds, warmup=warmup, device=device,
                                     back_to_back=BACK_TO_BACK)
    cands.clear()
    for name, err in errors.items():
        rows[name]["error"] = err
    copy_gbps = None
    if times.get(COPY):
        copy_gbps = 8 * n / statistics.median(times[COPY]) / 1e9
    for name, row in rows.items():
        ts = times.get(name) or []
        if not ts or row["error"]:
            continue
        row["median_s"] = statistics.median(ts)
        bpp = 8 if name == COPY else workload["bpp"]
        row["bytes_per_param"] = bpp
        row["gbps"] = bpp * n / row["median_s"] / 1e9
        row["pct"] = 100 * row["gbps"] / copy_gbps if copy_gbps else None
        row["ratio"] = median_ratio(times, name, workload["baseline"])
    out = {k: workload[k] for k in ("key", "label", "baseline")}
    out.update({"params": n, "tensors": len(workload["sizes"]), "bytes_per_param": workload["bpp"],
                "copy_gbps": copy_gbps, "rows": list(rows.values())})
    if device.type == "cuda":
        torch.cuda.empty_cache()
    gc.collect()
    return out


def _captured(device, rounds: int, warmup: int, implementation: str | None) -> dict:
    out = {"key": "captured_step", "label": "whole step, CUDA graph vs eager",
           "baseline": "eager", "params": None, "tensors": None, "bytes_per_param": None,
           "copy_gbps": None, "rows": [], "implementation": implementation or "auto"}
    if device.type != "cuda":
        out["skipped"] = "needs CUDA"
        return out
    try:
        eager, graphed, equal = eager_and_captured(implementation, device=device)
        out["replays_equal_eager"] = equal()
        times, errors = time_interleaved(
            {"eager": Candidate(eager.eager), "captured (graph replay)":
             Candidate(graphed.replay)}, rounds=rounds, warmup=warmup, device=device)
    except Exception as exc:
        out["skipped"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return out
    for name, ts in times.items():
        out["rows"].append({"name": name, "error": errors.get(name),
                            "median_s": statistics.median(ts) if ts else None,
                            "ratio": median_ratio(times, name, "eager")})
    return out


def run_gpu_suite(*, device: str = "cuda", scale: float = 1.0, rounds: int = 10,
                  warmup: int = 3, only: list[str] | None = None,
                  on_workload: Callable[[dict, dict], object] | None = None) -> dict:
    """Every workload (or those whose key starts with one of ``only``); a JSON-ready result
    with rows, targets and verdicts. ``on_workload(result, workload)`` is called after each
    workload is measured (``result`` so far: ``summarize`` makes a partial one whole).

    Args:
        device: ``"cuda"``/``"cuda:N"`` (binding at ``scale=1``, ``rounds >= 10``) or
            ``"cpu"`` (a smoke run; the Triton rows need ``TRITON_INTERPRET=1``).
        scale: size multiplier of the workloads, > 0 (1: the issue's sizes).
        rounds: timed rounds per candidate, >= 1; ``warmup``: untimed steps first, >= 0.
        only: key prefixes of ``WORKLOAD_KEYS`` (e.g. ``["adam", "other"]``), None: all.

    Example (what ``trainop bench --device cuda --gpu-workloads adam_400`` runs)::

        result = run_gpu_suite(device="cuda", only=["adam_400"])
        print(render_gpu_suite(result))
    """
    dev = torch.device(device)
    why_not = peers.triton_unavailable(dev)
    result = {
        "device": str(dev), "card": torch.cuda.get_device_name(dev) if dev.type == "cuda"
        else "cpu", "torch": torch.__version__, "triton": _version("triton"),
        "jax": _version("jax"), "optax": _version("optax"), "scale": scale, "rounds": rounds,
        "warmup": warmup, "back_to_back": BACK_TO_BACK if dev.type == "cuda" else 1,
        "triton_rows": why_not or "implementation='triton'",
        "binding": dev.type == "cuda" and scale == 1 and rounds >= 10, "workloads": []}
    workloads = _workloads(scale, dev, why_not is None)
    for key in WORKLOAD_KEYS:
        if only and not any(key.startswith(o) for o in only):
            continue
        if key == "captured_step":
            measured = _captured(dev, rounds, warmup, None if why_not else peers.TRITON)
        else:
            measured = _measure(next(w for w in workloads if w["key"] == key), dev, rounds,
                                warmup)
        measured["targets"] = _verdicts(measured)
        result["workloads"].append(measured)
        if on_workload is not None:
            on_workload(result, measured)
    return summarize(result)


def summarize(result: dict) -> dict:
    """``result`` with its verdict counts (and, when binding, ``passed``) from the workloads
    measured so far; returns it."""
    verdicts = [t["met"] for w in result["workloads"] for t in w["targets"]]
    result["met"] = sum(v is True for v in verdicts)
    result["missed"] = sum(v is False for v in verdicts)
    result["not_measured"] = sum(v is None for v in verdicts)
    if result["binding"]:
        result["passed"] = result["missed"] == 0 and result["not_measured"] == 0
    return result


def _verdicts(workload: dict) -> list[dict]:
    targets = TARGETS.get(workload["key"].split("_")[0] if workload["key"].startswith("other_")
                          else workload["key"], ())
    rows = {r["name"]: r for r in workload["rows"]}
    out = [{"target": t.text(), "met": t.met(rows.get(t.row, {}))} for t in targets]
    if workload["key"] == "captured_step":
        out.append({"target": "replays equal to eager",
                    "met": workload.get("replays_equal_eager")})
    return out


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cell(value, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def render_gpu_suite(result: dict) -> str:
    """The suite as markdown: one table of rows, then the targets with their verdicts."""
    lines = [
        f"## GPU suite: {result['card']} ({result['device']}), torch {result['torch']}, "
        f"triton {result['triton'] or 'not installed'}, jax {result['jax'] or 'not installed'}",
        "", f"scale {result['scale']:g}, {result['rounds']} interleaved rounds after "
        f"{result['warmup']} warm-up steps, {result.get('back_to_back', 1)} step(s) back to "
        f"back per timed run; triton rows: {result['triton_rows']}; ratio: median "
        f"over rounds of the per-round time ratio to the workload's baseline.", "",
        "| workload | params | side | median ms | B/param | GB/s | % of copy BW | ratio to "
        "baseline |", "|---|--:|---|--:|--:|--:|--:|--:|"]
    for w in result["workloads"]:
        head = f"| {w['label']} | {_cell(w['params'], ',d')} |"
        if w.get("skipped"):
            lines.append(f"{head} skipped: {w['skipped']} | | | | | |")
        for row in w["rows"]:
            if row.get("error"):
                lines.append(f"{head} {row['name']}: {row['error']} | | | | | |")
                continue
            ms = None if row.get("median_s") is None else row["median_s"] * 1e3
            lines.append(
                f"{head} {row['name']} | {_cell(ms, '.3f')} | "
                f"{_cell(row.get('bytes_per_param'), 'd')} | {_cell(row.get('gbps'), '.0f')} | "
                f"{_cell(row.get('pct'), '.0f')} | {_cell(row.get('ratio'), '.2f')} |")
    lines += ["", "| workload | target | verdict |", "|---|---|---|"]
    for w in result["workloads"]:
        for t in w["targets"]:
            verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
            lines.append(f"| {w['label']} | {t['target']} | {verdict} |")
    kind = "binding" if result["binding"] else "informational (binding: CUDA, --scale 1, " \
        ">= 10 rounds)"
    lines += ["", f"Targets: {result['met']} met, {result['missed']} missed, "
              f"{result['not_measured']} not measured; {kind}.", ""]
    return "\n".join(lines)
