"""``NumericsError`` and the statistics of the tensor that carried the first non-finite value."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["ADVICE", "NumericsError", "TensorStats", "tensor_stats"]

#: What to try, after RETURNN's Updater documentation (the advice it quotes from Vincent Vanhoucke).
ADVICE = (
    "What to try: for Adam-like optimizers a larger epsilon (RETURNN's `optimizer_epsilon`; "
    "1e-8, 1e-6, even 0.1 or 1.0 for some models); a zero or tiny learning rate (if it still "
    "diverges, the setup has a bug); beta1=0.5; a NaN/Inf gradient filter "
    "(trainop.processing.NanInfFilter, or SkipNonFinite to skip the step; RETURNN's "
    "`gradient_nan_inf_filter`)."
)


@dataclass(frozen=True)
class TensorStats:
    """What the offending tensor held: shape, dtype, counts of NaN/+Inf/-Inf, and the range of
    its finite part (``None`` where no element is finite). ``values`` holds the tensor (on the
    CPU, detached) when the checker was asked to print tensors, else ``None``."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    nan: int
    posinf: int
    neginf: int
    finite_min: float | None
    finite_max: float | None
    values: torch.Tensor | None = None

    def __str__(self) -> str:
        rng = ("no finite values" if self.finite_min is None
               else f"finite range [{self.finite_min:.6g}, {self.finite_max:.6g}]")
        text = (f"shape {list(self.shape)}, {self.dtype}, {self.nan} NaN, {self.posinf} +Inf, "
                f"{self.neginf} -Inf, {rng}")
        if self.values is not None:
            text += f"\nvalues:\n{self.values}"
        return text


def tensor_stats(tensor: torch.Tensor, with_values: bool = False) -> TensorStats:
    """Statistics of ``tensor`` (reads it to the host: only called once a problem was found)."""
    t = tensor.detach()
    if t.is_sparse:
        t = t.coalesce().values()
    wide = t.to(torch.float64) if t.is_floating_point() else t.double()
    finite = torch.isfinite(wide)
    part = wide[finite]
    return TensorStats(
        shape=tuple(tensor.shape), dtype=tensor.dtype,
        nan=int(torch.isnan(wide).sum()), posinf=int((wide == float("inf")).sum()),
        neginf=int((wide == float("-inf")).sum()),
        finite_min=float(part.min()) if part.numel() else None,
        finite_max=float(part.max()) if part.numel() else None,
        values=t.cpu().clone() if with_values else None,
    )


class NumericsError(RuntimeError):
    """The first non-finite value (NaN or Inf) of a checked run, and where it came from.

    Attributes:
        phase: ``"forward"``, ``"backward"`` or ``"update"``.
        module: the qualified name of the module (``"encoder.layers.1.self_attn"``; ``""`` is
            the root module; ``"<input>"`` when the data handed to the model was already
            non-finite, i.e. the problem is outside the model).
        op: the operation where it can be known: an aten op in the forward pass
            (``"aten.log"``), an autograd node in the backward pass (``"SqrtBackward0"``), the
            optimizer's update (``"AdamOptimizer.step"``), or the argument for input data
            (``"args[0]"``); ``None`` where it could not be located more precisely than the
            module.
        step: the training step: the number of optimizer steps completed before the
            computation that produced it (0 for the first step; without an optimizer, 0).
        tensor_stats: a ``TensorStats`` of the offending tensor, or ``None``.
        parameter: for the update phase, the qualified parameter name; else ``None``.
        slot: for the update phase, the optimizer state entry (``"exp_avg"``, ``"m"``) when the
            parameter itself is finite but its slot is not; else ``None``.
        origin: ``"data"`` for input data, else ``"model"`` (forward/backward) or
            ``"optimizer"`` (update).
    """

    def __init__(self, phase: str, module: str, op: str | None, step: int,
                 tensor_stats: TensorStats | None = None, *, parameter: str | None = None,
                 slot: str | None = None, detail: str = "") -> None:
        self.phase = phase
        self.module = module
        self.op = op
        self.step = step
        self.tensor_stats = tensor_stats
        self.parameter = parameter
        self.slot = slot
        self.origin = ("data" if module == "<input>" else
                       "optimizer" if phase == "update" else "model")
        super().__init__(self._message(detail))

    def _message(self, detail: str) -> str:
        where = "the input data" if self.origin == "data" else (
            f"module {self.module!r}" if self.module else "the root module")
        what = f" in {self.op}" if self.op else ""
        text = f"first non-finite value at step {self.step}, {self.phase} pass: {where}{what}"
        if self.parameter is not None:
            text += f", parameter {self.parameter!r}"
            if self.slot is not None:
                text += f" (optimizer state {self.slot!r})"
        if self.origin == "data":
            text += " (the data was already non-finite before the model saw it)"
        if detail:
            text += f". {detail}"
        if self.tensor_stats is not None:
            text += f"\n  tensor: {self.tensor_stats}"
        return f"{text}\n  {ADVICE}"

    def __reduce__(self):  # picklable across processes (multiprocessing, DataLoader workers)
        return (_rebuild, (self.phase, self.module, self.op, self.step, self.tensor_stats,
                           self.parameter, self.slot))


def _rebuild(phase, module, op, step, stats, parameter, slot):
    return NumericsError(phase, module, op, step, stats, parameter=parameter, slot=slot)
