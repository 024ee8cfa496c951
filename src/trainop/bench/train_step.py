"""``trainop bench --train-step``: a training step through ``optimize_loss`` against PyTorch's
canonical recipe, in one process, interleaved.

- torch: ``loss = ...; scaler.scale(loss).backward(); scaler.unscale_(opt);
  clip_grad_norm_(params, 1.0, foreach=True); scaler.step(opt); scaler.update();
  opt.zero_grad(set_to_none=True)`` with ``torch.amp.GradScaler`` and
  ``torch.optim.Adam(fused=True)``;
- trainop: ``optimize_loss(loss, "Adam", {}, lr, clip_gradients=1.0, loss_scaling="Backoff",
  apply_loss_scaling=True)``: unscale, finite check, clip and Adam as one norm pass plus one
  fused update.

Three comparisons (float32 weights, the same initial model and data on both sides):

1. ``post-backward`` on a small transformer (``nn.TransformerEncoder``, d_model 256, 4 heads,
   feed-forward 1024, 8 layers: 6.3M parameters in 96 tensors): the gradients of one backward
   pass are refilled before every timed step (untimed), then only the part after
   ``backward()`` is timed. Target: trainop >= 1.4x faster.
2. ``whole step`` on the same model (batch 8 x 32): forward, backward and update. Target: not
   slower (ratio >= 1.0, within the noise).
3. ``fixed overhead`` on a tiny model (25 ``nn.Linear(3, 3)``: 300 parameters in 50 tensors),
   the post-backward part: trainop's time at most 1.0x the recipe's.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

import trainop
from trainop.bench.rounds import time_rounds

__all__ = ["render_train_step", "run_train_step_benchmark"]

TARGETS = {"post_backward": 1.4, "whole_step": 1.0, "fixed_overhead": 1.0}


def transformer(d_model: int = 256, layers: int = 8) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model, 4, 4 * d_model, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(3, 3) for _ in range(25)])


class _Sides:
    """Both sides on copies of one model: step functions and gradient refills."""

    def __init__(self, base: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y
        self.t_model, self.o_model = copy.deepcopy(base), copy.deepcopy(base)
        self.t_params = list(self.t_model.parameters())
        self.opt = torch.optim.Adam(self.t_params, lr=1e-4, fused=True)
        self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 14)
        self.scaler.scale(torch.ones(()))  # the scaler creates its scale on first use
        self.op = trainop.optimize_loss(
            lambda: nn.functional.mse_loss(self.o_model(x), y), "Adam", {}, 1e-4,
            model=self.o_model, clip_gradients=1.0, loss_scaling="Backoff",
            apply_loss_scaling=True)
        scale = 2.0 ** 14  # both scalers start there; no overflow in the run
        loss = nn.functional.mse_loss(base(x), y) * scale
        self.grads = [g.detach() for g in torch.autograd.grad(loss, list(base.parameters()))]

    def torch_update(self) -> None:
        self.scaler.unscale_(self.opt)
        torch.nn.utils.clip_grad_norm_(self.t_params, 1.0, foreach=True)
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)

    def trainop_update(self) -> None:
        self.op._core.update()

    def refill(self, params: list[torch.Tensor]) -> None:
        for p, g in zip(params, self.grads, strict=True):
            p.grad = g.clone()

    def torch_step(self) -> None:
        loss = nn.functional.mse_loss(self.t_model(self.x), self.y)
        self.scaler.scale(loss).backward()
        self.torch_update()

    def trainop_step(self) -> None:
        self.op()


def _compare(sides: _Sides, whole: bool, rounds: int, steps: int, warmup: int) -> dict:
    if whole:
        medians = time_rounds({"torch": sides.torch_step, "trainop": sides.trainop_step},
                              rounds=rounds, steps=steps, warmup=warmup)
    else:
        o_params = list(sides.o_model.parameters())
        medians = time_rounds(
            {"torch": sides.torch_update, "trainop": sides.trainop_update},
            rounds=rounds, steps=steps, warmup=warmup,
            prepare={"torch": lambda: sides.refill(sides.t_params),
                     "trainop": lambda: sides.refill(o_params)})
    return {"torch_s": medians["torch"], "trainop_s": medians["trainop"],
            "speedup": medians["torch"] / medians["trainop"]}


def run_train_step_benchmark(*, rounds: int = 8, steps: int = 5, warmup: int = 3,
                             d_model: int = 256, layers: int = 8) -> dict:
    g = torch.Generator().manual_seed(1)
    model = transformer(d_model, layers)
    x, y = torch.randn(8, 32, d_model, generator=g), torch.randn(8, 32, d_model, generator=g)
    small = tiny()
    xs, ys = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    results = {
        "post_backward": _compare(_Sides(model, x, y), False, rounds, steps, warmup),
        "whole_step": _compare(_Sides(model, x, y), True, rounds, steps, warmup),
        "fixed_overhead": _compare(_Sides(small, xs, ys), False, rounds, steps * 4, warmup),
    }
    for key, target in TARGETS.items():
        results[key]["target"] = target
        results[key]["passed"] = results[key]["speedup"] >= target
    return {
        "workload": {"parameters": sum(p.numel() for p in model.parameters()),
                     "tensors": len(list(model.parameters())),
                     "tiny_parameters": sum(p.numel() for p in small.parameters()),
                     "tiny_tensors": len(list(small.parameters()))},
        "rounds": rounds, "steps_per_round": steps, "threads": torch.get_num_threads(),
        "results": results, "passed": all(r["passed"] for r in results.values()),
    }


def render_train_step(result: dict) -> str:
    w = result["workload"]
    lines = [
        "## Training step: optimize_loss vs torch's recipe (GradScaler, clip_grad_norm_, "
        "fused Adam)", "",
        f"Transformer: {w['parameters']} parameters in {w['tensors']} tensors; tiny model: "
        f"{w['tiny_parameters']} parameters in {w['tiny_tensors']} tensors; {result['rounds']} "
        f"interleaved rounds, {result['threads']} threads.", "",
        "| comparison | torch (ms) | trainop (ms) | trainop speed-up | target | verdict |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for key, r in result["results"].items():
        lines.append(f"| {key.replace('_', ' ')} | {r['torch_s'] * 1e3:.3f} | "
                     f"{r['trainop_s'] * 1e3:.3f} | {r['speedup']:.2f}x | >= {r['target']}x | "
                     f"{'PASS' if r['passed'] else 'FAIL'} |")
    lines.append("")
    return "\n".join(lines)
