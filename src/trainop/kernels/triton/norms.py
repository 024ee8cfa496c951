"""Per-tensor sums of squares on Triton: the read pass of the gradient pipeline (norms and,
from them, the non-finite flag: a norm is finite exactly when every element is) and NovoGrad's
layer norms. Each block sums the squares of ``float32(g * mult)`` in float64 (as the C kernels);
the blocks' partial sums are added on the device in a fixed order.

``l2_norms`` reads a whole list in one launch: every block of every tensor is a row of a table
of (address, element count) (``launch.block_table``), so a flat buffer and a list of separate
tensors alike take one pass over the gradients, then one small launch adds each tensor's
partial sums (in block order) and takes the square root. float16/bfloat16 tensors are read as
they are (each element widened to float32, exactly).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import total
from trainop.kernels.triton.launch import BLOCK, OPTIONS, block_table

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
                                    HAS_MULT=multiplier is not None, BLOCK=BLOCK, **OPTIONS)
    return out


@triton.jit
def _block_squares(table, out, like, BLOCK: tl.constexpr):
    """Block ``b`` of the table: the float64 sum of the squares of its elements (read in
    ``like``'s dtype, widened to float32 as the C kernels read them)."""
    b = tl.program_id(0).to(tl.int64)
    start = tl.load(table + 2 * b).to(tl.pointer_type(like.dtype.element_ty))
    count = tl.load(table + 2 * b + 1)
    offs = tl.arange(0, BLOCK)
    g = tl.load(start + offs, mask=offs < count, other=0.0).to(tl.float32).to(tl.float64)
    tl.store(out + b, total(g * g))


@triton.jit
def _tensor_norms(partials, first, out, BLOCK: tl.constexpr):
    """Tensor ``t``: its blocks' partial sums added in block order (``BLOCK`` at a time), the
    float64 square root, rounded to float32."""
    t = tl.program_id(0)
    lo = tl.load(first + t)
    hi = tl.load(first + t + 1)
    acc = lo.to(tl.float64) * 0.0
    for s in range(lo, hi, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        acc += total(tl.load(partials + offs, mask=offs < hi, other=0.0))
    tl.store(out + t, tl.sqrt(acc).to(tl.float32))


def l2_norms(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of each tensor (contiguous, one float dtype and device; squares summed in
    float64), a 1-D float32 tensor on their device: two launches for the whole list, nothing
    read on the host."""
    device = tensors[0].device
    table, first, blocks = block_table(tensors)
    out = torch.zeros(len(tensors), dtype=torch.float32, device=device)
    if blocks:
        partials = torch.empty(blocks, dtype=torch.float64, device=device)
        _block_squares[(blocks,)](table, partials, tensors[0], BLOCK=BLOCK, **OPTIONS)
        _tensor_norms[(len(tensors),)](partials, first, out, BLOCK=BLOCK, **OPTIONS)
    return out
