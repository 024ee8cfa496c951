"""What the names an OpenSeq2Seq or RETURNN config imports mean in trainop.

A Python config is parsed, never run (``trainop.configs``); its ``import`` statements bind
dotted names, and this resolver maps the ones that carry training options to trainop objects:

- ``tf.float32`` / ``tf.float16`` / ``tf.bfloat16`` -> ``torch.float32`` / ``torch.float16`` /
  ``torch.bfloat16`` (``"mixed"`` is a plain string and stays one);
- ``tf.train.<X>Optimizer``, ``tf.contrib.opt.<X>Optimizer`` (``LazyAdamOptimizer``,
  ``AdamWOptimizer``, ``MomentumWOptimizer``, ``NadamOptimizer``), ``tf.compat.v1.train...``
  -> the trainop class of that name;
- ``open_seq2seq.optimizers.novograd.NovoGrad`` -> ``trainop.NovoGrad``;
- ``open_seq2seq.optimizers.lr_policies.<policy>`` -> ``trainop.schedules.openseq2seq.<policy>``
  (``fixed_lr``, ``piecewise_constant``, ``exp_decay``, ``poly_decay``, ``cosine_decay``,
  ``transformer_policy``, ``inv_poly_decay``);
- ``tf.train.<decay>`` used as an ``lr_policy`` (OpenSeq2Seq calls it with ``global_step=``;
  e.g. ``tf.train.cosine_decay``) -> ``trainop.schedules.tf1.<decay>``: ``exponential_decay``,
  ``natural_exp_decay``, ``inverse_time_decay``, ``polynomial_decay``, ``cosine_decay``,
  ``cosine_decay_restarts``, ``linear_cosine_decay``, ``noisy_linear_cosine_decay``
  (``tf.train.piecewise_constant`` takes ``x``, not ``global_step``, so it is not a policy);
- ``tf.contrib.layers.l2_regularizer`` / ``l1_regularizer`` (also ``tf.keras.regularizers.l2``
  / ``l1``) -> ``trainop.l2_regularizer`` / ``trainop.l1_regularizer``.

Every other name stays a ``trainop.configs.Symbol`` (models, encoders, data layers: not
training options, and never imported).

Example:
    >>> from trainop.interfaces.recipes.names import resolve_name
    >>> resolve_name("tensorflow.contrib.opt.LazyAdamOptimizer").__name__
    'LazyAdamOptimizer'
"""

from __future__ import annotations

from typing import Any

import torch

from trainop.optimizers.novograd import NovoGrad
from trainop.registry import OPTIMIZER_CLASSES
from trainop.schedules import openseq2seq as os2s_policies
from trainop.schedules import tf1 as tf1_schedules
from trainop.training.regularization import l1_regularizer, l2_regularizer

__all__ = ["POLICY_FUNCTIONS", "REGULARIZERS", "TF1_POLICY_FUNCTIONS", "resolve_name"]

#: OpenSeq2Seq's ``lr_policies`` functions by name (trainop's exact re-implementations).
POLICY_FUNCTIONS = {name: getattr(os2s_policies, name) for name in (
    "fixed_lr", "piecewise_constant", "exp_decay", "poly_decay", "cosine_decay",
    "transformer_policy", "inv_poly_decay")}

#: TF1's decay functions that take ``global_step`` (usable as an OpenSeq2Seq ``lr_policy``).
TF1_POLICY_FUNCTIONS = {name: getattr(tf1_schedules, name) for name in (
    "exponential_decay", "natural_exp_decay", "inverse_time_decay", "polynomial_decay",
    "cosine_decay", "cosine_decay_restarts", "linear_cosine_decay",
    "noisy_linear_cosine_decay")}

#: TF's regularizer factories by name.
REGULARIZERS = {"l2_regularizer": l2_regularizer, "l1_regularizer": l1_regularizer,
                "l2": l2_regularizer, "l1": l1_regularizer}

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
           "half": torch.float16}
_TF_PREFIXES = ("tensorflow.", "tf.")


def resolve_name(dotted: str) -> Any:
    """The trainop object a config's dotted name stands for, or ``None`` when it carries no
    training option (the config keeps it as a ``Symbol``)."""
    head, _, last = dotted.rpartition(".")
    if dotted.startswith(_TF_PREFIXES):
        if head in ("tensorflow", "tf", "tensorflow.compat.v1", "tensorflow.dtypes") \
                and last in _DTYPES:
            return _DTYPES[last]
        if last.endswith("Optimizer") and (".train" in head or ".contrib.opt" in head
                                           or ".keras.optimizers" in head):
            return OPTIMIZER_CLASSES.get(last)
        if head.endswith(("contrib.layers", "keras.regularizers")):
            return REGULARIZERS.get(last)
        if head.endswith(".train") and last in TF1_POLICY_FUNCTIONS:
            return TF1_POLICY_FUNCTIONS[last]
        return None
    if dotted.startswith("open_seq2seq."):
        if last == "NovoGrad":
            return NovoGrad
        if head.endswith("lr_policies"):
            return POLICY_FUNCTIONS.get(last)
    return None
