"""Gradient accumulation across micro-steps: the accumulators are state (saved and resumed).

OpenSeq2Seq (``iter_size``): ``acc += g / iter_size`` every micro-step, in the gradient's dtype
(float32 for master copies), sparse gradients added densely; RETURNN
(``accum_grad_multiple_step``): ``acc += g``. The accumulated gradients are unscaled (a loss
scale is divided out first, ``g * (1/S)``, as OpenSeq2Seq's wrapper returns them), so the
scale may change between windows. After an update attempt (applied or skipped) they are zeroed.
"""

from __future__ import annotations

from typing import Any

import torch

from trainop.contract.validation import describe
from trainop.training._params import check_count_tensor

__all__ = ["Accumulator", "check_step_state"]


class Accumulator:
    """Float accumulators for a fixed list of variables, created on first use.

    Args:
        variables: the variables the gradients belong to (masters for half variables).
        divisor: ``iter_size`` for OpenSeq2Seq's mean (each gradient divided by it), or ``None``
            for RETURNN's sum.
    """

    def __init__(self, variables: list[torch.Tensor], divisor: int | None) -> None:
        self._vars = variables
        self._index = {id(v): i for i, v in enumerate(variables)}
        self._divisor = divisor
        self._acc: dict[int, torch.Tensor] = {}
        self.micro_steps = 0  # gradients added since the last reset

    @property
    def pending(self) -> bool:
        return self.micro_steps > 0

    def add(self, pairs: list[tuple[torch.Tensor | None, torch.Tensor]],
            inverse_scale: torch.Tensor | None) -> None:
        """``acc += (g * inverse_scale) / divisor`` for each pair (dense; ``None`` skipped)."""
        with torch.no_grad():
            for g, v in pairs:
                if g is None:
                    continue
                i = self._index[id(v)]
                if g.is_sparse:
                    g = g.coalesce().to_dense()
                g = g.to(v.dtype) if g.dtype != v.dtype else g
                if inverse_scale is not None:
                    g = g * inverse_scale.to(g.device, g.dtype)
                if self._divisor is not None:
                    g = g / self._divisor
                acc = self._acc.get(i)
                if acc is None:
                    self._acc[i] = g.clone()
                else:
                    acc.add_(g)
        self.micro_steps += 1

    def pairs(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The accumulated ``(gradient, variable)`` pairs, in the variables' order."""
        return [(self._acc[i], self._vars[i]) for i in sorted(self._acc)]

    def reset(self) -> None:
        """Zero the accumulators (kept allocated) and the micro-step count."""
        with torch.no_grad():
            for acc in self._acc.values():
                acc.zero_()
        self.micro_steps = 0

    def state_dict(self, *, pending: bool = True) -> dict[str, Any]:
        """The micro-steps waiting and their sums. Sums are saved only while micro-steps wait
        (after an update they are zeros, kept allocated: the next ``add`` makes them again).
        ``pending=False``: the waiting window is left out (saved as none waiting), for a
        caller whose resume drops it anyway (RETURNN's torch engine: a new epoch restarts the
        window), so a checkpoint does not carry a model-sized sum nobody reads."""
        if not pending or not self.micro_steps:
            return {"micro_steps": 0, "accumulators": {}}
        return {"micro_steps": self.micro_steps,
                "accumulators": {i: t.clone() for i, t in self._acc.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Validated first, then loaded (a rejected checkpoint changes nothing)."""
        if not isinstance(state, dict) or set(state) != {"micro_steps", "accumulators"}:
            raise ValueError(f"Expected an accumulator state with keys ['accumulators', "
                             f"'micro_steps'], got {describe(state)}")
        steps, accs = state["micro_steps"], state["accumulators"]
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"Expected `micro_steps` to be an int >= 0, got {describe(steps)}")
        if not isinstance(accs, dict):
            raise TypeError(f"Expected `accumulators` to be a dict, got {describe(accs)}")
        for i, t in accs.items():
            if not isinstance(i, int) or not 0 <= i < len(self._vars):
                raise ValueError(f"Expected accumulator indices in [0, {len(self._vars)}), got "
                                 f"{i!r}")
            v = self._vars[i]
            if (not isinstance(t, torch.Tensor) or t.shape != v.shape or t.dtype != v.dtype):
                raise ValueError(f"Expected accumulator {i} to be a {v.dtype} tensor of shape "
                                 f"{tuple(v.shape)}, got {describe(t)}")
        self._acc = {i: t.detach().to(self._vars[i].device).clone() for i, t in accs.items()}
        self.micro_steps = steps


def check_step_state(state: Any, keys: set[str], accumulator: Accumulator) -> Accumulator:
    """Validate a training-step checkpoint (exactly ``keys``, with ``global_step``,
    ``micro_steps``, ``update_steps`` and ``accumulator`` among them) without changing
    anything; returns a new ``Accumulator`` like ``accumulator`` holding the saved sums."""
    if not isinstance(state, dict) or set(state) != keys:
        raise ValueError(f"Expected a training-step state with keys {sorted(keys)}, got "
                         f"{describe(state)}")
    check_count_tensor("global_step", state["global_step"])
    for key in ("micro_steps", "update_steps"):
        value = state[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"Expected `{key}` to be an int >= 0, got {describe(value)}")
    loaded = Accumulator(accumulator._vars, accumulator._divisor)
    loaded.load_state_dict(state["accumulator"])
    return loaded
