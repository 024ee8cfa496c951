"""The optimizer's per-step counters on Triton, every param group in one launch: each group's
step counter ``+= 1`` and its float32 products (Adam's beta powers) ``*= factor``, only where
the update was applied (``found_inf`` zero, read on the device).

``power * float32(beta)`` in float32 and ``step + 1`` in int64, exactly what the torch ops of
``Optimizer._finish_groups`` compute (``power.mul_(where(applied, beta, 1))``: a product by 1 is
the power itself). The addresses of the counters (0-dim device tensors the optimizer owns)
are one int64 device table, made when they first appear or move; the factors one float32
device tensor written through a host row only when they change (``staging.Staging``):
nothing made and nothing read on the host at a step, so the launch can be captured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from trainop.kernels.triton import interpreted
from trainop.kernels.triton.device import order
from trainop.kernels.triton.launch import OPTIONS
from trainop.kernels.triton.staging import Staging, capturing, warm_up_error

__all__ = ["RULES", "Counters", "advance"]

#: Whether this module's kernels were decorated for Triton's interpreter.
INTERPRETED = interpreted()
_BLOCK = 128


@triton.jit
def _applied(mask, inf, HAS_INF: tl.constexpr, BLOCK: tl.constexpr):
    """``mask`` where the update was applied (``inf`` zero), as a block."""
    if HAS_INF:
        flag = tl.full((BLOCK,), 0.0, tl.float32) + tl.load(inf).to(tl.float32)
        mask = mask & (flag == 0.0)
    return mask


@triton.jit
def _advance(table, factors, inf, products, steps, HAS_INF: tl.constexpr,
             BLOCK: tl.constexpr):
    """``table``: ``products`` float32 addresses, then ``steps`` int64 addresses."""
    for start in range(0, products, BLOCK):
        k = start + tl.arange(0, BLOCK)
        mask = _applied(k < products, inf, HAS_INF, BLOCK)
        at = tl.load(table + k, mask=mask, other=0).to(tl.pointer_type(tl.float32))
        x = tl.load(at, mask=mask, other=0.0)
        tl.store(at, x * tl.load(factors + k, mask=mask, other=1.0), mask=mask)
    for start in range(0, steps, BLOCK):
        k = start + tl.arange(0, BLOCK)
        mask = _applied(k < steps, inf, HAS_INF, BLOCK)
        at = tl.load(table + products + k, mask=mask, other=0).to(tl.pointer_type(tl.int64))
        tl.store(at, tl.load(at, mask=mask, other=0) + 1, mask=mask)


class Counters:
    """One optimizer's counter table (device tensors, made once; see the module doc)."""

    __slots__ = ("addresses", "device", "factors", "key", "staging", "stream", "table")

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream: Any = None  # the stream that used the table last (``device.order``)
        self.key: bytes | None = None
        self.table: torch.Tensor | None = None
        self.factors: torch.Tensor | None = None
        self.staging: Staging | None = None

    def advance(self, products: Sequence[torch.Tensor], factors: Sequence[float],
                steps: Sequence[torch.Tensor], found_inf: torch.Tensor | None) -> None:
        """``products[k] *= float32(factors[k])`` and ``steps[j] += 1`` where ``found_inf``
        (a 0-dim device tensor, or ``None``: applied) is zero; one launch. The caller checked
        the tensors: 0-dim, contiguous, float32 products and int64 steps, on ``device``."""
        order(self, self.device, (self.table, self.factors))
        at = np.fromiter((t.data_ptr() for t in (*products, *steps)), dtype=np.int64,
                         count=len(products) + len(steps))
        key = at.tobytes()
        if key != self.key or self.factors is None or self.factors.numel() != max(
                len(factors), 1):
            if capturing(self.device):
                raise warm_up_error("new optimizer counters")
            self.table = torch.from_numpy(at).to(self.device)
            self.factors = torch.ones(max(len(factors), 1), dtype=torch.float32,
                                      device=self.device)
            self.staging = Staging(max(len(factors), 1), torch.float32, self.device)
            self.key = key
        if factors:
            self.staging.send(tuple(float(f) for f in factors), self.factors)
        inf = self.factors if found_inf is None else found_inf
        _advance[(1,)](self.table, self.factors, inf, len(products), len(steps),
                       HAS_INF=found_inf is not None, BLOCK=_BLOCK, **OPTIONS)

    @property
    def pinned(self) -> bool:
        return self.staging is not None and self.staging.replayed


def advance(store: dict, products: Sequence[torch.Tensor], factors: Sequence[float],
            steps: Sequence[torch.Tensor], found_inf: torch.Tensor | None) -> None:
    """``Counters.advance`` with the table kept in ``store`` (the optimizer's ``__dict__``,
    under ``_triton_counters``; made on the products' device at first use)."""
    device = steps[0].device
    holder = store.get("_triton_counters")
    if holder is None or holder.device != device:
        holder = store["_triton_counters"] = Counters(device)
    holder.advance(products, factors, steps, found_inf)


#: What ``kernels.counters`` calls (by name, as the update families' rules are called).
RULES = {"advance": advance}
