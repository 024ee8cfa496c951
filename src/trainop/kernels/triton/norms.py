"""Per-tensor sums of squares on Triton: the read pass of the gradient pipeline (norms and,
from them, the non-finite flag: a norm is finite exactly when every element is) and NovoGrad's
layer norms. Each block sums the squares of ``float32(g * mult)`` in float64 (as the C kernels);
the blocks' partial sums are added on the device in a fixed order.

A whole list is read in one launch (two where only some blocks can be vectorized): every block
of every tensor is a record of the list's device table (``tables.Layout``), so a flat buffer
and a list of separate tensors alike take one pass over the gradients. The partial sums are
then added in two parallel levels: one program per run of at most ``BLOCK`` consecutive
partial sums of a tensor, then one program per tensor adding its runs' sums (one vector load
of all of them, added as a tree: no loop; one run for a tensor below a million elements; 256
for a quarter-billion). float16/bfloat16 tensors
are read as they are (each element widened to float32, exactly), in blocks of twice the
elements (``read_block``): every block of the read pass moves ``READ_BYTES`` (4 KB), whatever
the dtype, so a 2-byte list keeps as many bytes in flight per program as a float32 one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import triton
import triton.language as tl

from trainop.kernels.native._binding import plain_on, pointers, sizes
from trainop.kernels.triton import interpreted
from trainop.kernels.triton._common import tensor, total
from trainop.kernels.triton.launch import BLOCK, OPTIONS
from trainop.kernels.triton.tables import RUN, Layout

__all__ = ["READ_BYTES", "read_block", "run_sums", "runs_total", "runs_width", "sums"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()
#: Bytes each block of the read pass reads: float32's ``BLOCK`` elements.
READ_BYTES = BLOCK * 4


def read_block(dtype: torch.dtype) -> int:
    """Elements per block of the read pass over ``dtype``: ``READ_BYTES`` of them."""
    return READ_BYTES // dtype.itemsize


@triton.jit
def _block_squares(like, mult, idx, count, blocks, out, K: tl.constexpr,
                   HAS_MULT: tl.constexpr, BLOCK: tl.constexpr, ALIGNED: tl.constexpr):
    """Block record ``b``: the float64 sum of the squares of ``float32(g * mult)`` over its
    elements of list ``K``'s tensor (read in ``like``'s dtype, widened to float32 as the C
    kernels read them), stored at the block's partial index."""
    b = tl.program_id(0).to(tl.int64) * 4
    t = tl.load(blocks + b)
    start = tl.load(blocks + b + 1)
    stop = tl.load(blocks + b + 2)
    if ALIGNED:
        start = tl.multiple_of(start, 16)
        stop = tl.multiple_of(stop, 16)
    grad = tensor(like, K, t, idx, count, True, ALIGNED)
    offs = start + tl.arange(0, BLOCK)
    g = tl.load(grad + offs, mask=offs < stop, other=0.0).to(tl.float32)
    if HAS_MULT:
        g = g * tl.load(mult).to(tl.float32)
    g64 = g.to(tl.float64)
    tl.store(out + tl.load(blocks + b + 3), total(g64 * g64))


@triton.jit
def _run_sums(partials, runs, out, BLOCK: tl.constexpr):
    """Run ``r`` (at most ``BLOCK`` consecutive partial sums of one tensor): their sum."""
    r = tl.program_id(0).to(tl.int64)
    lo = tl.load(runs + 2 * r)
    hi = tl.load(runs + 2 * r + 1)
    offs = lo + tl.arange(0, BLOCK)
    tl.store(out + r, total(tl.load(partials + offs, mask=offs < hi, other=0.0)))


@triton.jit
def runs_total(sums, lo, hi, RUNS: tl.constexpr):
    """The float64 sum of ``sums[lo:hi]`` (a tensor's runs' sums, at most ``RUNS`` of them,
    ``runs_width``): one vector load, added as a tree; no loop."""
    offs = lo + tl.arange(0, RUNS)
    return total(tl.load(sums + offs, mask=offs < hi, other=0.0))


