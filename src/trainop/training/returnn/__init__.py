"""RETURNN's config-driven ``Updater`` and its per-epoch learning-rate control on PyTorch
(``docs/updater.md``)."""

from trainop.training.returnn.lr_control import LearningRateControl
from trainop.training.returnn.updater import Updater

__all__ = ["LearningRateControl", "Updater"]
