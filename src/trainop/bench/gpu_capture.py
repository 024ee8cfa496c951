"""A whole training step captured in a CUDA graph against the same step run eagerly (the GPU
suite's last workload, and what ``tests/test_cuda_capture.py`` checks).

The step: forward of an MLP, ``GradientPipeline.scale_loss(loss).backward()``, then
``GradientPipeline.step()`` with a dynamic loss scaler (``BackoffLossScaler``), a global-norm
clip at 1.0 and ``AdamOptimizer``. Two copies of one model run it: one eagerly, one captured
once with ``torch.cuda.graph`` (after warm-up steps on a side stream, as torch's documentation
prescribes for whole-network capture) and replayed. Both see the same static batch, so after
the same number of steps their parameters must be equal.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

import trainop
from trainop.processing import BackoffLossScaler, ClipByGlobalNorm, GradientPipeline, LossScale

__all__ = ["CapturedStep", "eager_and_captured"]

WARMUP = 3


def _mlp(width: int, depth: int, device: torch.device) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 1)).to(device)


class CapturedStep:
    """One model, its pipeline and its step function (eager, or replaying a captured graph)."""

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                 implementation: str | None) -> None:
        self.model, self.x, self.y = model, x, y
        opt = trainop.AdamOptimizer(1e-3, params=model.parameters(),
                                    implementation=implementation)
        self.pipe = GradientPipeline(opt, [LossScale(BackoffLossScaler(scale_max=2.0 ** 14)),
                                           ClipByGlobalNorm(1.0)])
        self.graph: torch.cuda.CUDAGraph | None = None

    def eager(self) -> None:
        """Forward, scaled backward, the pipeline's step; gradients set to None first."""
        self.pipe.optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(self.model(self.x), self.y)
        self.pipe.scale_loss(loss).backward()
        self.pipe.step()

    def capture(self) -> None:
        """Warm up on a side stream, then capture one step (gradients allocated by the
        captured backward, in the graph's pool)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                self.eager()
        torch.cuda.current_stream().wait_stream(side)
        self.pipe.optimizer.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            loss = nn.functional.mse_loss(self.model(self.x), self.y)
            self.pipe.scale_loss(loss).backward()
            self.pipe.step()

    def replay(self) -> None:
        self.graph.replay()

    def parameters(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in self.model.parameters()]


def eager_and_captured(implementation: str | None, *, width: int = 1024, depth: int = 4,
                       batch: int = 256, device: torch.device | None = None
                       ) -> tuple[CapturedStep, CapturedStep, Callable[[], bool]]:
    """The eager and the captured side (warmed up alike, the captured one captured), and a
    check that runs both sides ``WARMUP`` more steps and says whether their parameters are
    equal (bit for bit)."""
    device = device or torch.device("cuda")
    base = _mlp(width, depth, device)
    g = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(batch, width, generator=g, device=device)
    y = torch.randn(batch, 1, generator=g, device=device)
    eager = CapturedStep(copy.deepcopy(base), x, y, implementation)
    graphed = CapturedStep(copy.deepcopy(base), x, y, implementation)
    for _ in range(WARMUP):
        eager.eager()
    graphed.capture()

    def equal() -> bool:
        for _ in range(WARMUP):
            eager.eager()
            graphed.replay()
        torch.cuda.synchronize(device)
        return all(torch.equal(a, b) for a, b in
                   zip(eager.parameters(), graphed.parameters(), strict=True))

    return eager, graphed, equal
