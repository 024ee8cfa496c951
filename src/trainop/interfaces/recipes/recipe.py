"""``Recipe``: a loaded recipe, its options under the source system's names, and ``build``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from trainop.configs import Unresolved
from trainop.interfaces.recipes import openseq2seq, returnn

__all__ = ["Recipe"]


@dataclass
class Recipe:
    """A training recipe read by ``trainop.load_recipe`` (never executed).

    Attributes:
        format: ``"openseq2seq"``, ``"returnn"`` or ``"trainop"``.
        options: the training options under the source system's names, its defaults applied
            (OpenSeq2Seq: ``optimizer``, ``optimizer_params``, ``lr_policy``, ...; RETURNN:
            ``optimizer`` resolved, ``learning_rate``, ``optimizer_epsilon``,
            ``gradient_clip*``, ...). Editable before ``build`` (e.g. to supply an option the
            file computes with code).
        optimizer_class: the trainop optimizer class the recipe trains with (a
            ``torch.optim`` class for RETURNN's PyTorch-backend optimizers); ``None`` while
            the optimizer itself needs code.
        unresolved: dotted key -> ``Unresolved`` (``file:line`` and why) for every value
            of the file that needs code: training options (``build`` refuses while one is
            still unresolved in ``options``) and the rest (network, initializers: ignored).
        builds: ``"TrainOp"`` (OpenSeq2Seq's ``optimize_loss``) or ``"Updater"``.
        source: the file path, or ``"<dict>"``.
    """

    format: str
    options: dict[str, Any]
    optimizer_class: type | None
    unresolved: dict[str, Unresolved] = field(default_factory=dict)
    builds: str = "Updater"
    source: str = "<dict>"

    def pending(self) -> dict[str, Unresolved]:
        """The unresolved training options still in ``options`` (not yet set from Python)."""
        pending = {}
        for key, where in self.unresolved.items():
            head, _, sub = key.partition(".")
            value = self.options.get(head)
            if sub and isinstance(value, dict):
                value = value.get(sub)
            if isinstance(value, Unresolved):
                pending[key] = where
        return pending

    def build(self, model: torch.nn.Module, loss: Any = None, *, num_steps: int | None = None,
              steps_per_epoch: int | None = None, summary_writer: Any = None) -> Any:
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

        Raises:
            ValueError: an option still needs code (``file:line`` named), or the run length
                is needed and unknown.
        """
        pending = self.pending()
        if pending:
            lines = "; ".join(f"{k} at {v}" for k, v in pending.items())
            raise ValueError(f"Expected every training option to be data, but these need code: "
                             f"{lines}; set them in recipe.options from Python before build")
        builder = openseq2seq.build if self.builds == "TrainOp" else returnn.build
        return builder(self.options, model, loss, num_steps=num_steps,
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
        return LearningRateControl({k: self.options[k] for k in keys if k in self.options})

    def __repr__(self) -> str:
        cls = getattr(self.optimizer_class, "__name__", None)
        return (f"Recipe(format={self.format!r}, source={self.source!r}, optimizer_class="
                f"{cls}, builds={self.builds}, unresolved={sorted(self.unresolved)})")
