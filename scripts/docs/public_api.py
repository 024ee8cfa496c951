"""The public surface the reference documents: the modules and, per module, its ``__all__``.

Shared by the site's reference generator (``gen_reference.py``) and the tests that check every
public name has a docstring (``tests/test_docs_site.py``)."""

from __future__ import annotations

import importlib

#: (module, reference page, one line saying what it holds), in the order of the reference nav.
PUBLIC_MODULES = (
    ("trainop", "trainop", "the optimizers, the training step, recipes and their re-exports"),
    ("trainop.schedules", "schedules", "learning-rate policies"),
    ("trainop.schedules.openseq2seq", "schedules-openseq2seq", "OpenSeq2Seq's policies"),
    ("trainop.schedules.tf1", "schedules-tf1", "TensorFlow 1's decay functions"),
    ("trainop.processing", "processing", "gradient processing, loss scaling, mixed precision"),
    ("trainop.training", "training", "optimize_loss, the Updater, numerics checks"),
    ("trainop.checkpoints", "checkpoints", "TF1 checkpoints in and out, torch.optim state"),
    ("trainop.returnn", "returnn", "trainop inside RETURNN's torch engine"),
)


def public_names(module_name: str) -> list[str]:
    """The module's ``__all__`` (every public module declares one)."""
    return list(importlib.import_module(module_name).__all__)


def is_module(module_name: str, name: str) -> bool:
    """Whether ``module.name`` is a submodule (documented on its own page, not inline)."""
    import types

    return isinstance(getattr(importlib.import_module(module_name), name), types.ModuleType)


def shadowed_home(module_name: str, name: str) -> str | None:
    """Where ``module.name`` is defined, when a module of the same name would hide it from the
    reference (``trainop.optimize_loss`` lives in ``trainop.training.optimize_loss``, which
    the docs' loader reaches first): that full path, else ``None``."""
    value = getattr(importlib.import_module(module_name), name)
    home = getattr(value, "__module__", None) or ""
    if callable(value) and home.rsplit(".", 1)[-1] == getattr(value, "__name__", None):
        return f"{home}.{value.__qualname__}"
    return None
