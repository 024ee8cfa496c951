"""RETURNN recipes: the Updater options of a RETURNN config (``trainop.Updater``'s table,
RETURNN's TF-backend defaults applied), the optimizer resolved, built into an ``Updater``.

``options["optimizer"]`` is the resolved optimizer as a RETURNN optimizer dict: ``{"class":
<trainop class>, **arguments}`` with RETURNN's implicit arguments filled in (``epsilon`` from
``optimizer_epsilon``, 1e-16 by default; ``momentum``; ``use_locking``), also when the config
uses the legacy flags (``adam = True``, ``rmsprop = 0.9``, ...; those keep their values for
display and warn as RETURNN does). A ``torch.optim`` class (``backend = "torch"`` or
``"torch.optim.AdamW"``) is kept as written: RETURNN's PyTorch backend resolves it.
The per-epoch learning-rate control keys (``learning_rates``, ``newbob_*``, ...) are kept when
given. Building passes these options to ``trainop.Updater``, so the result equals
``Updater(config, model)``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

from trainop.configs import Unresolved
from trainop.contract.validation import describe
from trainop.training.returnn import Updater
from trainop.training.returnn.options import DEFAULTS, LR_CONTROL_KEYS, read_config
from trainop.training.returnn.resolve import LEGACY_FLAGS, optimizer_spec, with_classes
from trainop.training.returnn.unknown_options import flag_keys

__all__ = ["build", "notes_for", "options_from"]


def options_from(config: Mapping[str, Any], classes: Mapping[str, type] | None = None
                 ) -> tuple[dict[str, Any], dict[str, Unresolved], type]:
    """``(options, unresolved, optimizer class)`` of a RETURNN config's values (a dict, or a
    file's evaluated values with ``Unresolved`` where they needed code); ``classes``: names of
    the caller's own optimizer classes (the ``class`` name is replaced by the class in
    ``options``)."""
    options, unresolved = read_config(config)
    for key, value in config.items():  # the values that needed code
        if key in DEFAULTS and isinstance(value, Unresolved):
            unresolved[key] = value
    options["optimizer"] = with_classes(options["optimizer"], classes or {})
    for key in LR_CONTROL_KEYS:
        if key in config:
            options[key] = config[key]
            if isinstance(config[key], Unresolved):
                unresolved[key] = config[key]
    if isinstance(options["optimizer"], Unresolved):
        return options, unresolved, type(None)
    if not any(key in DEFAULTS for key in unresolved):
        _construct(options)
    cls, kwargs, multiplier, group_options = optimizer_spec(options)
    if group_options is None:  # a trainop class: the dict RETURNN's TF updater ends up with
        resolved = {"class": cls, **kwargs}
        if multiplier != 1.0:
            resolved["learning_rate_multiplier"] = multiplier
        options["optimizer"] = resolved
    return options, unresolved, cls


def notes_for(values: Mapping[str, Any]) -> list[str]:
    """The lines ``Recipe.notes`` lists for a RETURNN config's ``values``: keys that look
    like training options trainop does not use (``unknown_options.flag_keys``), and the
    legacy optimizer flags set."""
    notes = list(flag_keys(values, [*DEFAULTS, *LR_CONTROL_KEYS]).values())
    legacy = [flag for flag in LEGACY_FLAGS if values.get(flag) and not isinstance(
        values.get(flag), Unresolved)]
    if legacy and not values.get("optimizer"):
        notes.append(f"legacy optimizer flag(s) {', '.join(f'{f} = {values[f]!r}' for f in legacy)}"
                     f": RETURNN's DEPRECATION WARNING (an error from behavior_version 2); "
                     f"write optimizer = {{'class': ...}} instead")
    return notes


def _construct(options: Mapping[str, Any]) -> None:
    """Build the Updater and its optimizer once on a stand-in parameter, so that a bad value
    (``gradient_clip = -1``, ``beta2 = 1.5``, a bad ``dynamic_learning_rate``) is an error at
    load. The options that need the real model or a writer (``updater_opts``,
    ``debug_grad_summaries``, Horovod) and the numerics checks (hooks that would outlive the
    probe, and their message) are left to ``build``."""
    probe = torch.nn.Parameter(torch.zeros(1))
    config = {key: value for key, value in options.items() if key in DEFAULTS}
    config.update(updater_opts=None, debug_grad_summaries=False, use_horovod=False,
                  debug_add_check_numerics_ops=False, debug_add_check_numerics_on_output=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read_config already warned once
        Updater(config, [probe]).get_optim_op()


def build(options: Mapping[str, Any], model: Any, loss: Any = None, *, num_steps: Any = None,
          steps_per_epoch: Any = None, summary_writer: Any = None) -> Updater:
    """``Updater(options, model)``. ``loss``, ``num_steps`` and ``steps_per_epoch`` are
    accepted so that every recipe builds with one call, and not used: the Updater is given the
    loss tensor at each ``step``, and RETURNN's learning rate does not depend on the run
    length."""
    del loss, num_steps, steps_per_epoch
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"Expected `model` to be a torch.nn.Module, got {describe(model)}")
    config = {key: value for key, value in options.items() if key in DEFAULTS}
    if isinstance(config["optimizer"], Mapping) and "class" in config["optimizer"] \
            and isinstance(config["optimizer"]["class"], type):
        # resolved already (legacy flags included): they must not count twice
        config.update({flag: DEFAULTS[flag] for flag in
                       ("adam", "nadam", "adadelta", "adagrad", "rmsprop")})
    return Updater(config, model, summary_writer=summary_writer)
