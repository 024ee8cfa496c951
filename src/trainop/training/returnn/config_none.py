"""What ``KEY = None`` in a RETURNN config means: the ``Config`` lookup RETURNN reads KEY with.

RETURNN's lookups differ on a value set to None (``returnn/config.py``):

- ``value(key, default)`` and the list lookups (``list``, ``float_list``, ``int_list``) return
  the default, so the key reads as if it were not set;
- ``is_true(key)`` returns ``bool(None)``, False;
- ``float``, ``int``, ``bool``, ``typed_value``, ``opt_typed_value`` and ``bool_or_other``
  return None itself. What RETURNN then does with it is the reader's: off where it tests the
  value's truth (``if grad_clip:``), no change for a newbob decay or growth, a crash where it
  compares or computes with it (trainop: a ValueError or TypeError naming the key).

``LOOKUPS`` is each key trainop reads with RETURNN's lookup and default for it (RETURNN
1.20261022: ``learning_rate_control.py``, ``tf/updater.py``, ``torch/updater.py``,
``tf/horovod.py``, ``engine/base.py``, ``util/basic.py``, ``tf/network.py``; the torch
updater's for the keys the TF one does not read; where RETURNN writes ``typed_value(key) or
value(key, ...)``, the last lookup, which decides for a None); ``read_none`` applies it to a
config's values.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AS_DEFAULT", "LOOKUPS", "read_none"]

#: key -> (RETURNN's Config lookup, its default there)
LOOKUPS: dict[str, tuple[str, Any]] = {
    # the Updater's options (options.DEFAULTS)
    "backend": ("value", None),  # util/basic.py, BackendEngine.select_engine
    "behavior_version": ("int", None),  # engine/base.py
    "optimizer": ("typed_value", None),
    "adam": ("bool", False), "nadam": ("bool", False), "adadelta": ("bool", False),
    "adagrad": ("bool", False), "rmsprop": ("bool", False),
    "momentum": ("float", 0.0),
    "optimizer_epsilon": ("float", 1e-16),
    "optimizer_use_locking": ("bool", False),
    "learning_rate": ("float", 1.0),
    "dynamic_learning_rate": ("typed_value", None),  # torch/updater.py (TF: typed_dict.get)
    "accum_grad_multiple_step": ("int", 0),
    "gradient_noise": ("float", 0.0),
    "gradient_clip": ("float", 0.0),
    "gradient_clip_norm": ("float", 0.0),
    "gradient_clip_avg_norm": ("float", 0.0),
    "gradient_clip_global_norm": ("float", 0.0),
    "global_norm_tag": ("value", None),
    "gradient_clip_global_norm_tag": ("value", None),  # default: global_norm_tag's value
    "grad_norm_to_clip_to_zero": ("float", 0.0),
    "maximize_grad_norm": ("float", 0),
    "gradient_nan_inf_filter": ("bool", False),
    "num_allowed_consec_invalid_gradient_steps": ("typed_value", None),  # torch/updater.py
    "decouple_constraints": ("bool", False),
    "decouple_constraints_factor": ("float", 0.025),
    "use_horovod": ("is_true", False),
    "horovod_reduce_type": ("value", "grad"),  # tf/horovod.py
    "horovod_avg_grad": ("is_true", False),
    "horovod_scale_lr": ("is_true", False),
    "debug_add_check_numerics_ops": ("bool", False),
    "debug_add_check_numerics_on_output": ("bool", False),  # tf/network.py
    "debug_grad_summaries": ("bool_or_other", False),
    "log_grad_norm": ("opt_typed_value", False),
    # keys of RETURNN's torch `optimizer` dict (`opts.pop(key, None)`) and trainop's own
    # `updater_opts` (RETURNN: a layer's): None is their default
    "weight_decay_modules_blacklist": ("typed_value", None),
    "weight_decay_custom_include_check": ("typed_value", None),
    "param_groups_custom": ("typed_value", None),
    "updater_opts": ("typed_value", None),
    # the learning-rate control's (options.LR_CONTROL_KEYS; learning_rate above)
    "learning_rate_control": ("value", "constant"),
    "learning_rates": ("float_list", None),  # typed_value(...) or float_list(...)
    "min_learning_rate": ("float", 0.0),
    "learning_rate_control_error_measure": ("value", None),  # typed_value(...) or value(...)
    "learning_rate_control_relative_error_relative_lr": ("bool", False),
    "learning_rate_control_min_num_epochs_per_new_lr": ("int", 0),
    "newbob_relative_error_div_by_old": ("bool", False),
    "learning_rate_decay": ("typed_value", 0.5),  # default: newbob_learning_rate_decay's
    "newbob_learning_rate_decay": ("opt_typed_value", 0.5),
    "learning_rate_growth": ("typed_value", 1.0),  # default: newbob_learning_rate_growth's
    "newbob_learning_rate_growth": ("opt_typed_value", 1.0),
    "learning_rate_file": ("value", None),
    "newbob_relative_error_threshold": ("float", -0.01),
    "newbob_error_threshold": ("float", -0.01),
    "newbob_relative_error_grow_threshold": ("float", -0.01),  # default: the threshold's
    "newbob_multi_num_epochs": ("int", 5),
    "newbob_multi_update_interval": ("int", 5),  # default: newbob_multi_num_epochs's
}

#: The lookups that read a None value as their default.
AS_DEFAULT = frozenset({"value", "list", "float_list", "int_list"})


def read_none(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each None of a ``LOOKUPS`` key as RETURNN's lookup reads it: dropped
    where the lookup gives its default (the key then reads as unset), False for ``is_true``,
    else kept (the reader decides). Other keys as they are; ``values`` is not changed."""
    out = {}
    for key, value in values.items():
        if value is None and key in LOOKUPS:
            lookup = LOOKUPS[key][0]
            if lookup in AS_DEFAULT:
                continue
            if lookup == "is_true":
                value = False
        out[key] = value
    return out
