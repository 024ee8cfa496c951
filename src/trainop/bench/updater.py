"""``trainop bench --updater``: what RETURNN's ``Updater`` adds over the equivalent hand-built
``GradientPipeline`` step, on a small real model, interleaved in one process.

Both sides train a copy of the same ``nn.TransformerEncoder`` (d_model 128, 2 layers) with TF1
Adam (epsilon 1e-16, RETURNN's default) and global-norm clipping at 1.0: the Updater from the
config ``{"optimizer": {"class": "adam"}, "gradient_clip_global_norm": 1.0}``, the hand-built
side as ``loss.backward(); pipe.step(); pipe.zero_grad()`` with
``GradientPipeline(AdamOptimizer(epsilon=1e-16), [ClipByGlobalNorm(1.0)])``. Whole steps
(forward, backward, update) are timed. Target: the Updater at most 1.05x the pipeline.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

import trainop
from trainop.bench.rounds import time_rounds
from trainop.processing import ClipByGlobalNorm, GradientPipeline

__all__ = ["TARGET", "render_updater", "run_updater_benchmark"]

TARGET = 1.05


def run_updater_benchmark(*, rounds: int = 8, steps: int = 5, warmup: int = 3,
                          d_model: int = 128, layers: int = 2) -> dict:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model, 4, 2 * d_model, dropout=0.0, batch_first=True)
    base = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 16, d_model, generator=g), torch.randn(8, 16, d_model, generator=g)
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    updater = trainop.Updater({"optimizer": {"class": "adam"}, "learning_rate": 1e-4,
                               "gradient_clip_global_norm": 1.0}, a)
    opt = trainop.AdamOptimizer(learning_rate=1e-4, epsilon=1e-16, params=b.parameters())
    pipe = GradientPipeline(opt, [ClipByGlobalNorm(1.0)])

    def updater_step() -> None:
        updater.step(nn.functional.mse_loss(a(x), y))

    def pipeline_step() -> None:
        nn.functional.mse_loss(b(x), y).backward()
        pipe.step()
        pipe.zero_grad()

    medians = time_rounds({"pipeline": pipeline_step, "updater": updater_step},
                          rounds=rounds, steps=steps, warmup=warmup)
    ratio = medians["updater"] / medians["pipeline"]
    return {"parameters": sum(p.numel() for p in base.parameters()),
            "tensors": len(list(base.parameters())), "median_s": medians, "ratio": ratio,
            "target": TARGET, "passed": ratio <= TARGET, "rounds": rounds,
            "steps_per_round": steps, "threads": torch.get_num_threads()}


def render_updater(result: dict) -> str:
    m = result["median_s"]
    return "\n".join([
        "## Updater vs the hand-built GradientPipeline step", "",
        f"TransformerEncoder, {result['parameters']} parameters in {result['tensors']} tensors; "
        f"{result['rounds']} interleaved rounds of {result['steps_per_round']} whole steps, "
        f"{result['threads']} threads.", "",
        "| candidate | median step (ms) |", "|---|---:|",
        f"| GradientPipeline by hand | {m['pipeline'] * 1e3:.2f} |",
        f"| trainop.Updater | {m['updater'] * 1e3:.2f} |", "",
        f"Updater / pipeline = {result['ratio']:.3f}x (target <= {result['target']}x): "
        f"{'PASS' if result['passed'] else 'FAIL'}", ""])
