"""OpenSeq2Seq's mixed precision in a checkpoint: float16 variables, float32 master copies
(``FP32-master-copy/<variable>``) holding the optimizer's slots, and the loss scaler.

For a ``MixedPrecisionOptimizerWrapper`` the inner optimizer updates the masters: a bound
half-precision parameter gets a second binding, its master, whose slots are the ones the
checkpoint holds (``<master>/<suffix>``). The wrapper must have its masters already (made
with the parameters, torch style: ``MixedPrecisionOptimizerWrapper(
trainop.AdamOptimizer(model.parameters(), ...), scaler)``).
"""

from __future__ import annotations

from typing import Any

import torch

from trainop.interfaces.checkpoints.binding import Binding
from trainop.interfaces.checkpoints.naming import MASTER_SCOPE
from trainop.processing.loss_scale import AutomaticLossScaler, LossScaler, StaticLossScaler
from trainop.processing.mixed_precision import MixedPrecisionOptimizerWrapper

__all__ = ["master_bindings", "scaler_of", "unwrap"]


def unwrap(optimizer: Any) -> tuple[Any, MixedPrecisionOptimizerWrapper | None]:
    """``(the optimizer that owns the slots, the wrapper or None)``."""
    if isinstance(optimizer, MixedPrecisionOptimizerWrapper):
        return optimizer.optimizer, optimizer
    return optimizer, None


def master_bindings(wrapper: MixedPrecisionOptimizerWrapper | None,
                    bindings: list[Binding]) -> tuple[list[Binding], list[Binding]]:
    """``(bindings whose tensors the inner optimizer updates, the master bindings)``: a half
    parameter's binding is replaced by its master's (default TF name
    ``FP32-master-copy/<variable>``, same layout)."""
    if wrapper is None:
        return bindings, []
    updated, masters = [], []
    for b in bindings:
        if b.param.dtype not in (torch.float16, torch.bfloat16):
            updated.append(b)
            continue
        try:
            master = wrapper.master(b.param)
        except ValueError:
            raise ValueError(f"Expected the wrapper to hold the float32 master of "
                             f"{b.param_name!r} (construct the inner optimizer with the model's "
                             f"parameters, torch style, so the masters exist before a "
                             f"checkpoint is loaded or saved)") from None
        binding = Binding(b.param_name, master, f"{MASTER_SCOPE}/{b.tf_name}", b.layout)
        updated.append(binding)
        masters.append(binding)
    return updated, masters


def scaler_of(wrapper: MixedPrecisionOptimizerWrapper | None) -> LossScaler | None:
    """The scaler whose state a TF checkpoint holds (Backoff, LogMax), or None."""
    if wrapper is None:
        return None
    scaler = wrapper.loss_scaler
    if isinstance(scaler, AutomaticLossScaler):
        scaler = scaler.scaler
    return None if isinstance(scaler, StaticLossScaler) else scaler
