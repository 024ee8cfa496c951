"""``trainop bench --numerics``: what leaving ``trainop.check_numerics`` on costs.

One training step of a small transformer (``torch.nn.TransformerEncoder``: embedding-free,
``d_model`` 128, 4 heads, feed-forward 256, 2 layers, dropout 0.1, a batch of 16 sequences of
32, mean-squared loss, ``trainop.AdamOptimizer``), three ways, each on its own copy of the same
model and data:

- ``plain``: forward, backward, ``opt.step()``;
- ``check_numerics``: the same inside ``trainop.check_numerics(model, optimizer=opt)`` (forward,
  backward and update checks);
- ``detect_anomaly``: the same under ``torch.autograd.detect_anomaly()``, PyTorch's own tool.

Interleaved: every round times ``steps`` steps of each candidate, in an order rotated from
round to round; the table reports the median step time over all timed steps and the ratio to
``plain``. The issue's target: ``check_numerics`` at most 1.3x ``plain``.
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

__all__ = ["TARGET", "render_numerics", "run_numerics_benchmark"]

TARGET = 1.3
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


def run_numerics_benchmark(*, steps: int = 5, rounds: int = 8, warmup: int = 3,
                           d_model: int = 128, layers: int = 2, batch: int = 16,
                           seq: int = 32) -> dict:
    """Median step times (seconds) of the three candidates, timed in interleaved rounds."""
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
    params = sum(p.numel() for p in base.parameters())
    return {
        "workload": {"d_model": d_model, "layers": layers, "batch": batch, "seq": seq,
                     "parameters": params, "tensors": len(list(base.parameters()))},
        "steps_per_round": steps, "rounds": rounds, "threads": torch.get_num_threads(),
        "median_s": medians,
        "ratio_to_plain": {k: medians[k] / medians["plain"] for k in CANDIDATES},
        "target": TARGET,
        "passed": medians["check_numerics"] / medians["plain"] <= TARGET,
    }


def render_numerics(result: dict) -> str:
    w = result["workload"]
    lines = [
        "## Numerics checks: a training step with trainop.check_numerics on",
        "",
        f"TransformerEncoder d_model {w['d_model']}, {w['layers']} layers, batch {w['batch']} x "
        f"{w['seq']}, {w['parameters']} parameters in {w['tensors']} tensors; "
        f"{result['rounds']} interleaved rounds of {result['steps_per_round']} steps, "
        f"{result['threads']} threads.",
        "",
        "| candidate | median step (ms) | ratio to plain |",
        "|---|---:|---:|",
    ]
    for kind in CANDIDATES:
        lines.append(f"| {kind} | {result['median_s'][kind] * 1e3:.2f} | "
                     f"{result['ratio_to_plain'][kind]:.2f}x |")
    verdict = "PASS" if result["passed"] else "FAIL"
    lines += ["", f"check_numerics / plain = {result['ratio_to_plain']['check_numerics']:.2f}x "
                  f"(target <= {result['target']}x): {verdict}", ""]
    return "\n".join(lines)
