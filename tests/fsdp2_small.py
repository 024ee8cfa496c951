"""A tiny FSDP2 model, its optimizer and a few steps on a rank's half of a batch: what the
distributed load tests (tests/test_dcp_state_read.py, tests/test_fsdp2_load_checks.py) share."""

from __future__ import annotations

import torch
from optimizer_kwargs import kwargs_for

from trainop import OPTIMIZER_CLASSES

ROWS = 4


def model() -> torch.nn.Module:
    """Linear-Tanh-Linear (3 -> 4 -> 2), seeded, under ``fully_shard``."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    fully_shard(net)
    return net


def optimizer(name: str, net: torch.nn.Module):
    return OPTIMIZER_CLASSES[name](params=list(net.parameters()), **kwargs_for(name))


def train(net, opt, rank: int, steps) -> None:
    """One update per step ``k`` in ``steps`` on this rank's half of batch ``k`` (2 ranks)."""
    n = ROWS // 2
    for k in steps:
        g = torch.Generator().manual_seed(k)
        x, y = torch.randn(ROWS, 3, generator=g), torch.randn(ROWS, 2, generator=g)
        torch.nn.functional.mse_loss(net(x[rank * n:(rank + 1) * n]),
                                     y[rank * n:(rank + 1) * n]).backward()
        opt.step()
        opt.zero_grad()


def whole(t: torch.Tensor) -> torch.Tensor:
    """A DTensor gathered whole (a collective), or a plain tensor, cloned."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()


def everything(net, opt) -> list[torch.Tensor]:
    """Every number a load or a step could write: parameters, slots, counters (gathered)."""
    params = [p for g in opt.param_groups for p in g["params"]]
    out = [whole(p) for p in net.parameters()]
    out += [whole(t) for p in params for _, t in sorted(opt.state.get(p, {}).items())
            if isinstance(t, torch.Tensor)]
    out += [t.clone() for g in opt.param_groups for _, t in sorted(g["non_slot"].items())]
    return out


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
