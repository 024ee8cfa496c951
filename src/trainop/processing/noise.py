"""``GradientNoise``: RETURNN's ``gradient_noise`` (truncated-normal noise added to gradients)."""

from __future__ import annotations

from typing import Any

import torch

from trainop.contract.validation import check_real, describe
from trainop.processing._base import Processor
from trainop.processing._batch import Gradients
from trainop.processing._checks import POSITIVE, check_tensor

__all__ = ["GradientNoise"]


class GradientNoise(Processor):
    """Stage ``noise``: ``g += TruncatedNormal(0, stddev)`` with bounds ``±2*stddev``.

    Values beyond two standard deviations are redrawn (TF's ``truncated_normal``; torch's
    ``trunc_normal_`` samples the same distribution, whose standard deviation is about
    ``0.88*stddev``). The noise is drawn in float32 and added after the pending factors were
    applied (so after unscaling, as RETURNN's PyTorch updater does). A sparse gradient is made
    dense first, as RETURNN's TF updater does.

    Args:
        stddev: real number > 0.
        generator: ``None`` (torch's global generator), an int seed (a ``torch.Generator`` per
            device, seeded with it), or a ``torch.Generator`` on the gradients' device.

    Example:
        >>> import torch
        >>> from trainop.processing import GradientNoise
        >>> w = torch.zeros(1000)
        >>> g = GradientNoise(0.1, generator=0)([(torch.zeros(1000), w)])[0][0]
        >>> bool(g.abs().max() <= 0.2)
        True
    """

    stage = "noise"

    def __init__(self, stddev: float, generator: Any = None) -> None:
        self.stddev = check_real("stddev", stddev, POSITIVE)
        if generator is not None and not isinstance(generator, torch.Generator) and (
                isinstance(generator, bool) or not isinstance(generator, int)):
            raise TypeError(f"Expected `generator` to be None, an int seed or a torch.Generator, "
                            f"got {describe(generator)}")
        self.generator = generator
        self._generators: dict[torch.device, torch.Generator] = {}

    def _generator_for(self, device: torch.device) -> torch.Generator | None:
        if self.generator is None or isinstance(self.generator, torch.Generator):
            return self.generator
        gen = self._generators.get(device)
        if gen is None:
            gen = self._generators[device] = torch.Generator(device=device)
            gen.manual_seed(self.generator)
        return gen

    def noise_like(self, g: torch.Tensor) -> torch.Tensor:
        """A float32 truncated-normal sample of ``g``'s shape and device."""
        check_tensor("g", g)
        noise = torch.empty(g.shape, dtype=torch.float32, device=g.device)
        s = self.stddev
        torch.nn.init.trunc_normal_(noise, 0.0, s, -2 * s, 2 * s,
                                    generator=self._generator_for(g.device))
        return noise

    def process(self, batch: Gradients) -> Gradients:
        def add(g: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            dense = g.to_dense() if g.is_sparse else g
            return dense + self.noise_like(dense).to(dense.dtype)

        batch.map_present(add)
        return batch

    def _args(self) -> str:
        gen = self.generator
        shown = "" if gen is None else (f", generator={gen}" if isinstance(gen, int)
                                        else ", generator=<torch.Generator>")
        return f"stddev={self.stddev:g}{shown}"
