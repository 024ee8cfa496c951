"""TF's slot names per optimizer (``ckpt.TF1_SLOTS``) follow from trainop's slot order.

The table is checked against TF 2.21's ``tf.compat.v1.train`` optimizers by the continuation
tests (a strict load fails on any other name); here the contrib and OpenSeq2Seq classes, which
TF 2 no longer ships, are checked against the table (their TF1 code creates the slots of their
base class, under their own default name).
"""

from __future__ import annotations

import pytest
import torch

import trainop
import trainop.checkpoints as ckpt

DEFAULT_NAMES = {"LazyAdamOptimizer": "Adam", "NadamOptimizer": "Adam", "AdamWOptimizer": "AdamW",
                 "MomentumWOptimizer": "MomentumW", "RMSPropOptimizer(centered)": "RMSProp"}


def _make(key: str, params):
    name = key.removesuffix("(centered)")
    cls = getattr(trainop, name)
    args = {"MomentumOptimizer": (0.1, 0.9), "MomentumWOptimizer": (0.01, 0.1, 0.9),
            "AdamWOptimizer": (0.01, 0.1), "AdagradDAOptimizer": (0.1, None)}.get(name, (0.1,))
    kwargs = {"centered": True} if key.endswith("(centered)") else {}
    return cls(*args, params=params, **kwargs)


@pytest.mark.parametrize("key", sorted(ckpt.TF1_SLOTS))
def test_slot_table_matches_trainop_slot_order(key):
    opt = _make(key, [torch.nn.Parameter(torch.zeros(2))])
    name = DEFAULT_NAMES.get(key, key.removesuffix("(centered)").removesuffix("Optimizer"))
    assert opt.get_name() == name
    expected = {slot: name if i == 0 else f"{name}_{i}"
                for i, slot in enumerate(ckpt.TF1_SLOTS[key])}
    assert ckpt.slot_names(opt, opt.param_groups[0]) == expected
    assert tuple(opt._non_slot_names) == ckpt.TF1_NON_SLOT.get(key, ())


def test_renamed_optimizer_renames_its_slots():
    opt = trainop.AdamOptimizer(0.1, name="enc_adam", params=[torch.nn.Parameter(torch.zeros(1))])
    assert ckpt.slot_names(opt, opt.param_groups[0]) == {"m": "enc_adam", "v": "enc_adam_1"}
