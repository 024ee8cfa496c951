"""TF's names for an optimizer's variables, and which trainop state each one is.

TF1 names a slot ``<variable>/<optimizer name>`` and repeats of that name within one variable
scope get ``_1``, ``_2``: the suffix is the optimizer's name followed by the slot's place in
the order its ``_create_slots`` makes them. trainop declares its slots in TF's order, so the
table follows from ``_slot_specs``; ``TF1_SLOTS`` writes it down (checked against TF itself
in the tests)::

    optimizer (default name)     slot -> TF name suffix
    Adam, LazyAdam, Nadam        m -> Adam, v -> Adam_1            non-slot beta1_power, beta2_power
    AdamW (contrib)              m -> AdamW, v -> AdamW_1          non-slot beta1_power, beta2_power
    Momentum                     momentum -> Momentum
    MomentumW (contrib)          momentum -> MomentumW
    RMSProp                      rms -> RMSProp, momentum -> RMSProp_1
    RMSProp centered             rms -> RMSProp, mg -> RMSProp_1, momentum -> RMSProp_2
    Adagrad                      accumulator -> Adagrad
    ProximalAdagrad              accumulator -> ProximalAdagrad
    Adadelta                     accum -> Adadelta, accum_update -> Adadelta_1
    Ftrl                         accum -> Ftrl, linear -> Ftrl_1
    AdagradDA                    gradient_accumulator -> AdagradDA,
                                 gradient_squared_accumulator -> AdagradDA_1   (+ global_step)
    GradientDescent, ProximalGradientDescent: none

A renamed optimizer (``name="enc_adam"``) renames its slots alike (``enc_adam``, ``enc_adam_1``).
Not covered: ``FtrlOptimizer(accum_name=..., linear_name=...)`` (TF then names the slots by
those), and NovoGrad's per-variable 0-dim second moment (OpenSeq2Seq keeps it as a Python-side
list of variables, not a slot; refused with its name).
"""

from __future__ import annotations

from typing import Any

__all__ = ["TF1_NON_SLOT", "TF1_SLOTS", "non_slot_names", "slot_names"]

TF1_SLOTS: dict[str, tuple[str, ...]] = {
    "AdamOptimizer": ("m", "v"), "LazyAdamOptimizer": ("m", "v"), "NadamOptimizer": ("m", "v"),
    "AdamWOptimizer": ("m", "v"), "MomentumOptimizer": ("momentum",),
    "MomentumWOptimizer": ("momentum",), "RMSPropOptimizer": ("rms", "momentum"),
    "RMSPropOptimizer(centered)": ("rms", "mg", "momentum"),
    "AdagradOptimizer": ("accumulator",), "ProximalAdagradOptimizer": ("accumulator",),
    "AdadeltaOptimizer": ("accum", "accum_update"), "FtrlOptimizer": ("accum", "linear"),
    "AdagradDAOptimizer": ("gradient_accumulator", "gradient_squared_accumulator"),
    "GradientDescentOptimizer": (), "ProximalGradientDescentOptimizer": (),
}
TF1_NON_SLOT: dict[str, tuple[str, ...]] = {
    name: ("beta1_power", "beta2_power") for name in
    ("AdamOptimizer", "LazyAdamOptimizer", "NadamOptimizer", "AdamWOptimizer")}


def _suffix(name: str, place: int) -> str:
    return name if place == 0 else f"{name}_{place}"


def slot_names(optimizer: Any, group: Any) -> dict[str, str]:
    """``{trainop slot name: TF name suffix}`` for a parameter of ``group``; raises
    ``ValueError`` for state TF does not keep as slots (a 0-dim slot such as NovoGrad's)."""
    specs = optimizer._slot_specs(group)
    scalar = [s.name for s in specs if s.scalar]
    if scalar:
        raise ValueError(f"{type(optimizer).__name__} keeps the 0-dim slots {scalar}, which TF1 "
                         f"checkpoints do not hold as slots of the variable; it cannot be "
                         f"loaded from or saved to a TF checkpoint")
    return {spec.name: _suffix(optimizer.get_name(), i) for i, spec in enumerate(specs)}


def non_slot_names(optimizer: Any) -> tuple[str, ...]:
    """The TF names of the optimizer's non-slot variables (the same as trainop's keys)."""
    return tuple(optimizer._non_slot_names)
