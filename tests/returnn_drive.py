"""Drives an updater the way RETURNN's torch engine does (its train loop's calls, in its order),
for RETURNN's own ``returnn.torch.updater.Updater`` and for ``trainop.Updater``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def loss_at(model: torch.nn.Module, t: int) -> torch.Tensor:
    """A deterministic loss of micro-step ``t`` for a model taking 4 features."""
    g = torch.Generator().manual_seed(100 + t)
    x = torch.randn(5, 4, generator=g)
    y = torch.randn(5, 3, generator=g)
    return (model(x) - y).pow(2).sum()


def drive_engine_way(updater, model: torch.nn.Module, epoch_sizes: Sequence[int],
                     learning_rates: Sequence[float], n: int | Callable[..., int],
                     loss: Callable[[torch.nn.Module, int], torch.Tensor] = loss_at
                     ) -> list[dict[str, torch.Tensor]]:
    """RETURNN's updater (``create_optimizer`` already called) through epochs as the engine
    drives it: per epoch ``set_learning_rate`` and ``set_current_train_step``; per micro-step
    ``zero_grad`` at a window start, the backward, ``step`` when the window holds ``n``
    micro-steps (``n`` may be the engine's callable), ``set_current_train_step``. Returns the
    parameters after every micro-step."""
    seen, t = [], 0
    for epoch, (size, lr) in enumerate(zip(epoch_sizes, learning_rates, strict=True), 1):
        updater.set_learning_rate(lr)
        updater.set_current_train_step(global_train_step=t, epoch=epoch,
                                       epoch_continuous=epoch - 1)
        count, new_window = 0, True
        for i in range(size):
            continuous = epoch - 1 + (i + 1) / size
            if new_window:
                updater.zero_grad()
                count = 0
            loss(model, t).backward()
            count += 1
            window = n(epoch=epoch, epoch_continuous=continuous, global_train_step=t) \
                if callable(n) else n
            new_window = count >= window
            if new_window:
                updater.step()
            t += 1
            updater.set_current_train_step(global_train_step=t, epoch=epoch,
                                           epoch_continuous=continuous)
            seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    return seen


def drive_by_hand(updater, model: torch.nn.Module, epoch_sizes: Sequence[int],
                  learning_rates: Sequence[float],
                  loss: Callable[[torch.nn.Module, int], torch.Tensor] = loss_at
                  ) -> list[dict[str, torch.Tensor]]:
    """``trainop.Updater`` driven by hand: ``set_learning_rate`` and
    ``set_current_train_step`` at each epoch start, ``step(loss)`` and
    ``set_current_train_step`` per micro-step (the Updater decides the updates itself)."""
    seen, t = [], 0
    for epoch, (size, lr) in enumerate(zip(epoch_sizes, learning_rates, strict=True), 1):
        updater.set_learning_rate(lr)
        updater.set_current_train_step(global_train_step=t, epoch=epoch,
                                       epoch_continuous=epoch - 1)
        for i in range(size):
            updater.step(loss(model, t))
            t += 1
            updater.set_current_train_step(global_train_step=t, epoch=epoch,
                                           epoch_continuous=epoch - 1 + (i + 1) / size)
            seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    return seen


def update_steps(before: dict[str, torch.Tensor], seen: list[dict[str, torch.Tensor]]
                 ) -> list[int]:
    """The micro-steps after which the parameters changed."""
    out, last = [], before
    for t, now in enumerate(seen):
        if any(not torch.equal(now[k], last[k]) for k in now):
            out.append(t)
        last = now
    return out
