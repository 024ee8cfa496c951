"""A custom torch optimizer for the Updater's dotted-name resolution (RETURNN's
``test_torch_engine_train_lion_optimizer`` resolves ``returnn.torch.optim.lion.Lion`` the same
way): sign SGD, ``p -= lr * sign(g)``."""

from __future__ import annotations

import torch


class SignSGD(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(torch.sign(p.grad), alpha=-group["lr"])
