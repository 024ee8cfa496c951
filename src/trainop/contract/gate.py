"""``Gate``: what gradient processing folds into one update (a multiplier, a skip flag, and
whether gradients may come narrower than their variables)."""

from __future__ import annotations

from typing import Any

import torch

from trainop.contract.validation import describe

__all__ = ["NO_GATE", "Gate", "make_gate"]


class Gate:
    """What the gradient-processing stage folds into one update (see ``docs/design.md``).

    ``multiplier``: a 0-dim float tensor every gradient is multiplied by (loss-scale inverse
    times clip coefficient), applied inside the update instead of rewriting the gradients.
    ``found_inf``: a 0-dim float tensor; nonzero skips the whole update (params, slots and
    counters stay as they are). Both stay on the device: the fused and native kernels take them
    as they are; the foreach and reference paths read ``found_inf`` once per step (free on the
    CPU, one synchronisation on a GPU). ``widen``: True when the caller allowed dense
    float16/bfloat16 gradients of float32 variables (``apply_gradients(widen_gradients=True)``,
    ``contract.arguments.WIDENED_DTYPES``), each standing for its exact float32 widening: the
    Triton kernels read it as it is, every other path gets ``kernels.dispatch.widened`` first
    (so no half gradient reaches the C kernels).

    Side effect to know: torch's fused kernels (the ``fused`` implementation) write
    ``g * multiplier`` back into the gradient tensors they are given, as
    ``GradScaler.unscale_`` does; the ``native``, ``foreach`` and ``reference`` paths leave the
    gradients untouched (on the CPU the automatic choice is ``native``).
    """

    __slots__ = ("multiplier", "found_inf", "widen", "_skipped")

    def __init__(self, multiplier: torch.Tensor | None = None,
                 found_inf: torch.Tensor | None = None, widen: bool = False) -> None:
        self.multiplier = multiplier
        self.found_inf = found_inf
        self.widen = widen
        self._skipped: bool | None = None

    def skipped(self) -> bool:
        """Whether the update is skipped (read once, then cached)."""
        if self._skipped is None:
            self._skipped = self.found_inf is not None and bool(self.found_inf)
        return self._skipped

    def applied(self) -> torch.Tensor | None:
        """``None`` (always applied) or a 0-dim bool tensor: the update was applied."""
        return None if self.found_inf is None else self.found_inf == 0

    def also_skipped_if(self, flag: torch.Tensor) -> Gate:
        """This gate, with the update also skipped where the 0-dim bool ``flag`` is True (on
        the device: nothing is read)."""
        if self.found_inf is None:
            return Gate(self.multiplier, flag.to(torch.float32), self.widen)
        found = self.found_inf + flag.to(device=self.found_inf.device,
                                         dtype=self.found_inf.dtype)
        return Gate(self.multiplier, found, self.widen)

    def scale(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        if self.multiplier is None:
            return grads
        return [g * self.multiplier.to(device=g.device, dtype=g.dtype) for g in grads]

    def fused_kwargs(self, device: torch.device) -> dict[str, torch.Tensor]:
        """``grad_scale``/``found_inf`` as torch's fused kernels take them (they divide)."""
        kwargs = {}
        if self.multiplier is not None:
            kwargs["grad_scale"] = torch.reciprocal(
                self.multiplier.to(device=device, dtype=torch.float32))
        if self.found_inf is not None:
            kwargs["found_inf"] = self.found_inf.to(device=device, dtype=torch.float32)
        return kwargs


NO_GATE = Gate()


def make_gate(multiplier: Any, found_inf: Any, widen: bool = False) -> Gate:
    """The ``Gate`` of one update (``NO_GATE`` when nothing is folded in); ``TypeError`` for a
    ``grad_multiplier``/``found_inf`` that is not None or a 0-dim tensor. ``widen``: a bool
    the caller checked (``widen_gradients``)."""
    for name, value in (("grad_multiplier", multiplier), ("found_inf", found_inf)):
        if value is not None and (not isinstance(value, torch.Tensor) or value.dim() != 0):
            raise TypeError(f"Expected `{name}` to be None or a 0-dim tensor, got "
                            f"{describe(value)}")
    if multiplier is None and found_inf is None and not widen:
        return NO_GATE
    return Gate(multiplier, found_inf, widen)
