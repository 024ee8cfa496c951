"""``trainop bench --numerics``: what leaving ``trainop.check_numerics`` on costs.

One training step of a transformer encoder (``torch.nn.TransformerEncoder``: embedding-free, 4
heads, feed-forward ``2 * d_model``, dropout 0.1, a batch of 8 sequences of 32, mean-squared
loss, ``trainop.AdamOptimizer``) at two sizes, the small one where the checks' fixed cost per
module weighs most:

- ``d_model`` 128, 2 layers (target: at most 1.2x the plain step);
- ``d_model`` 512, 6 layers (target: at most 1.1x).

Each size three ways, each on its own copy of the same model and data:

- ``plain``: forward, backward, ``opt.step()``;
- ``check_numerics``: the same inside ``trainop.check_numerics(model, optimizer=opt)`` (forward,
  backward and update checks);
- ``detect_anomaly``: the same under ``torch.autograd.detect_anomaly()``, PyTorch's own tool.

Interleaved: every round times ``steps`` steps of each candidate (a quarter of them, at least
one, for the large size), in an order rotated from round to round; the table reports the median
step time over all timed steps and the ratio to ``plain``.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Callable

import torch
from torch import nn

import trainop
from trainop.bench.rounds import time_rounds

__all__ = ["WORKLOADS", "render_numerics", "run_numerics_benchmark"]

#: (d_model, layers, target ratio of check_numerics to plain).
WORKLOADS = ((128, 2, 1.2), (512, 6, 1.1))
CANDIDATES = ("plain", "check_numerics", "detect_anomaly")


def _model(seed: int, d_model: int, layers: int) -> nn.Module:
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=2 * d_model,
                                       dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)


def _candidate(kind: str, base: nn.Module, x: torch.Tensor,
               y: torch.Tensor) -> tuple[Callable[[], None], contextlib.ExitStack]:
    model = copy.deepcopy(base)
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-4)
    stack = contextlib.ExitStack()
    if kind == "check_numerics":
        stack.enter_context(trainop.check_numerics(model, optimizer=opt))

    def anomaly_mode() -> contextlib.AbstractContextManager:
        if kind != "detect_anomaly":
            return contextlib.nullcontext()
        with warnings.catch_warnings():  # torch warns each time that the mode is slow: known
            warnings.filterwarnings("ignore", "Anomaly Detection has been enabled")
            return torch.autograd.detect_anomaly()

    def step() -> None:
        opt.zero_grad()
        with anomaly_mode():
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
        opt.step()
    return step, stack


def _one(d_model: int, layers: int, target: float, *, steps: int, rounds: int, warmup: int,
         batch: int, seq: int) -> dict:
    base = _model(0, d_model, layers)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, seq, d_model, generator=g)
    y = torch.randn(batch, seq, d_model, generator=g)
    built = {kind: _candidate(kind, base, x, y) for kind in CANDIDATES}
    try:
        with torch.autograd.set_detect_anomaly(False):
            medians = time_rounds({kind: step for kind, (step, _) in built.items()},
                                  rounds=rounds, steps=steps, warmup=warmup)
    finally:
        for _, stack in built.values():
            stack.close()
    ratio = {k: medians[k] / medians["plain"] for k in CANDIDATES}
    return {
        "d_model": d_model, "layers": layers, "batch": batch, "seq": seq,
        "parameters": sum(p.numel() for p in base.parameters()),
        "tensors": len(list(base.parameters())), "steps_per_round": steps,
        "median_s": medians, "ratio_to_plain": ratio, "target": target,
        "passed": ratio["check_numerics"] <= target,
    }


def run_numerics_benchmark(*, steps: int = 10, rounds: int = 8, warmup: int = 3,
                           workloads: tuple[tuple[int, int, float], ...] = WORKLOADS,
                           batch: int = 8, seq: int = 32) -> dict:
    """Median step times (seconds) of the three candidates for each workload ``(d_model,
    layers, target)``, timed in interleaved rounds; the first workload gets ``steps`` steps per
    round, the others a quarter of them (at least one)."""
    results = [
        _one(d, layers, target, steps=steps if i == 0 else max(1, steps // 4), rounds=rounds,
             warmup=warmup, batch=batch, seq=seq)
        for i, (d, layers, target) in enumerate(workloads)]
    return {"workloads": results, "rounds": rounds, "threads": torch.get_num_threads(),
            "passed": all(r["passed"] for r in results)}


def render_numerics(result: dict) -> str:
    lines = [
        "## Numerics checks: a training step with trainop.check_numerics on",
        "",
        f"TransformerEncoder, 4 heads, feed-forward 2 x d_model, batch "
        f"{result['workloads'][0]['batch']} x {result['workloads'][0]['seq']}, "
        f"trainop.AdamOptimizer; {result['rounds']} interleaved rounds, "
        f"{result['threads']} threads.",
        "",
        "| workload | candidate | median step (ms) | ratio to plain |",
        "|---|---|---:|---:|",
    ]
    for w in result["workloads"]:
        name = (f"d{w['d_model']} x {w['layers']} ({w['parameters']:,} parameters, "
                f"{w['steps_per_round']} steps/round)")
        for kind in CANDIDATES:
            lines.append(f"| {name} | {kind} | {w['median_s'][kind] * 1e3:.2f} | "
                         f"{w['ratio_to_plain'][kind]:.2f}x |")
    lines.append("")
    for w in result["workloads"]:
        verdict = "PASS" if w["passed"] else "FAIL"
        lines.append(f"d{w['d_model']} x {w['layers']}: check_numerics / plain = "
                     f"{w['ratio_to_plain']['check_numerics']:.2f}x "
                     f"(target <= {w['target']}x): {verdict}")
    lines.append("")
    return "\n".join(lines)
