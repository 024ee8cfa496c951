"""Per-tensor sums of squares on Triton: the read pass of the gradient pipeline (norms and,
from them, the non-finite flag: a norm is finite exactly when every element is) and NovoGrad's
layer norms. Each block sums the squares of ``float32(g * mult)`` in float64 (as the C kernels);
the blocks' partial sums are added on the device in a fixed order.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import total
from trainop.kernels.triton.launch import BLOCK

__all__ = ["l2_norms", "square_partials"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()


@triton.jit
def _square_partials(grad, out, mult, n, HAS_MULT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    g = tl.load(grad + offs, mask=offs < n, other=0.0).to(tl.float32)
    if HAS_MULT:
        g = g * tl.load(mult).to(tl.float32)
    g64 = g.to(tl.float64)
    tl.store(out + tl.program_id(0), total(g64 * g64))


def square_partials(tensor: torch.Tensor, multiplier: torch.Tensor | None = None
                    ) -> torch.Tensor:
    """The per-block float64 sums of squares of ``float32(tensor * multiplier)`` (one element
    for an empty tensor: 0)."""
    flat = tensor.reshape(-1)
    n = flat.numel()
    blocks = max((n + BLOCK - 1) // BLOCK, 1)
    out = torch.zeros(blocks, dtype=torch.float64, device=tensor.device)
    if n:
        _square_partials[(blocks,)](flat, out, out if multiplier is None else multiplier, n,
                                    HAS_MULT=multiplier is not None, BLOCK=BLOCK)
    return out


def l2_norms(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of each float32 tensor (squares summed in float64), a 1-D float32 tensor on
    the tensors' device; nothing read on the host."""
    sums = torch.stack([square_partials(t).sum() for t in tensors])
    return sums.sqrt().to(torch.float32)
