"""The training-step layer: what a training loop calls, composed from the layers below.

- ``optimize_loss`` / ``TrainOp``: OpenSeq2Seq's training step (``docs/training.md``), on the
  shared core ``TrainingStep`` (accumulation, distributed averaging, counters, checkpoints).
- ``Updater``: RETURNN's config-driven updater (``docs/updater.md``), on the same core.
- regularizers (``l2_regularizer``, ``apply_regularization``, ``get_regularization_loss``).
- ``trainop.training.numerics``: find where the first NaN or Inf of a run comes from
  (``check_numerics``, ``add_check_numerics_ops``, ``NumericsError``).
"""

from trainop.training.numerics import (
    NumericsChecker,
    NumericsError,
    TensorStats,
    add_check_numerics_ops,
    check_numerics,
)
from trainop.training.optimize_loss import OPTIMIZER_CLS_NAMES, TrainOp, optimize_loss
from trainop.training.regularization import (
    apply_regularization,
    get_regularization_loss,
    l1_regularizer,
    l2_regularizer,
)
from trainop.training.returnn import LearningRateControl, Updater
from trainop.training.step import TrainingStep
from trainop.training.summaries import DEFAULT_SUMMARIES, OPTIMIZER_SUMMARIES

__all__ = [
    "DEFAULT_SUMMARIES",
    "OPTIMIZER_CLS_NAMES",
    "OPTIMIZER_SUMMARIES",
    "NumericsChecker",
    "NumericsError",
    "TensorStats",
    "TrainOp",
    "TrainingStep",
    "LearningRateControl",
    "Updater",
    "add_check_numerics_ops",
    "apply_regularization",
    "check_numerics",
    "get_regularization_loss",
    "l1_regularizer",
    "l2_regularizer",
    "optimize_loss",
]
