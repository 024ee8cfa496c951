"""Slots: the per-variable optimizer state TF names (Adam's ``m``/``v``), how an algorithm
declares them (``SlotSpec``), and the check a slot passes before an update writes it.

Also TF's ``AggregationMethod`` constants, accepted by ``compute_gradients`` for compatibility.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from trainop.contract.overlap import own_elements_overlap
from trainop.contract.validation import describe
from trainop.kernels.native.boundary import PLAIN_TYPES

__all__ = ["TRAINOP_SLOT_NAMES", "AggregationMethod", "SlotSpec", "check_slot", "slot_dtype",
           "uniform_slots"]

#: Every slot name of trainop's optimizers, in every configuration (tests/test_wrapper_state.py
#: checks the table against the registry's classes). Besides the slots of its class, a
#: parameter's state may hold keys a wrapper adds (timm's ``Lookahead`` keeps
#: ``lookahead_slow_buff`` there): a checkpoint's key outside this table (and outside torch's
#: own state keys, ``checkpoint_foreign``) is such a key, kept and loaded as torch loads it; one
#: inside it that the class does not use is another optimizer's slot, and refused.
TRAINOP_SLOT_NAMES = frozenset({
    "m", "v", "momentum", "accumulator", "gradient_accumulator",
    "gradient_squared_accumulator", "accum", "accum_update", "linear", "rms", "mg",
    "grad_norm_ema"})


class AggregationMethod:
    """TF's ``AggregationMethod`` constants (accepted for compatibility; no numeric effect here)."""

    ADD_N = 0
    DEFAULT = ADD_N
    EXPERIMENTAL_TREE = 1
    EXPERIMENTAL_ACCUMULATE_N = 2


class SlotSpec(NamedTuple):
    """One slot of an algorithm: its TF name, initial fill value, optional fixed dtype/shape,
    and whether its rule needs it non-negative (second moments, accumulators: a checkpoint with
    a negative entry is rejected, since the next step would take its square root)."""

    name: str
    fill: float = 0.0
    dtype: torch.dtype | None = None  # None: the variable's dtype
    scalar: bool = False  # True: a 0-dim slot instead of the variable's shape
    nonnegative: bool = False


def slot_dtype(spec: SlotSpec, var: torch.Tensor) -> torch.dtype:
    """The dtype of ``var``'s slot ``spec`` (created, checked, and cast to on load): its fixed
    dtype, else the variable's."""
    return spec.dtype or var.dtype


def uniform_slots(slot_specs: Callable) -> Callable:
    """Marks an optimizer's ``_slot_specs`` whose slots, for every group, all have the
    variable's shape and dtype (no ``scalar``, no fixed ``dtype``): then a step checks a
    parameter's slots in one call of the metadata reader (``like``) and only looks at the
    specs when one differs. A subclass that overrides ``_slot_specs`` without the mark is
    checked spec by spec."""
    slot_specs.uniform_slots = True
    return slot_specs


def check_slot(var: torch.Tensor, spec: SlotSpec, slot: Any) -> None:
    """``Optimizer._check_slots`` for one slot: raises unless it is a tensor of the right
    shape, dtype, device and layout with elements of its own. A plain contiguous slot of the
    right kind returns before any message is formatted."""
    shape = () if spec.scalar else var.shape
    # (slot_dtype inline: this test runs for every slot at every step)
    if (type(slot) in PLAIN_TYPES and slot.layout == torch.strided and slot.shape == shape
            and slot.dtype == (spec.dtype or var.dtype) and slot.device == var.device
            and slot.is_contiguous()):
        return
    where = f"the slot {spec.name!r} of a variable of shape {tuple(var.shape)}"
    if not isinstance(slot, torch.Tensor):
        raise TypeError(f"Expected {where} to be a tensor, got {describe(slot)}")
    shape = tuple(shape)
    if tuple(slot.shape) != shape:
        raise ValueError(f"Expected {where} to have shape {shape}, got {tuple(slot.shape)}")
    dtype = slot_dtype(spec, var)
    if slot.dtype != dtype:
        raise ValueError(f"Expected {where} to have dtype {dtype}, got {slot.dtype}")
    if slot.device != var.device:
        raise ValueError(f"Expected {where} to be on {var.device}, got {slot.device}")
    if slot.layout != torch.strided:
        raise ValueError(f"Expected {where} to be a dense (strided) tensor, got layout "
                         f"{slot.layout}")
    if not slot.is_contiguous() and own_elements_overlap(slot):
        raise ValueError(f"Expected {where} to have elements of its own, got stride "
                         f"{slot.stride()} (an expanded tensor?); give it its own storage "
                         "(e.g. .clone())")

