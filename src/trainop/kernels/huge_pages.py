"""Large tensors that trainop allocates itself (slots, flat buffers) on transparent huge pages.

A sparse step touches random rows of a table and of its slots: each row of each array lies on
its own 4 KiB page, so the step waits on page-table walks as much as on the data (LazyAdam on
a 1M x 64 table, 1% of rows: about 30,000 walks per step), and on the virtualised development
machine a walk is expensive. With the slots on 2 MiB pages their translations stay in the TLB.
Measured there (2 cores, caches cold, interleaved with the same step on 4 KiB pages): LazyAdam's
sparse step 7-11% faster with its moments on huge pages (the table is the caller's: torch's
``THP_MEM_ALLOC_ENABLE=1`` puts it on huge pages too, then the step is about 35% faster).
Streaming steps gain little: a dense Adam step on one 32M-element tensor 2%, a flat Momentum
step over 8M parameters nothing measurable. Results do not change: only the page size does.

How: a large tensor gets its own private anonymous mapping (``mmap``), advised with
``MADV_HUGEPAGE`` before its first write, so the kernel backs it with huge pages as it faults
in, and unmapped when the tensor is freed (``torch.frombuffer`` keeps the mapping alive). Its
own mapping matters: advice given to memory from the C heap would outlive the tensor and pass
to whatever the heap hands out next. Linux only, CPU tensors of at least 4 MiB, contiguous, and
only where ``/sys/kernel/mm/transparent_hugepage/enabled`` is not ``never``;
``TRAINOP_HUGE_PAGES=0`` switches it off. Anything else gets ``torch.empty``.
"""

from __future__ import annotations

import functools
import math
import mmap
import os
import sys
from pathlib import Path

import torch

__all__ = ["MIN_BYTES", "empty", "empty_like", "wanted"]

MIN_BYTES = 4 << 20
_THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@functools.cache
def _supported() -> bool:
    """Whether this system can give transparent huge pages on request."""
    if sys.platform != "linux" or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        return "[never]" not in _THP_MODE.read_text()
    except OSError:
        return False


def wanted(nbytes: int, device: torch.device) -> bool:
    """Whether a fresh tensor of ``nbytes`` on ``device`` goes on huge pages."""
    return (device.type == "cpu" and nbytes >= MIN_BYTES
            and os.environ.get("TRAINOP_HUGE_PAGES", "1") != "0" and _supported())


def empty(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype,
          device: torch.device | str = "cpu") -> torch.Tensor:
    """``torch.empty(shape, dtype=dtype, device=device)``, in its own huge-page mapping where
    ``wanted``. The memory is not yet written (fill it before timing anything)."""
    device = torch.device(device)
    size = math.prod(shape)
    nbytes = size * dtype.itemsize
    if not wanted(nbytes, device):
        return torch.empty(shape, dtype=dtype, device=device)
    mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
    mapping.madvise(mmap.MADV_HUGEPAGE)  # advice only: a refusal changes nothing else
    return torch.frombuffer(mapping, dtype=dtype, count=size).view(shape)


def empty_like(var: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``torch.empty_like(var, dtype=dtype)`` (layout preserved), on huge pages where
    ``wanted`` and ``var`` is contiguous."""
    dtype = dtype or var.dtype
    if type(var) in (torch.Tensor, torch.nn.Parameter) and var.is_contiguous():
        return empty(var.shape, dtype, var.device)
    # a tensor subclass (a DTensor under FSDP2: the slot gets the parameter's placements) or a
    # strided layout: torch's own allocation
    return torch.empty_like(var, dtype=dtype, memory_format=torch.preserve_format)
