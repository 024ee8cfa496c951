"""The Updater's config options: names, defaults (RETURNN's TF backend), and how a config is read.

A RETURNN config also holds the network, the data, the learning-rate control and much more:
those keys are ignored. Known misspellings raise as RETURNN does. trainop's own YAML/JSON
configs are strict: every key must be an option of this table (or of the per-epoch learning-rate
control), and an unknown one names the closest valid key. A key set to None reads as RETURNN's
``Config`` lookup of it reads None (``config_none``: the default, False, or None kept).
"""

from __future__ import annotations

import warnings
from typing import Any

from trainop.configs import check_keys, load_config
from trainop.contract.validation import describe
from trainop.training.returnn.config_float import FLOAT_KEYS, config_float
from trainop.training.returnn.config_none import read_none
from trainop.training.returnn.unknown_options import (
    RecipeWarning,
    flag_keys,
    refuse_upstream_only,
)

__all__ = ["DEFAULTS", "MAPPINGS", "read_config"]

#: option -> default (RETURNN's TF backend).
DEFAULTS: dict[str, Any] = {
    "backend": "tf",
    "behavior_version": 0,
    "optimizer": None,
    "adam": False, "nadam": False, "adadelta": False, "adagrad": False, "rmsprop": False,
    "momentum": 0.0,
    "optimizer_epsilon": 1e-16,
    "optimizer_use_locking": False,
    "learning_rate": 1.0,
    "dynamic_learning_rate": None,
    "accum_grad_multiple_step": 0,
    "gradient_noise": 0.0,
    "gradient_clip": 0.0,
    "gradient_clip_norm": 0.0,
    "gradient_clip_avg_norm": 0.0,
    "gradient_clip_global_norm": 0.0,
    "global_norm_tag": None,
    "gradient_clip_global_norm_tag": None,
    "grad_norm_to_clip_to_zero": 0.0,
    "maximize_grad_norm": 0.0,
    "gradient_nan_inf_filter": False,
    "num_allowed_consec_invalid_gradient_steps": None,
    "decouple_constraints": False,
    "decouple_constraints_factor": 0.025,
    "use_horovod": False,
    "horovod_reduce_type": "grad",
    "horovod_avg_grad": False,  # RETURNN: config.is_true, unset sums
    "horovod_scale_lr": False,
    "debug_add_check_numerics_ops": False,
    "debug_add_check_numerics_on_output": False,
    "debug_grad_summaries": False,
    "log_grad_norm": False,
    "updater_opts": None,
    "weight_decay_modules_blacklist": None,
    "weight_decay_custom_include_check": None,
    "param_groups_custom": None,
}

#: The options whose value is a dict (a dotted ``--set optimizer.epsilon=...`` may start one).
MAPPINGS = frozenset({"optimizer", "updater_opts"})

#: Keys of the per-epoch learning-rate control, allowed in trainop's strict configs.
LR_CONTROL_KEYS = ("learning_rates", "learning_rate_control", "min_learning_rate",
                   "learning_rate_decay", "newbob_learning_rate_decay",
                   "learning_rate_growth", "newbob_learning_rate_growth",
                   "newbob_relative_error_threshold", "newbob_relative_error_grow_threshold",
                   "newbob_relative_error_div_by_old", "newbob_error_threshold",
                   "newbob_multi_num_epochs", "newbob_multi_update_interval",
                   "learning_rate_control_error_measure",
                   "learning_rate_control_relative_error_relative_lr",
                   "learning_rate_control_min_num_epochs_per_new_lr", "learning_rate_file")


_MISSPELLINGS = {
    "grad_clip": "You set grad_clip in the config, but the option is called "
                 "gradient_clip_global_norm (or other options).",
    "grad_noise": "You set grad_noise in the config, but the option is called gradient_noise.",
}


def read_config(config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(options, unresolved)`` from a dict, a YAML/JSON path (strict) or a RETURNN config
    path (parsed, never executed; other keys ignored). ``options`` has every key of
    ``DEFAULTS``; ``unresolved`` maps RETURNN-config names that needed code to their
    ``Unresolved`` (file and line)."""
    unresolved: dict[str, Any] = {}
    strict = False
    if isinstance(config, dict):
        values = dict(config)
        strict = "trainop" in values  # {"trainop": 1, ...} marks a trainop config in Python
        values.pop("trainop", None)
    elif isinstance(config, str) or hasattr(config, "__fspath__"):
        kind, values, parsed = load_config(config)
        strict = kind in ("yaml", "json")
        if parsed is not None:
            unresolved = {k: v for k, v in parsed.unresolved.items() if k in DEFAULTS}
    else:
        raise TypeError(f"Expected `config` to be a dict or a path to a .yaml/.json/RETURNN "
                        f"config file, got {describe(config)}")
    for key, message in _MISSPELLINGS.items():
        if key in values:
            raise ValueError(message)
    known = [*DEFAULTS, *LR_CONTROL_KEYS]
    if strict:
        check_keys(values, known, "the Updater config")
    else:  # a RETURNN config holds everything: other keys are ignored, near-misses flagged
        refuse_upstream_only(values)
        for line in flag_keys(values, known).values():
            warnings.warn(line, RecipeWarning, stacklevel=3)
    values = read_none(values)
    options = {key: config_float(key, values.get(key, default)) if key in FLOAT_KEYS
               else values.get(key, default) for key, default in DEFAULTS.items()}
    for key, where in unresolved.items():
        options[key] = where
    return options, unresolved


def read_lr_control(config: Any) -> dict[str, Any]:
    """The learning-rate control's keys (``LR_CONTROL_KEYS`` and ``learning_rate``) of a
    config read as ``read_config`` reads it (the same files, checks and strictness)."""
    options, _ = read_config(config)
    values = read_none(config if isinstance(config, dict) else load_config(config)[1])
    out = {key: config_float(key, values[key]) if key in FLOAT_KEYS else values[key]
           for key in LR_CONTROL_KEYS if key in values}
    out["learning_rate"] = options["learning_rate"]
    return out
