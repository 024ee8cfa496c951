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

    NovoGrad (OpenSeq2Seq)       momentum -> NovoGrad (it is a MomentumOptimizer);
                                 grad_norm_ema -> nvgrad2_ema<i>, a 0-dim variable per
                                 variable, i its place in the optimizer's variable list

A renamed optimizer (``name="enc_adam"``) renames its slots alike (``enc_adam``, ``enc_adam_1``).
Not covered: ``FtrlOptimizer(accum_name=..., linear_name=...)`` (TF then names the slots by
those: give them in ``names``, e.g. ``names["0.weight[accum]"]``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["TF1_NON_SLOT", "TF1_SLOTS", "non_slot_names", "scalar_slot_name", "slot_names"]

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
"""TF1's slot names per optimizer class (a checkpoint's ``<variable>/<Class>[_1]`` suffixes)."""
TF1_NON_SLOT: dict[str, tuple[str, ...]] = {
    name: ("beta1_power", "beta2_power") for name in
    ("AdamOptimizer", "LazyAdamOptimizer", "NadamOptimizer", "AdamWOptimizer")}
"""TF1's non-slot variables per optimizer class (Adam's ``beta1_power``, ``beta2_power``)."""


def _suffix(name: str, place: int) -> str:
    return name if place == 0 else f"{name}_{place}"


def slot_names(optimizer: Any, group: Any) -> dict[str, str]:
    """``{trainop slot name: TF name suffix}`` of the slots TF keeps as slots of the variable
    (0-dim ones, such as NovoGrad's, are not: see ``scalar_slot_name``)."""
    specs = [s for s in optimizer._slot_specs(group) if not s.scalar]
    return {spec.name: _suffix(optimizer.get_name(), i) for i, spec in enumerate(specs)}


_SCALAR_SLOTS = {("NovoGrad", "grad_norm_ema"): "nvgrad2_ema{index}"}


def scalar_slot_name(optimizer: Any, slot: str, index: int) -> str:
    """The TF name of a 0-dim slot of the ``index``-th variable of the optimizer (OpenSeq2Seq's
    NovoGrad: ``nvgrad2_ema<index>``); ``ValueError`` for one TF has no variable for."""
    for klass in type(optimizer).__mro__:
        pattern = _SCALAR_SLOTS.get((klass.__name__, slot))
        if pattern is not None:
            return pattern.format(index=index)
    raise ValueError(f"{type(optimizer).__name__} keeps the 0-dim slot {slot!r}, which has no "
                     f"TF1 variable name; name it in `names` as '<param>[{slot}]'")


def non_slot_names(optimizer: Any) -> tuple[str, ...]:
    """The TF names of the optimizer's non-slot variables (the same as trainop's keys)."""
    return tuple(optimizer._non_slot_names)