def runs_width(most: int) -> int:
    """``RUNS`` for tensors of at most ``most`` runs each: a power of two, at least ``RUN``
    (one compiled width below a billion elements a tensor)."""
    return max(RUN, 1 << max(most - 1, 0).bit_length())


@triton.jit
def _tensor_sums(sums, first, out, SQRT: tl.constexpr, RUNS: tl.constexpr):
    """Tensor ``t``: its runs' sums added (``runs_total``); with ``SQRT`` the float64 square
    root rounded to float32 (the norm), else the float64 sum."""
    t = tl.program_id(0)
    lo = tl.load(first + t)
    hi = tl.load(first + t + 1)
    acc = runs_total(sums, lo, hi, RUNS)
    if SQRT:
        tl.store(out + t, tl.sqrt(acc).to(tl.float32))
    else:
        tl.store(out + t, acc)


def run_sums(layout: Layout, like: torch.Tensor, k: int,
             multiplier: torch.Tensor | None) -> torch.Tensor:
    """The float64 sums of squares of ``float32(g * multiplier)`` of every run of list ``k``'s
    tensors of ``layout`` (its addresses on the device this step; ``like`` one of them),
    in ``layout``'s work space: per tensor ``t`` the runs ``run_first[t]:run_first[t+1]``.
    A block of the layout (``layout.block`` elements) is a program."""
    layout.build()
    partials, sums = layout.work_space()
    flags = {"K": k, "HAS_MULT": multiplier is not None, "BLOCK": layout.block, **OPTIONS}
    args = (like, partials if multiplier is None else multiplier, layout.table,
            layout.tensors)
    rest, count = layout.block_table, layout.blocks
    if layout.moving_aligned and layout.aligned_blocks:
        _block_squares[(layout.aligned_blocks,)](*args, layout.block_table, partials,
                                                 ALIGNED=True, **flags)
        rest, count = layout.rest_table, layout.blocks - layout.aligned_blocks
    if count:
        _block_squares[(count,)](*args, rest, partials, ALIGNED=False, **flags)
    if layout.runs:
        _run_sums[(layout.runs,)](partials, layout.run_table, sums, BLOCK=RUN, **OPTIONS)
    return sums


def sums(tensors: Sequence[torch.Tensor], multiplier: torch.Tensor | None, *, sqrt: bool,
         found: tuple | None, cache: Callable, order: Callable) -> torch.Tensor:
    """Per tensor (contiguous, one float dtype and device) the float64 sum of the squares of
    ``float32(t * multiplier)`` (a 1-D float64 tensor on their device), or with ``sqrt`` the
    L2 norm (float32): three or four launches for the whole list, nothing read on the host.
    ``found``: their data pointers and element counts, where the caller read them
    (``plain_on``); ``cache``: the owner's layouts (``tables.Cache``: the read layout of a
    list's device, dtype and sizes), ``order``: ``device.order``, run on the layout before
    its table is written."""
    first = tensors[0]
    if found is None:
        found = plain_on([tensors if type(tensors) is list else list(tensors)],
                         (first.dtype,), first.device)
    if found is None:
        at = pointers([tensors])
        if at is None:  # (the caller made them contiguous)
            raise ValueError("trainop's triton read pass: the tensors must be contiguous")
        found = at, sizes(tensors)
    at, counts = found
    key = ("reads", first.device, first.dtype, counts.tobytes())
    layout = cache(key, lambda: Layout([tensors], first.device, moving=0,
                                       block=read_block(first.dtype)))
    order(layout, first.device, layout.device_tensors())
    layout.refresh(tensors, at)
    out = torch.zeros(len(tensors), dtype=torch.float32 if sqrt else torch.float64,
                      device=first.device)
    partial = run_sums(layout, first, 0, multiplier)
    _tensor_sums[(len(tensors),)](partial, layout.run_first, out, SQRT=sqrt,
                                  RUNS=runs_width(layout.most_runs), **OPTIONS)
    return out
