"""``trainop bench --fsdp2``: the optimizer step under FSDP2 on 2 gloo ranks (CPU), trainop
against torch, interleaved in each rank's process.

Each rank builds the same model (``layers`` x ``nn.Linear(width, width)``), ``fully_shard``s
every layer and the root, and fills the sharded gradients once. Two optimizers step the same
shards' copies: ``trainop.AdamOptimizer`` (its automatic choice: the native kernels on the
local shards) and ``torch.optim.Adam(fused=True)`` (torch's fused kernel on DTensors). Round by
round, in rotating order, ``steps`` steps of each are timed (``bench.rounds``); rank 0 reports
the medians. Also reported: the all_reduce calls of one ``GradientPipeline`` step under FSDP2
with ClipByGlobalNorm, SkipNonFinite and FilterZeroGradients (the global norm, the finite check
and ``max |g|``, measured together: one per step). Target: trainop <= 1.0x torch.
"""

from __future__ import annotations

import os
import tempfile

import torch

from trainop.bench._ranks import counted_all_reduces, rank_group, spawn_ranks
from trainop.kernels.torch_version import require

__all__ = ["TARGET", "render_fsdp2", "run_fsdp2_benchmark"]

TARGET = 1.0


def _rank(rank: int, port: int, out: str, layers: int, width: int, rounds: int, steps: int,
          warmup: int) -> None:
    from torch.distributed.fsdp import fully_shard

    import trainop
    from trainop.bench.rounds import time_rounds
    from trainop.processing import (
        ClipByGlobalNorm,
        FilterZeroGradients,
        GradientPipeline,
        SkipNonFinite,
    )

    with rank_group(rank, 2, port, threads=max(1, torch.get_num_threads() // 2), timeout_s=120):
        models = []
        for _ in range(2):
            torch.manual_seed(0)
            model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
            for layer in model:
                fully_shard(layer)
            fully_shard(model)
            model(torch.randn(4, width)).sum().backward()  # sharded gradients, kept
            models.append(model)
        ours = trainop.AdamOptimizer(1e-4, params=models[0].parameters())
        peer = torch.optim.Adam(models[1].parameters(), lr=1e-4, fused=True)
        medians = time_rounds({"trainop": ours.step, "torch": peer.step}, rounds=rounds,
                              steps=steps, warmup=warmup)
        implementations = sorted({b.implementation for b in ours._step_plan.buckets})
        pipe = GradientPipeline(ours, [ClipByGlobalNorm(1.0), SkipNonFinite(),
                                       FilterZeroGradients()])
        with counted_all_reduces() as calls:
            pipe.step()
        if rank == 0:
            params = sum(p.numel() for p in models[0].parameters())
            torch.save({"median_s": medians, "implementations": implementations,
                        "pipeline_all_reduces": len(calls), "parameters": params,
                        "threads_per_rank": torch.get_num_threads()}, out)


def run_fsdp2_benchmark(*, layers: int = 8, width: int = 1024, rounds: int = 8,
                        steps: int = 5, warmup: int = 3) -> dict:
    require("FSDP2 (fully_shard)")  # one message here, not an ImportError in each rank
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.pt")
        codes = spawn_ranks(_rank, (out, layers, width, rounds, steps, warmup), timeout_s=600)
        if codes != [0, 0]:
            raise RuntimeError(f"trainop bench --fsdp2: a rank failed (exit codes {codes})")
        result = torch.load(out, weights_only=False)
    ratio = result["median_s"]["trainop"] / result["median_s"]["torch"]
    result.update(ratio=ratio, target=TARGET, passed=ratio <= TARGET, layers=layers,
                  width=width, rounds=rounds, steps_per_round=steps)
    return result


def render_fsdp2(result: dict) -> str:
    m = result["median_s"]
    return "\n".join([
        "## FSDP2: the optimizer step on the local shards (2 gloo ranks, CPU)", "",
        f"{result['layers']} x Linear({result['width']}, {result['width']}), "
        f"{result['parameters']:,} parameters, fully_shard per layer and root; "
        f"{result['rounds']} interleaved rounds of {result['steps_per_round']} steps, "
        f"{result['threads_per_rank']} thread(s) per rank.", "",
        "| candidate | median step on rank 0 (ms) |", "|---|---:|",
        f"| torch.optim.Adam(fused=True) | {m['torch'] * 1e3:.3f} |",
        f"| trainop.AdamOptimizer ({', '.join(result['implementations'])}) | "
        f"{m['trainop'] * 1e3:.3f} |", "",
        f"trainop / torch = {result['ratio']:.3f}x (target <= {result['target']}x): "
        f"{'PASS' if result['passed'] else 'FAIL'}; the GradientPipeline's statistics (global "
        f"norm, finite check, max |g|: ClipByGlobalNorm, SkipNonFinite, FilterZeroGradients): "
        f"{result['pipeline_all_reduces']} all_reduce per step.", ""])
