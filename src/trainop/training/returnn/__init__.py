"""RETURNN's config-driven ``Updater`` on PyTorch (``docs/updater.md``)."""

from trainop.training.returnn.updater import Updater

__all__ = ["Updater"]
