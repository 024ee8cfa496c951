"""``Recipe``: a loaded recipe, its options under the source system's names, and ``build``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from trainop.configs import Unresolved, closest_names
from trainop.interfaces.recipes import openseq2seq, returnn
from trainop.training.returnn.options import DEFAULTS as RETURNN_DEFAULTS
from trainop.training.returnn.options import LR_CONTROL_KEYS

__all__ = ["Recipe", "without_unresolved"]


def without_unresolved(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without the values that need code (at the top level and in nested dicts):
    those are listed in ``Recipe.unresolved``, never half-resolved in ``options``."""
    out = {}
    for key, value in options.items():
        if isinstance(value, Unresolved):
            continue
        out[key] = without_unresolved(value) if isinstance(value, dict) else value
    return out


@dataclass
class Recipe:
    """A training recipe read by ``trainop.load_recipe`` (never executed).

    Attributes:
        format: ``"openseq2seq"``, ``"returnn"`` or ``"trainop"``.
        options: the training options under the source system's names, its defaults applied
            (OpenSeq2Seq: ``optimizer``, ``optimizer_params``, ``lr_policy``, ...; RETURNN:
            ``optimizer`` resolved, ``learning_rate``, ``optimizer_epsilon``,
            ``gradient_clip*``, ...). A value that needs code is never here (it is in
            ``unresolved``; its key is absent). Editable before ``build``; or give such values
            to ``build(..., overrides={...})``.
        optimizer_class: the trainop optimizer class the recipe trains with (a
            ``torch.optim`` class for RETURNN's PyTorch-backend optimizers); ``None`` while
            the optimizer itself needs code.
        unresolved: dotted key -> ``Unresolved`` (``file:line`` and why) for every value
            of the file that needs code: training options (``pending()``; ``build`` refuses
            until they are supplied) and the rest (network, initializers: ignored).
        builds: ``"TrainOp"`` (OpenSeq2Seq's ``optimize_loss``) or ``"Updater"``.
        source: the file path, or ``"<dict>"``.
        notes: one line per option the recipe names that trainop lists rather than uses:
            a key that looks like a misspelt training option ("did you mean"), a training
            option trainop does not implement (RETURNN's Theano-era ``update_clip``, ...), a
            legacy flag (``adam = True``). ``trainop check-config`` and ``trainop train``
            print them.
        ignored: key -> why, for the keys of an OpenSeq2Seq config that trainop knows from
            upstream and does not need (the model, the data layer, logging, devices);
            ``check-config`` lists them. Any other unknown key is an error at load.
        settings: one line per ``--set`` of the command, saying where it took effect
            (``interfaces.recipes.settings``).
    """

    format: str
    options: dict[str, Any]
    optimizer_class: type | None
    unresolved: dict[str, Unresolved] = field(default_factory=dict)
    builds: str = "Updater"
    source: str = "<dict>"
    notes: list[str] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)
    settings: list[str] = field(default_factory=list)

    def training_keys(self) -> tuple[str, ...]:
        """The option names this recipe's training object reads."""
        if self.builds == "TrainOp":
            return tuple(openseq2seq.DEFAULTS)
        return (*RETURNN_DEFAULTS, *LR_CONTROL_KEYS)

    def pending(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Unresolved]:
        """The training options that need code and are not supplied yet (neither set in
        ``options`` nor given in ``overrides``), by dotted key."""
        return _pending(self.unresolved, self.training_keys(),
                        self._with(overrides) if overrides else self.options)

    def _with(self, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
        """``options`` with ``overrides`` (``"key"`` or ``"key.sub"`` -> value) applied."""
        options = dict(self.options)
        if overrides is None:
            return options
        if not isinstance(overrides, Mapping):
            raise TypeError(f"Expected `overrides` to be a dict of option name -> value, got "
                            f"{type(overrides).__name__}")
        keys = self.training_keys()
        for key, value in overrides.items():
            head, _, sub = str(key).partition(".")
            if head not in keys:
                hints = closest_names(head, keys)
                raise ValueError(f"Unknown option {key!r} in `overrides` (options of a "
                                 f"{self.builds} recipe)" + (
                                     f"; did you mean {', '.join(map(repr, hints))}?"
                                     if hints else ""))
            if sub:
                nested = options.get(head)
                options[head] = {**(nested if isinstance(nested, Mapping) else {}), sub: value}
            else:
                options[head] = value
        return options

    def build(self, model: torch.nn.Module, loss: Any = None, *, num_steps: int | None = None,
              steps_per_epoch: int | None = None, summary_writer: Any = None,
              overrides: Mapping[str, Any] | None = None) -> Any:
        """The training object: a ``TrainOp`` (OpenSeq2Seq, via ``optimize_loss``) or an
        ``Updater`` (RETURNN, trainop's Updater form).

        Args:
            model: the ``torch.nn.Module`` to train.
            loss: for a TrainOp (an Updater takes the loss at each ``step``):
                ``loss(*args, **kwargs) -> 0-dim model loss`` (default: ``model(*args,
                **kwargs)`` returns it); the regularization loss is added.
            num_steps: for a TrainOp: the run length in steps (default: the config's
                ``max_steps``), an int in [1, inf); fills ``decay_steps``/``begin_decay_at``.
            steps_per_epoch: for a TrainOp: with a config that runs ``num_epochs``, an int
                in [1, inf); fills ``decay_steps`` and ``piecewise_constant``'s
                ``steps_per_epoch``.
            summary_writer: a SummaryWriter or a log directory (TensorBoard summaries).
            overrides: keyword-only; option name (``"dynamic_learning_rate"``,
                ``"learning_rates"``, ``"lr_policy_params.decay_steps"``) -> value, applied
                to a copy of ``options`` for this build: how the values the file computes
                with code are supplied from Python.

        Raises:
            ValueError: an option still needs code (``file:line`` named), an override names
                no option, or the run length is needed and unknown.
        """
        options = self._with(overrides)
        pending = _pending(self.unresolved, self.training_keys(), options)
        if pending:
            lines = "; ".join(f"{k} at {v}" for k, v in pending.items())
            raise ValueError(f"Expected every training option to be data, but these need code: "
                             f"{lines}; supply them from Python: recipe.build(model, ..., "
                             f"overrides={{{', '.join(repr(k) for k in pending)}: ...}}), or "
                             f"from the command line: "
                             f"{' '.join(f'--set {k}=VALUE' for k in pending)}")
        builder = openseq2seq.build if self.builds == "TrainOp" else returnn.build
        return builder(options, model, loss, num_steps=num_steps,
                       steps_per_epoch=steps_per_epoch, summary_writer=summary_writer)

    def learning_rate_control(self) -> Any:
        """RETURNN's per-epoch learning-rate control of an Updater recipe: a
        ``trainop.LearningRateControl`` from ``learning_rate`` and the recipe's
        ``learning_rates``/``learning_rate_control``/``newbob_*`` options; drive the built
        ``Updater`` with ``control.apply(updater, epoch)`` once per epoch."""
        from trainop.training.returnn.lr_control import LearningRateControl
        from trainop.training.returnn.options import LR_CONTROL_KEYS

        if self.builds != "Updater":
            raise ValueError(f"Expected an Updater recipe (RETURNN or trainop's Updater form) "
                             f"for learning_rate_control(), got a {self.builds} recipe")
        keys = ("learning_rate", *LR_CONTROL_KEYS)
        pending = [k for k in self.pending() if k.partition(".")[0] in keys]
        if pending:
            raise ValueError(f"Expected the learning-rate options to be data, but these need "
                             f"code: {pending}; set them in recipe.options from Python")
        return LearningRateControl({k: self.options[k] for k in keys if k in self.options})

    def __repr__(self) -> str:
        cls = getattr(self.optimizer_class, "__name__", None)
        return (f"Recipe(format={self.format!r}, source={self.source!r}, optimizer_class="
                f"{cls}, builds={self.builds}, unresolved={sorted(self.unresolved)})")


def _pending(unresolved: Mapping[str, Unresolved], keys: tuple[str, ...],
             options: Mapping[str, Any]) -> dict[str, Unresolved]:
    """The unresolved training options (head of the dotted key in ``keys``) that ``options``
    does not supply."""
    out = {}
    for key, where in unresolved.items():
        head, _, sub = key.partition(".")
        if head not in keys or head in NOT_READ:
            continue
        value = options.get(head, _ABSENT)
        if sub and isinstance(value, Mapping):
            value = value.get(sub, _ABSENT)
        if value is _ABSENT or isinstance(value, Unresolved):
            out[key] = where
    return out


_ABSENT = object()

#: options a recipe may name that trainop neither reads nor writes (RETURNN's learning-rate
#: history file): a value of them that needs code does not hold up ``build``.
NOT_READ = ("learning_rate_file",)
