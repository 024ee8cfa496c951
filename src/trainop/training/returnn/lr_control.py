"""RETURNN's per-epoch learning-rate control (``learning_rate_control``): the learning rate of
each epoch from the scores of the epochs before, told to the ``Updater`` with
``set_learning_rate`` once per epoch, as RETURNN's engine does.

Every epoch has a record: its learning rate and its scores (``set_epoch_error``). The rate of an
epoch without a record is computed when first asked for and then kept:

- ``learning_rates`` (a list for epochs 1, 2, ..., a dict ``{epoch: rate}`` or a str of the
  dict, read as a literal) fixes the rates of those epochs beforehand (e.g. a warmup);
- ``constant``: the most recent epoch's rate (``learning_rate`` before any);
- ``newbob`` / ``newbob_rel``: with the relative error ``r = (new - old) / |new|`` of the two
  most recent epochs (``/ |old|`` with ``newbob_relative_error_div_by_old``; divided by
  ``lr / learning_rate`` with ``learning_rate_control_relative_error_relative_lr``): the last
  rate times ``newbob_learning_rate_decay`` (default 0.5) when ``r >
  newbob_relative_error_threshold`` (default -0.01), else times ``newbob_learning_rate_growth``
  (default 1);
- ``newbob_abs``: the same on the absolute difference ``new - old`` against
  ``newbob_error_threshold``;
- ``newbob_multi_epoch``: the mean relative error over the last ``newbob_multi_num_epochs``
  + 1 epochs, checked only on epochs ``e`` with ``e mod newbob_multi_update_interval == 1``;
  decays above ``newbob_relative_error_threshold``, grows below
  ``newbob_relative_error_grow_threshold``;
- decay and growth may be callables ``lr -> lr`` (Python dict configs, as in RETURNN);
  a NaN score is kept (every comparison with it is false); a relative error over a score of 0
  is a ValueError (RETURNN divides by zero); the multi-epoch mean is numpy's, as RETURNN's;
- a decayed rate never goes below ``min_learning_rate``;
  ``learning_rate_control_min_num_epochs_per_new_lr = N`` keeps a new rate for N epochs;
- a key set to None reads as RETURNN reads it (``config_none``): ``learning_rate_control`` is
  ``constant``, a decay or growth changes nothing, a threshold, minimum or count is refused
  (naming it) by a control that reads it and ignored by the others.

The score a decision reads (``learning_rate_control_error_measure``, else RETURNN's search:
``dev_score``, ``dev_score_output``, ``dev_score_output/output*``, ``dev_score_output/*``,
``dev_*``, ``train_score``, then the first key) must be the same in both epochs compared, else
the rate stays. The history is saved in ``state_dict`` (RETURNN writes it to
``learning_rate_file``, which trainop does not read or write).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy

from trainop.contract.validation import describe

__all__ = ["CONTROLS", "LearningRateControl"]

#: RETURNN's control names (``newbob`` and ``newbob_relative`` are ``newbob_rel``).
CONTROLS = ("constant", "newbob", "newbob_rel", "newbob_relative", "newbob_abs",
            "newbob_multi_epoch")
_RELATIVE = ("newbob", "newbob_rel", "newbob_relative")


@dataclass
class EpochData:
    """One epoch's learning rate and scores."""

    learning_rate: float | None
    error: dict[str, float] = field(default_factory=dict)


