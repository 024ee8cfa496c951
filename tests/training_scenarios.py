"""Deterministic optimize_loss runs shared by the distributed and resume tests (importable in a
fresh interpreter or a spawned process)."""

from __future__ import annotations

import torch
from torch import nn

import trainop

FEATURES, BATCH = 6, 8


def batch(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Micro-step ``k``'s whole batch (the same in every process)."""
    g = torch.Generator().manual_seed(1000 + k)
    return torch.randn(BATCH, FEATURES, generator=g), torch.randn(BATCH, 1, generator=g)


def model(dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1)).to(dtype)


def build(net: nn.Module, *, mode: str, iter_size: int, on_horovod: bool = False):
    mixed = mode == "mixed"
    return trainop.optimize_loss(
        lambda x, y: nn.functional.mse_loss(net(x).float(), y), "Adam", {"beta2": 0.99},
        trainop.schedules.policy("poly_decay", learning_rate=0.01, decay_steps=50, power=1.0),
        model=net, dtype="mixed" if mixed else torch.float32, clip_gradients=1.0,
        loss_scaling="Backoff" if mixed else 1.0,
        loss_scaling_params={"scale_max": 2.0 ** 10, "step_window": 3} if mixed else None,
        iter_size=iter_size, on_horovod=on_horovod)


def run(net, op, start: int, stop: int, *, rank: int = 0, world: int = 1) -> None:
    """Micro-steps ``start`` .. ``stop - 1``; a rank takes its slice of each batch."""
    dtype = next(net.parameters()).dtype
    for k in range(start, stop):
        x, y = batch(k)
        rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
        op(x[rows].to(dtype), y[rows])


UPDATER_CONFIG = {"optimizer": {"class": "adam", "beta2": 0.99}, "learning_rate": 0.01,
                  "accum_grad_multiple_step": 2, "gradient_clip_global_norm": 1.0,
                  "optimizer_epsilon": 1e-8}


def run_updater(net, updater, start: int, stop: int, *, rank: int = 0, world: int = 1,
                scale: float = 1.0) -> None:
    """Micro-steps of the Updater over the same batches as ``run`` (the loss times
    ``scale``)."""
    for k in range(start, stop):
        x, y = batch(k)
        rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
        updater.step(scale * nn.functional.mse_loss(net(x[rows]), y[rows]))
