"""RETURNN's optimizer resolution on trainop's TF1 optimizers (TF backend semantics).

- ``optimizer = {"class": "adam", ...}``: the class by RETURNN's name rule (case-insensitive,
  ``Optimizer`` suffix optional) through trainop's registry (``adam`` = TF1 Adam, ``nadam`` =
  ``NadamOptimizer``, ``momentum``, ``rmsprop``, ``adadelta``, ``adagrad``,
  ``gradientdescent``/``sgd``, ``ftrl``, ``proximaladagrad``, ...), a ``trainop.Optimizer``
  subclass, or a callable returning a name (TF). The other keys are the constructor's;
  ``learning_rate_multiplier`` is popped and multiplies the learning rate; ``learning_rate`` is
  rejected ("set implicitly").
- ``epsilon`` defaults to ``optimizer_epsilon`` (1e-16, RETURNN's TF default) for classes that
  take it, ``momentum`` to the config's ``momentum`` (when nonzero) for classes that take it,
  ``use_locking`` to ``optimizer_use_locking``.
- Without ``optimizer``: the legacy flags, in RETURNN's order ``adam``, ``nadam``,
  ``adadelta``, ``adagrad``, ``rmsprop`` (a float is the decay), ``momentum``, else SGD; any
  legacy flag warns "DEPRECATION WARNING: ..." (an error from ``behavior_version`` 2 on).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any

from trainop.contract.optimizer import Optimizer
from trainop.contract.validation import describe
from trainop.registry import get_optimizer_class as _registry_class
from trainop.training.returnn.torch_classes import resolve_torch_class, torch_kwargs
from trainop.training.returnn.unknown_options import LegacyFlagWarning

__all__ = ["LEGACY_FLAGS", "check_classes", "optimizer_spec", "resolve_class", "with_classes"]

LEGACY_FLAGS = ("adam", "nadam", "adadelta", "adagrad", "rmsprop", "momentum")
_DEPRECATION = ("DEPRECATION WARNING: Please define an optimizer specifically via the "
                "'optimizer=...' parameter")


def resolve_class(class_name: Any) -> type[Optimizer]:
    """RETURNN's ``get_optimizer_class`` (TF): a name, a trainop class, or a callable returning
    a name. An unknown name is a ``ValueError`` listing the valid names (RETURNN: ``KeyError``)."""
    if isinstance(class_name, type):
        if not issubclass(class_name, Optimizer):
            raise TypeError(f"Expected the optimizer class to be a trainop.Optimizer subclass, "
                            f"got {describe(class_name)}")
        return class_name
    if callable(class_name):
        class_name = class_name()
        if not isinstance(class_name, str):
            raise TypeError(f"Expected the optimizer `class` callable to return a name (str), "
                            f"got {describe(class_name)}")
    if not isinstance(class_name, str):
        raise TypeError(f"Expected the optimizer `class` to be a name, a trainop.Optimizer "
                        f"subclass or a callable returning a name, got {describe(class_name)}")
    return _registry_class(class_name)


def check_classes(classes: Any) -> dict[str, type]:
    """``classes``: names a config may use for classes passed from Python (``{"mypkg.Lion":
    Lion}``); a dict of str -> class."""
    if classes is None:
        return {}
    if not isinstance(classes, Mapping) or not all(
            isinstance(k, str) and isinstance(v, type) for k, v in classes.items()):
        raise TypeError(f"Expected `classes` to be a dict of name (str) -> class, got "
                        f"{describe(classes)}")
    return dict(classes)


def with_classes(optimizer: Any, classes: Mapping[str, type]) -> Any:
    """The ``optimizer`` dict with a ``class`` name found in ``classes`` replaced by that
    class (names are looked up, never imported)."""
    if classes and isinstance(optimizer, dict) and isinstance(optimizer.get("class"), str) \
            and optimizer["class"] in classes:
        return {**optimizer, "class": classes[optimizer["class"]]}
    return optimizer


def _accepts(cls: type, name: str) -> bool:
    return name in inspect.signature(cls.__init__).parameters


def optimizer_spec(options: dict[str, Any]) -> tuple[type, dict[str, Any], float,
                                                     dict[str, Any] | None]:
    """``(class, constructor kwargs without learning_rate, learning-rate multiplier, group
    options)``: the group options (``torch_classes.GROUP_KEYS``) for a ``torch.optim`` class
    (RETURNN's PyTorch-backend semantics, ``torch_classes``), ``None`` for a trainop class."""
    epsilon = options["optimizer_epsilon"]
    momentum = float(options["momentum"] or 0.0)
    locking = bool(options["optimizer_use_locking"])
    config = options["optimizer"]
    torch_backend = options["backend"] == "torch"
    if torch_backend and not config:
        raise ValueError("config field 'optimizer' needs to be set explicitely for the Torch "
                         "backend (RETURNN's message; e.g. {'class': 'adamw'})")
    if isinstance(config, dict) and not config:
        raise ValueError("Expected `optimizer` to be a dict with a 'class' key, got {}: "
                         "RETURNN's TF updater silently falls back to plain gradient descent; "
                         "write {'class': 'sgd'} for that, or name the optimizer ({'class': "
                         "'adam'})")
    if config and isinstance(config, dict) and "class" in config:
        kwargs = dict(config)
        torch_class = resolve_torch_class(kwargs.pop("class"), plain_names=torch_backend)
        if torch_class is not None:
            kwargs, group_options, multiplier = torch_kwargs(torch_class, kwargs, options)
            return torch_class, kwargs, multiplier, group_options
    if config:
        if isinstance(config, str):
            raise ValueError(f"Expected `optimizer` to be a dict with a 'class' key (RETURNN's "
                             f"TF updater asserts it), got {config!r}: write "
                             f"{{'class': {config!r}}}")
        if not isinstance(config, dict) or "class" not in config:
            raise ValueError(f"Expected `optimizer` to be a dict with a 'class' key, got "
                             f"{describe(config)}")
        kwargs = dict(config)
        cls = resolve_class(kwargs.pop("class"))
        if "learning_rate" in kwargs or "lr" in kwargs:
            raise ValueError("Expected no `learning_rate` in `optimizer`: the learning rate "
                             "will be set implicitly (use `learning_rate`, "
                             "`learning_rate_multiplier` or `dynamic_learning_rate`)")
        multiplier = float(kwargs.pop("learning_rate_multiplier", 1.0))
        if _accepts(cls, "epsilon"):
            kwargs.setdefault("epsilon", epsilon)
        if momentum and _accepts(cls, "momentum"):
            kwargs.setdefault("momentum", momentum)
        if locking and _accepts(cls, "use_locking"):
            kwargs.setdefault("use_locking", locking)
        return cls, _epsilon_set(kwargs, config), multiplier, None
    cls, kwargs = _legacy(options, epsilon, momentum, locking)
    return cls, _epsilon_set(kwargs, {}), 1.0, None


def _epsilon_set(kwargs: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """``kwargs``; a TypeError naming ``optimizer_epsilon`` where its None became the class's
    epsilon (RETURNN's Config.float keeps the None; TF's optimizer fails on it)."""
    if "epsilon" in kwargs and kwargs["epsilon"] is None and "epsilon" not in config:
        raise TypeError("Expected `optimizer_epsilon` to be a number (the optimizer's "
                        "epsilon; RETURNN keeps a None and TF's optimizer fails on it), "
                        "got None")
    return kwargs


def _legacy(options: dict[str, Any], epsilon: float, momentum: float,
            locking: bool) -> tuple[type[Optimizer], dict[str, Any]]:
    used = [flag for flag in LEGACY_FLAGS if options[flag]]
    if used:
        if (options["behavior_version"] or 0) >= 2:
            raise ValueError(f"{_DEPRECATION} (legacy flags {used} are errors from "
                             f"behavior_version 2 on)")
        warnings.warn(_DEPRECATION, LegacyFlagWarning, stacklevel=4)
    base = {"use_locking": locking}
    get = _registry_class
    if options["adam"]:
        _no_momentum(momentum, "adam")
        return get("adam"), {**base, "epsilon": epsilon}
    if options["nadam"]:
        _no_momentum(momentum, "nadam")
        return get("nadam"), {**base, "epsilon": epsilon}
    if options["adadelta"]:
        _no_momentum(momentum, "adadelta")
        return get("adadelta"), {**base, "epsilon": epsilon}
    if options["adagrad"]:
        _no_momentum(momentum, "adagrad")
        return get("adagrad"), base
    rmsprop = options["rmsprop"]
    if rmsprop is not False and rmsprop is not None and rmsprop != 0:
        if options["momentum"] is None:
            raise TypeError("Expected `momentum` to be a number with the legacy flag `rmsprop` "
                            "(RETURNN passes it to RMSProp, keeping a None, on which TF "
                            "fails), got None")
        decay = 0.9 if rmsprop is True else float(rmsprop)
        return get("rmsprop"), {**base, "decay": decay, "momentum": momentum,
                                "epsilon": epsilon}
    if momentum:
        return get("momentum"), {**base, "momentum": momentum}
    return get("gradientdescent"), base


def _no_momentum(momentum: float, flag: str) -> None:
    if momentum:
        raise ValueError(f"Expected `momentum` to be 0 with the legacy flag `{flag}` (RETURNN "
                         f"asserts it), got {momentum}")