def _number(name: str, value: Any, nan: bool = False) -> float:
    """``value`` as float; NaN only with ``nan`` (scores: RETURNN stores a NaN score)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2 ** 1023:
        raise ValueError(f"Expected `{name}` to be a number a float holds (|x| < 2**1023), got "
                         f"an integer of {value.bit_length()} bits")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            not nan and math.isnan(value)):
        raise TypeError(f"Expected `{name}` to be a number, got {describe(value)}")
    return float(value)


def _rate(name: str, value: Any) -> float:
    """A learning rate: a number >= 0 (the Updater's ``set_learning_rate`` takes no other, so
    a rate is checked before the control stores it)."""
    value = _number(name, value)
    if value < 0:
        raise ValueError(f"Expected `{name}` in [0, inf), got {value!r}")
    return value


def _factor(name: str, value: Any) -> float | Callable[[float], float] | None:
    """A decay/growth: a number, (Python dict configs, as RETURNN) a callable lr -> lr, or None:
    no change (RETURNN reads it with ``typed_value``, which keeps a None, and then leaves the
    rate as it is)."""
    return value if value is None or callable(value) else _number(name, value)


#: key -> (the controls that read it, RETURNN's subclasses, and what it must be there): a None
#: is refused there (RETURNN's Config.float/int keep it, and the control fails comparing with
#: it) and kept elsewhere (RETURNN's other controls never read it)
_USERS = {
    "min_learning_rate": (CONTROLS[1:], "a number >= 0"),
    "newbob_relative_error_threshold": ((*_RELATIVE, "newbob_multi_epoch"), "a number"),
    "newbob_error_threshold": (("newbob_abs",), "a number"),
    "newbob_relative_error_grow_threshold": (("newbob_multi_epoch",), "a number"),
    "newbob_multi_num_epochs": (("newbob_multi_epoch",), "an int >= 1"),
    "newbob_multi_update_interval": (("newbob_multi_epoch",), "an int >= 1"),
}


def _used(control: str) -> Callable[..., Any]:
    """``used(check, name, value, *args)``: ``check(name, value, *args)``, or for a None value
    None where ``control`` does not read ``name`` and else a ``TypeError`` naming it."""
    def used(check: Callable[..., Any], name: str, value: Any, *args: Any) -> Any:
        if value is None:
            readers, what = _USERS[name]
            if control not in readers:
                return None
            raise TypeError(f"Expected `{name}` to be {what} with learning_rate_control "
                            f"{control!r}, which reads it (RETURNN keeps the None and fails "
                            f"on it), got None")
        return check(name, value, *args)
    return used


def _rates(value: Any) -> Any:
    """``learning_rates`` given as a str: RETURNN evaluates it and needs a dict; trainop reads
    the literal (never evaluated as code)."""
    if not isinstance(value, str):
        return value
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        parsed = None
    if not isinstance(parsed, dict):
        raise ValueError(f"Expected `learning_rates` as a str to be a dict literal "
                         f"{{epoch: rate}} (RETURNN accepts no other str), got {value!r}")
    return parsed


def _count(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"Expected `{name}` to be an int >= {low}, got {value!r}")
    return value


class LearningRateControl:
    """RETURNN's learning-rate control (see the module doc), built from a config's keys.

    Args:
        config: the Updater's config: a dict, or a path to a YAML/JSON/RETURNN config file
            (parsed, never executed); keys other than the learning-rate control's are ignored.

    Example:
        >>> import trainop
        >>> control = trainop.LearningRateControl({"learning_rate": 1.0,
        ...                                        "learning_rate_control": "newbob_rel"})
        >>> for epoch, score in enumerate([3.0, 2.5, 2.49], start=1):
        ...     lr = control.get_learning_rate_for_epoch(epoch)
        ...     control.set_epoch_error(epoch, {"dev_score": score})
        >>> control.get_learning_rate_for_epoch(4)  # 2.49 vs 2.5: less than 1% better
        0.5
    """

    def __init__(self, config: Any) -> None:
        from trainop.training.returnn.options import read_lr_control

        get = read_lr_control(config).get
        self.control = get("learning_rate_control", "constant")
        if self.control not in CONTROLS:
            raise ValueError(f"Expected `learning_rate_control` to be one of {list(CONTROLS)}, "
                             f"got {self.control!r}")
        used = _used(self.control)
        self.default_learning_rate = _rate("learning_rate", get("learning_rate", 1.0))
        self.min_learning_rate = used(_rate, "min_learning_rate", get("min_learning_rate", 0.0))
        self.error_measure = get("learning_rate_control_error_measure")
        if self.error_measure is not None and not isinstance(self.error_measure, (str, list)):
            raise TypeError(f"Expected `learning_rate_control_error_measure` to be a str, a "
                            f"list of str or None, got {describe(self.error_measure)}")
        self.relative_to_lr = bool(get("learning_rate_control_relative_error_relative_lr",
                                       False))
        self.min_epochs_per_new_lr = _count(
            "learning_rate_control_min_num_epochs_per_new_lr",
            get("learning_rate_control_min_num_epochs_per_new_lr", 0), 0)
        self.div_by_old = bool(get("newbob_relative_error_div_by_old", False))
        self.decay = _factor("newbob_learning_rate_decay",
                             get("learning_rate_decay", get("newbob_learning_rate_decay", 0.5)))
        self.growth = _factor("newbob_learning_rate_growth",
                              get("learning_rate_growth", get("newbob_learning_rate_growth",
                                                              1.0)))
        self.relative_threshold = used(_number, "newbob_relative_error_threshold",
                                       get("newbob_relative_error_threshold", -0.01))
        self.error_threshold = used(_number, "newbob_error_threshold",
                                    get("newbob_error_threshold", -0.01))
        self.grow_threshold = used(_number, "newbob_relative_error_grow_threshold",
                                   get("newbob_relative_error_grow_threshold",
                                       get("newbob_relative_error_threshold", -0.01)))
        self.multi_num_epochs = used(_count, "newbob_multi_num_epochs",
                                     get("newbob_multi_num_epochs", 5), 1)
        self.multi_interval = used(_count, "newbob_multi_update_interval",
                                   get("newbob_multi_update_interval",
                                       get("newbob_multi_num_epochs", 5)), 1)
        self.epoch_data: dict[int, EpochData] = {}
        rates = _rates(get("learning_rates"))
        if rates:
            if isinstance(rates, (list, tuple)):
                rates = {i + 1: v for i, v in enumerate(rates)}
            if not isinstance(rates, dict):
                raise TypeError(f"Expected `learning_rates` to be a list (epochs 1, 2, ...) or "
                                f"a dict epoch -> rate, got {describe(rates)}")
            for epoch, value in rates.items():
                self._set_default(_count("learning_rates epoch", epoch, 1),
                                  _rate(f"learning_rates[{epoch}]", value))

    # ------------------------------------------------------------------ the rate of an epoch
    def get_learning_rate_for_epoch(self, epoch: int) -> float:
        """The epoch's rate (computed on first request from the epochs before, then kept)."""
        _count("epoch", epoch, 1)
        if epoch in self.epoch_data:
            return self.epoch_data[epoch].learning_rate
        rate = self._new_rate(epoch)
        self._set_default(epoch, rate)
        return self.epoch_data[epoch].learning_rate

    def apply(self, updater: Any, epoch: int) -> float:
        """``updater.set_learning_rate(rate of epoch)``; returns the rate."""
        rate = self.get_learning_rate_for_epoch(epoch)
        updater.set_learning_rate(rate)
        return rate

    def _set_default(self, epoch: int, rate: float) -> None:
        data = self.epoch_data.get(epoch)
        if data is None:
            self.epoch_data[epoch] = EpochData(rate)
        elif not data.learning_rate:
            data.learning_rate = rate

    def _previous(self, epoch: int) -> list[int]:
        return sorted(e for e in self.epoch_data if e < epoch)

    def _new_rate(self, epoch: int) -> float:
        if self.min_epochs_per_new_lr > 1:
            last = [self.epoch_data[e].learning_rate
                    for e in self._previous(epoch)[-self.min_epochs_per_new_lr:]]
            if len(set(last)) >= 2 or 0 < len(last) < self.min_epochs_per_new_lr:
                return last[-1]
        if self.control == "constant":
            return self._most_recent(epoch)
        if self.control == "newbob_multi_epoch":
            return self._multi_epoch(epoch)
        previous = self._previous(epoch)
        if not previous or self.epoch_data[previous[-1]].learning_rate is None:
            return self.default_learning_rate
        rate = self.epoch_data[previous[-1]].learning_rate
        if len(previous) < 2:
            return rate
        if self.control in _RELATIVE:
            change = self._relative_error(previous[-2], previous[-1])
            threshold = self.relative_threshold
        else:
            change = self._absolute_change(previous[-2], previous[-1])
            threshold = self.error_threshold
        if change is None:
            return rate
        return self._decay_or_grow(rate, decay=change > threshold, grow=change <= threshold)

    def _most_recent(self, epoch: int, include: bool = False) -> float:
        for e in sorted(self.epoch_data, reverse=True):
            if e > epoch or (e == epoch and not include):
                continue
            if self.epoch_data[e].learning_rate is not None:
                return self.epoch_data[e].learning_rate
        return self.default_learning_rate

    def _multi_epoch(self, epoch: int) -> float:
        rate = self._most_recent(epoch)
        if self.multi_interval > 1 and epoch % self.multi_interval != 1:
            return rate
        epochs = self._previous(epoch)[-(self.multi_num_epochs + 1):]
        if len(epochs) <= 1:
            return rate
        errors = [self._relative_error(a, b) for a, b in zip(epochs, epochs[1:], strict=False)]
        if any(e is None for e in errors):
            return rate
        mean = float(numpy.mean(errors))  # numpy's summation, as RETURNN (>= 8 terms differ)
        return self._decay_or_grow(rate, decay=mean > self.relative_threshold,
                                   grow=mean < self.grow_threshold)

    def _decay_or_grow(self, rate: float, *, decay: bool, grow: bool) -> float:
        if decay:
            return max(_update("newbob_learning_rate_decay", rate, self.decay),
                       self.min_learning_rate)
        if grow:
            return _update("newbob_learning_rate_growth", rate, self.growth)
        return rate

    # ------------------------------------------------------------------ scores
    def set_epoch_error(self, epoch: int, error: dict[str, Any]) -> None:
        """The epoch's scores (``{"dev_score": 2.5, "train_score": 2.7}``; a nested dict
        ``{"dev_score": {"output/a": x, "output/b": y}}`` becomes ``dev_score_a``, ...)."""
        _count("epoch", epoch, 1)
        if not isinstance(error, dict):
            raise TypeError(f"Expected `error` to be a dict of scores, got {describe(error)}")
        flat: dict[str, float] = {}
        for key, value in error.items():
            if isinstance(value, dict):
                if len(value) == 1:
                    flat[key] = next(iter(value.values()))
                    continue
                for sub, v in value.items():
                    flat[f"{key}_{sub.split(':', 1)[1] if ':' in sub else sub}"] = v
            else:
                flat[key] = value
        scores = {k: _number(f"error[{k!r}]", v, nan=True) for k, v in flat.items()}
        self.get_learning_rate_for_epoch(epoch)  # the rate of a scored epoch is fixed
        self.epoch_data[epoch].error.update(scores)

    def error_key(self, epoch: int) -> str | None:
        """The score key a decision reads for ``epoch`` (RETURNN's search order)."""
        data = self.epoch_data.get(epoch)
        if data is None:
            measure = self.error_measure
            return measure[0] if isinstance(measure, list) else measure
        if not data.error:
            return None
        measures = self.error_measure if isinstance(self.error_measure, list) else (
            [] if self.error_measure is None else [self.error_measure])
        keys = [k for m in measures for k in (m, m + "_output")] + ["dev_score",
                                                                   "dev_score_output"]
        found = next((k for k in keys if k in data.error), None)
        if found is not None:
            return found
        names = sorted(data.error)
        for test in (lambda k: k == "dev_score_output/output"
                     or k.startswith("dev_score_output/output_"),
                     lambda k: k.startswith("dev_score_output/"),
                     lambda k: k.startswith("dev_")):
            found = next((k for k in names if test(k)), None)
            if found is not None:
                return found
        return next((k for k in ("train_score", "train_score_output") if k in data.error),
                    min(data.error))

    def _score(self, epoch: int) -> tuple[str | None, float | None]:
        data = self.epoch_data.get(epoch)
        if data is None or not data.error:
            return None, None
        key = self.error_key(epoch)
        if key not in data.error:
            raise ValueError(f"Expected the score {key!r} in epoch {epoch}'s scores "
                             f"{sorted(data.error)}: set `learning_rate_control_error_measure`")
        return key, data.error[key]

    def _relative_error(self, old_epoch: int, new_epoch: int) -> float | None:
        (old_key, old), (new_key, new) = self._score(old_epoch), self._score(new_epoch)
        if old is None or new is None or old_key != new_key:
            return None
        denominator = abs(old if self.div_by_old else new)
        if denominator == 0:
            raise ValueError(f"The relative error of epoch {new_epoch} to epoch {old_epoch} is "
                             f"undefined: the {new_key!r} score it divides by is 0 (RETURNN "
                             f"raises ZeroDivisionError)")
        relative = (new - old) / denominator
        if self.relative_to_lr:
            rate = self._most_recent(new_epoch, include=True)
            if rate > 0:
                relative /= rate / self.default_learning_rate
        return relative

    def _absolute_change(self, old_epoch: int, new_epoch: int) -> float | None:
        (old_key, old), (new_key, new) = self._score(old_epoch), self._score(new_epoch)
        if old is None or new is None or old_key != new_key:
            return None
        return new - old

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The per-epoch history (rates and scores); loads with ``weights_only=True``."""
        return {"control": self.control,
                "epochs": {e: {"learning_rate": d.learning_rate, "error": dict(d.error)}
                           for e, d in self.epoch_data.items()}}

    def load_state_dict(self, state: Any) -> None:
        """Validated first, then loaded (a rejected state changes nothing)."""
        if not isinstance(state, dict) or set(state) != {"control", "epochs"}:
            raise ValueError(f"Expected a learning-rate control state with keys ['control', "
                             f"'epochs'], got {describe(state)}")
        if state["control"] != self.control:
            raise ValueError(f"Expected a state of the {self.control!r} control, got "
                             f"{state['control']!r}")
        epochs = state["epochs"]
        if not isinstance(epochs, dict):
            raise TypeError(f"Expected `epochs` to be a dict, got {describe(epochs)}")
        loaded = {}
        for epoch, data in epochs.items():
            _count("epoch", epoch, 1)
            if not isinstance(data, dict) or set(data) != {"learning_rate", "error"}:
                raise ValueError(f"Expected epoch {epoch} as {{'learning_rate', 'error'}}, got "
                                 f"{describe(data)}")
            rate = data["learning_rate"]
            rate = None if rate is None else _number(f"epoch {epoch} learning_rate", rate)
            if not isinstance(data["error"], dict):
                raise TypeError(f"Expected epoch {epoch}'s `error` to be a dict, got "
                                f"{describe(data['error'])}")
            loaded[epoch] = EpochData(rate, {k: _number(f"epoch {epoch} error[{k!r}]", v, True)
                                            for k, v in data["error"].items()})
        self.epoch_data = loaded


def _update(name: str, rate: float, factor: float | Callable[[float], float] | None) -> float:
    """``rate * factor``, or ``factor(rate)`` for a callable (its result checked); ``rate`` for
    None (RETURNN's "no update")."""
    if factor is None:
        return rate
    if not callable(factor):
        return rate * factor
    return _rate(f"{name}({rate!r})", factor(rate))
