"""One RETURNN PyTorch-backend update for a ``torch.optim`` optimizer (spec §4.4).

On a micro-step without an update the gradients join the accumulators (a sum, as the TF path;
``training.accumulate.Accumulator``, saved in ``state_dict``). On an update, in RETURNN's
PyTorch order:

0. ``log_grad_norm`` p: ``last_grad_norm`` = the p-norm of the (accumulated) gradients, before
   noise and clipping, as RETURNN's torch updater records it;
1. ``gradient_noise`` σ: ``g += trunc_normal(std=σ, a=-2σ, b=2σ)`` per gradient;
2. ``gradient_clip`` c: ``clip_grad_value_(c)`` (so ±Inf becomes ±c, Q10);
3. ``gradient_clip_global_norm``: ``clip_grad_norm_``, its norm measured here (without it,
   the gradients' total norm is measured at this point all the same, on the device, and is
   ``StepResult.global_norm``);
4. ``num_allowed_consec_invalid_gradient_steps`` K: the norm (step 3's, else the gradients'
   total norm) read on the host; non-finite skips the update, more than K in a row raises;
5. every group's ``lr`` = effective learning rate x the group's multiplier, then
   ``optimizer.step()``; the gradients are cleared.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from trainop.processing import StepResult
from trainop.processing._base import SKIP_ACCUMULATING, SKIP_NONFINITE
from trainop.training.accumulate import Accumulator, check_step_state

__all__ = ["TorchClassStep"]

_I64 = torch.int64


def total_norm(grads: list[torch.Tensor], p: float) -> torch.Tensor:
    """The p-norm of all ``grads`` together, as ``torch.nn.utils.get_total_norm`` (torch >=
    2.6, which RETURNN calls) measures it; its definition on older torch."""
    if hasattr(torch.nn.utils, "get_total_norm"):
        return torch.nn.utils.get_total_norm(grads, norm_type=p)
    if not grads:
        return torch.tensor(0.0)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, p)
                                                 for g in grads]), p)


def _scaler_found_inf(grad_scaler: Any, optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``grad_scaler.unscale_(optimizer)`` found an Inf/NaN (then its ``step`` skips
    the update; the host read is the one ``GradScaler.step`` makes itself)."""
    found = grad_scaler._found_inf_per_device(optimizer)
    return any(bool(v) for v in found.values())


