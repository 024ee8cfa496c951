"""NaN/Inf handling, both flavours.

- ``NanInfFilter`` (RETURNN's ``gradient_nan_inf_filter``): NaN -> 0, +inf -> 0, -inf -> -0,
  element by element; the step is still applied (Adam still moves with ``g = 0``). It runs
  after global-norm clipping, so with a clip stage a single NaN makes every gradient NaN first
  and then all zero (RETURNN's quirk Q4, reproduced by the stage order).
- ``SkipNonFinite`` (RETURNN PT's ``num_allowed_consec_invalid_gradient_steps``): when a final
  gradient is non-finite, the whole update is skipped (params, slots and every counter stay as
  they are) through the optimizer's ``found_inf``; it counts consecutive and total skips and can
  raise after too many in a row.
"""

from __future__ import annotations

from typing import Any

import torch

from trainop.contract.validation import Interval, check_bool, check_int
from trainop.processing._base import SKIP_NONFINITE, Processor
from trainop.processing._batch import Gradients

__all__ = ["NanInfFilter", "NonFiniteGradientsError", "SkipNonFinite"]


class NonFiniteGradientsError(RuntimeError):
    """Raised by ``SkipNonFinite`` after more than ``max_consecutive_skips`` skips in a row."""


def _filter(g: torch.Tensor, upstream_sparse_inf: bool) -> torch.Tensor:
    if g.is_sparse:
        inf = 1e30 if upstream_sparse_inf else 0.0
        values = torch.nan_to_num(g._values(), nan=0.0, posinf=inf, neginf=-inf)
        return torch.sparse_coo_tensor(g._indices(), values, g.shape,
                                       is_coalesced=g.is_coalesced())
    return torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=-0.0)


class NanInfFilter(Processor):
    """Stage ``nan_inf_filter``: RETURNN's ``gradient_nan_inf_filter``.

    Elementwise NaN -> 0, +inf -> 0, -inf -> -0 (new tensors; pending factors applied first).

    Args:
        upstream_sparse_inf: bool, default False. RETURNN's TF filter forgets its replacement
            values for an ``IndexedSlices`` (quirk Q3), so there ±inf become ±1e30; True
            reproduces that for sparse gradients, False (default) zeroes them as for dense ones.

    Example:
        >>> import torch
        >>> from trainop.processing import NanInfFilter
        >>> w = torch.zeros(3)
        >>> NanInfFilter()([(torch.tensor([float("nan"), float("inf"), 1.0]), w)])[0][0]
        tensor([0., 0., 1.])
    """

    stage = "nan_inf_filter"

    def __init__(self, *, upstream_sparse_inf: bool = False) -> None:
        self.upstream_sparse_inf = check_bool("upstream_sparse_inf", upstream_sparse_inf)

    def process(self, batch: Gradients) -> Gradients:
        quirk = self.upstream_sparse_inf
        batch.map_present(lambda g, v: _filter(g, quirk))
        return batch

    def _args(self) -> str:
        return f"upstream_sparse_inf={self.upstream_sparse_inf}" if self.upstream_sparse_inf else ""


class SkipNonFinite(Processor):
    """Stage ``check``: skip the whole update when a final gradient is non-finite.

    Non-finite is read from the per-tensor L2 norms (no extra pass; see
    ``Gradients.nonfinite``). The decision stays on the device: the optimizer receives it as
    ``found_inf``, and nothing moves (params, slots, ``global_step``, Adam's beta powers,
    schedules).

    State (int64): ``consecutive`` (skips in a row, reset by an applied step) and ``total``.

    Args:
        max_consecutive_skips: ``None`` (never raise) or an int >= 0: raise
            ``NonFiniteGradientsError`` when ``consecutive`` exceeds it (RETURNN's
            ``num_allowed_consec_invalid_gradient_steps``; 0 raises on the first non-finite step).
            Checking it reads ``consecutive`` on the host once per step (free on the CPU, one
            synchronisation on a GPU); leave it ``None`` for a step without host reads.

    Example:
        >>> import torch
        >>> from trainop.processing import SkipNonFinite
        >>> w = torch.zeros(2)
        >>> batch = SkipNonFinite().transform([(torch.tensor([1.0, float("nan")]), w)])
        >>> batch.found_inf
        tensor(1.)
    """

    stage = "check"

    def __init__(self, max_consecutive_skips: int | None = None) -> None:
        if max_consecutive_skips is not None:
            check_int("max_consecutive_skips", max_consecutive_skips,
                      Interval(0, float("inf"), high_closed=False))
        self.max_consecutive_skips = max_consecutive_skips
        self.consecutive = torch.zeros((), dtype=torch.int64)
        self.total = torch.zeros((), dtype=torch.int64)

    def check(self, batch: Gradients) -> None:
        if self.consecutive.device != batch.device:
            self.consecutive = self.consecutive.to(batch.device)
            self.total = self.total.to(batch.device)
        flag = batch.nonfinite()
        batch.skip_if(flag, SKIP_NONFINITE)
        self.total.add_(flag.to(torch.int64))
        self.consecutive.copy_(torch.where(flag, self.consecutive + 1, 0))
        if self.max_consecutive_skips is not None:
            count = int(self.consecutive)
            if count > self.max_consecutive_skips:
                raise NonFiniteGradientsError(
                    f"Got {count} invalid gradients in succession, abort training "
                    f"(max_consecutive_skips={self.max_consecutive_skips})")

    def _state(self) -> dict[str, Any]:
        return {"consecutive": self.consecutive, "total": self.total}

    def _args(self) -> str:
        m = self.max_consecutive_skips
        return "" if m is None else f"max_consecutive_skips={m}"
