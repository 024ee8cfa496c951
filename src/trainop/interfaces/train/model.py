"""The built-in model and data of ``trainop train``: a one-layer LSTM regressing a noisy
sine-wave sequence task, generated from a seed (nothing is downloaded).

Task: each sequence holds ``T`` steps of 4 features (sines of random frequency and phase plus
noise); the target of every step is a fixed random linear map of the running mean of the
features, so the recurrence matters. The model: ``LSTM(4, hidden)`` then ``Linear(hidden, 2)``
on every step; loss: mean squared error.

The LSTM is written out (``LSTMCellModel``) with torch's own gate layout and parameter names
(``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``; gates i, f, g, o), so that the
TensorFlow replay of ``--compare-tf`` can rebuild the same graph from the same weights.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import nn

__all__ = ["FEATURES", "OUTPUTS", "Batches", "LSTMCellModel", "make_batches"]

FEATURES, OUTPUTS = 4, 2


class LSTMCellModel(nn.Module):
    """One LSTM layer (torch's gate order i, f, g, o) and a linear read-out per step."""

    def __init__(self, hidden: int = 16, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        bound = hidden ** -0.5
        self.hidden = hidden

        def uniform(*shape: int) -> nn.Parameter:
            return nn.Parameter((torch.rand(*shape, generator=g) * 2 - 1) * bound)

        self.weight_ih = uniform(4 * hidden, FEATURES)
        self.weight_hh = uniform(4 * hidden, hidden)
        self.bias_ih = uniform(4 * hidden)
        self.bias_hh = uniform(4 * hidden)
        self.out_weight = uniform(OUTPUTS, hidden)
        self.out_bias = uniform(OUTPUTS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``[batch, T, FEATURES]`` -> ``[batch, T, OUTPUTS]``."""
        batch, steps, _ = x.shape
        h = x.new_zeros(batch, self.hidden)
        c = x.new_zeros(batch, self.hidden)
        outputs = []
        for t in range(steps):
            gates = x[:, t] @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T + self.bias_hh
            i, f, g, o = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h @ self.out_weight.T + self.out_bias)
        return torch.stack(outputs, dim=1)


def _generate(count: int, batch: int, steps: int, seed: int
              ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(FEATURES, OUTPUTS, generator=g)
    time = torch.arange(steps, dtype=torch.float32)
    for _ in range(count):
        freq = torch.rand(batch, 1, FEATURES, generator=g) * 0.8 + 0.2
        phase = torch.rand(batch, 1, FEATURES, generator=g) * 6.28
        x = torch.sin(time[None, :, None] * freq + phase)
        x = x + 0.05 * torch.randn(x.shape, generator=g)
        running = x.cumsum(dim=1) / (time[None, :, None] + 1)
        yield x, running @ mix


def make_batches(count: int, *, batch: int = 16, steps: int = 8, seed: int = 1
                 ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` batches ``(x [batch, steps, 4], y [batch, steps, 2])`` from ``seed``."""
    return list(_generate(count, batch, steps, seed))


class Batches(Sequence):
    """``make_batches(count, seed=seed)`` (cast to ``dtype`` when given) made while iterated,
    never held at once: ``trainop train --steps 3000000`` needs one batch in memory, not 13 GB.
    Each iteration makes them again from the seed (the same values); ``batches[k]`` makes
    the first ``k + 1``."""

    def __init__(self, count: int, *, seed: int = 1, dtype: torch.dtype | None = None) -> None:
        self.count, self.seed, self.dtype = count, seed, dtype

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for x, y in _generate(self.count, 16, 8, self.seed):
            yield (x, y) if self.dtype is None else (x.to(self.dtype), y.to(self.dtype))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[k] for k in range(*index.indices(self.count))]
        k = index + self.count if index < 0 else index
        if not 0 <= k < self.count:
            raise IndexError(f"batch {index} of {self.count}")
        for j, pair in enumerate(self):
            if j == k:
                return pair
        raise IndexError(f"batch {index} of {self.count}")  # pragma: no cover