class TorchClassStep:
    """The training-step core of a ``torch.optim`` optimizer (the interface of
    ``training.step.TrainingStep`` the ``Updater`` uses)."""

    def __init__(self, optimizer: torch.optim.Optimizer, params: list[torch.Tensor],
                 multipliers: list[float], *, noise: float, clip_value: float,
                 clip_global_norm: float, max_invalid: int | None, advice: str,
                 log_norm_p: float | None = None) -> None:
        self.optimizer = optimizer
        self._params = params
        self._multipliers = multipliers
        self._noise, self._clip_value, self._clip_norm = noise, clip_value, clip_global_norm
        self._max_invalid = max_invalid
        self._advice = advice
        self._log_norm_p = log_norm_p
        self.last_grad_norm: torch.Tensor | None = None  # log_grad_norm: before noise and clip
        self._accumulator = Accumulator(params, None)
        self.global_step = torch.zeros((), dtype=_I64)
        self.micro_steps = 0
        self.update_steps = 0
        self.consecutive_invalid = 0  # not saved (as upstream)
        self.last_result: StepResult | None = None

    @property
    def accumulated_micro_steps(self) -> int:
        return self._accumulator.micro_steps

    def _take_grads(self) -> None:
        self._accumulator.add([(p.grad, p) for p in self._params], None)
        for p in self._params:
            p.grad = None

    def set_lr(self, learning_rate: float) -> None:
        """Every group's ``lr`` = ``learning_rate`` x the group's multiplier (RETURNN's torch
        updater does it whenever the learning rate or the step changes)."""
        for group, multiplier in zip(self.optimizer.param_groups, self._multipliers,
                                     strict=True):
            group["lr"] = learning_rate * multiplier

    def drop_pending(self) -> None:
        """A new epoch (RETURNN's torch engine): the gradients of a partial accumulation
        window are dropped and the invalid-gradient counter restarts."""
        self._accumulator.reset()
        for p in self._params:
            p.grad = None
        self.consecutive_invalid = 0

    def accumulate(self) -> StepResult:
        self._take_grads()
        self.micro_steps += 1
        self.last_result = self._result(torch.zeros((), dtype=torch.bool),
                                        SKIP_ACCUMULATING, None)
        return self.last_result

    def update(self, learning_rate: float, step: int, *, grad_scaler: Any = None
               ) -> StepResult:
        """The update with the effective ``learning_rate`` (a host float); ``step``: the
        micro-step's number, for messages. ``grad_scaler``: the GradScaler that scaled the
        window's backward passes: ``unscale_`` on the accumulated gradients before step 0,
        ``grad_scaler.step`` for ``optimizer.step`` (it skips the update where the unscaled
        gradients hold an Inf/NaN) and ``grad_scaler.update()`` last, valid gradients or not
        (RETURNN's torch updater's calls, in its order)."""
        if self._accumulator.pending:
            self._take_grads()
            for g, p in self._accumulator.pairs():
                p.grad = g.clone()
            self._accumulator.reset()
        if grad_scaler is not None:
            grad_scaler.unscale_(self.optimizer)
        grads = [p.grad for p in self._params if p.grad is not None]
        if self._log_norm_p is not None:
            self.last_grad_norm = total_norm(grads, self._log_norm_p)
        with torch.no_grad():
            if self._noise:
                for g in grads:
                    g.add_(torch.nn.init.trunc_normal_(torch.empty_like(g), std=self._noise,
                                                       a=-2 * self._noise, b=2 * self._noise))
            if self._clip_value:
                torch.nn.utils.clip_grad_value_(self._params, self._clip_value)
        if self._clip_norm:
            norm = torch.nn.utils.clip_grad_norm_(self._params, self._clip_norm)
        else:  # measured on the device (no host read), for StepResult.global_norm
            # (what torch.nn.utils.get_total_norm, torch >= 2.6, computes)
            norm = torch.linalg.vector_norm(torch.stack([
                torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads
            ])) if grads else torch.zeros(())
        invalid = False
        if self._max_invalid is not None:
            invalid = not bool(torch.isfinite(norm))  # the documented host read
            if invalid:
                self.consecutive_invalid += 1
                if self.consecutive_invalid > self._max_invalid:
                    raise RuntimeError(f"Got {self.consecutive_invalid} invalid gradients in "
                                       f"succession, abort training. {self._advice}")
                left = self._max_invalid - self.consecutive_invalid
                warnings.warn(f"Invalid gradient in step {step}, skipping. {left} subsequent "
                              f"broken steps left until training is aborted. {self._advice}",
                              RuntimeWarning, stacklevel=4)
            else:
                self.consecutive_invalid = 0
        if not invalid:
            self.set_lr(learning_rate)
            if grad_scaler is None:
                self.optimizer.step()
            else:  # the scaler's own skip: the Inf/NaN its unscale_ found
                invalid = _scaler_found_inf(grad_scaler, self.optimizer)
                grad_scaler.step(self.optimizer)
            if not invalid:
                self.global_step.add_(1)
        if grad_scaler is not None:
            grad_scaler.update()
        for p in self._params:
            p.grad = None
        self.micro_steps += 1
        self.update_steps += 1
        applied = torch.tensor(not invalid)
        self.last_result = self._result(applied, SKIP_NONFINITE if invalid else 0, norm)
        return self.last_result

    def _result(self, applied: torch.Tensor, reason: int, norm: torch.Tensor | None
                ) -> StepResult:
        zero = torch.zeros((), dtype=_I64)
        return StepResult(
            applied=applied, skip_reason=torch.tensor(reason, dtype=_I64),
            global_norm=torch.zeros(()) if norm is None else norm.detach(),
            clipped_global_norm=None, loss_scale=None, next_loss_scale=None,
            num_zero_filtered=zero, skipped_steps=torch.tensor(
                self.update_steps - int(self.global_step), dtype=_I64),
            consecutive_skips=torch.tensor(self.consecutive_invalid, dtype=_I64))

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self, *, pending: bool = True) -> dict[str, Any]:
        """Counters and accumulators (``pending``: see ``Accumulator.state_dict``)."""
        return {"global_step": self.global_step.clone(), "micro_steps": self.micro_steps,
                "update_steps": self.update_steps,
                "accumulator": self._accumulator.state_dict(pending=pending)}

    def check_state_dict(self, state: Any) -> Accumulator:
        return check_step_state(state, {"global_step", "micro_steps", "update_steps",
                                        "accumulator"}, self._accumulator)

    def load_state_dict(self, state: dict[str, Any],
                        accumulator: Accumulator | None = None) -> None:
        if accumulator is None:
            accumulator = self.check_state_dict(state)
        self._accumulator = accumulator
        self.global_step = state["global_step"].clone()
        self.micro_steps = state["micro_steps"]
        self.update_steps = state["update_steps"]
