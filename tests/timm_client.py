"""timm (PyTorch Image Models) as a client of trainop's optimizers: ``import_timm()``.

timm's optimizers and schedulers (``timm.optim``: ``Lookahead``, ``create_optimizer_v2``;
``timm.scheduler``) use torch only, but ``import timm`` runs its package ``__init__``, which
imports its model zoo and data pipeline, and those import torchvision at module level.
PyPI's torchvision builds for Linux x86-64 are linked against torch's CUDA libraries: beside
the CPU torch of this project's venv (and CI's) their native part does not load and
``import torchvision`` raises (which also breaks ``transformers.Trainer``'s import). So
``scripts/setup.sh`` installs timm with ``--no-deps`` (its other requirements, huggingface_hub,
safetensors and pyyaml, come with the test extra) and no torchvision, and ``import_timm``
imports timm with placeholder ``torchvision`` modules in place for the duration of that import
only (classes and attributes that the model zoo's module-level code names and never calls),
then removes them. Where a working torchvision is installed, timm imports as it is.

A test module calls ``timm = import_timm()`` at its top: it skips, saying why, only when timm
itself is not installed, and fails instead in CI (``CI`` set), where ``scripts/setup.sh``
installs it from pyproject.toml's ``[tool.trainop] test-no-deps``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

import pytest

_PREFIX = "torchvision"


class _PlaceholderType(type):
    """A class whose every attribute is another placeholder class
    (``InterpolationMode.NEAREST``)."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _PlaceholderType(name, (), {})


class _PlaceholderModule(types.ModuleType):
    """A module whose every name is a placeholder class (``from torchvision.ops.misc import
    FrozenBatchNorm2d``)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _PlaceholderType(name, (), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds every ``torchvision`` module as an empty placeholder package."""

    def find_spec(self, fullname, path, target=None):
        if fullname == _PREFIX or fullname.startswith(_PREFIX + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


def _forget(prefix: str) -> None:
    for name in [n for n in sys.modules if n == prefix or n.startswith(prefix + ".")]:
        del sys.modules[name]


def _torchvision_imports() -> bool:
    if importlib.util.find_spec(_PREFIX) is None:
        return False
    try:
        importlib.import_module(_PREFIX)
    except Exception:  # a CUDA build beside a CPU torch: RuntimeError, OSError
        _forget(_PREFIX)
        return False
    return True


def import_timm() -> types.ModuleType:
    """timm with ``timm.optim`` and ``timm.scheduler`` imported (see the module docstring)."""
    if "timm.optim" in sys.modules and "timm.scheduler" in sys.modules:
        return sys.modules["timm"]
    if importlib.util.find_spec("timm") is None:
        if os.environ.get("CI"):
            pytest.fail("timm is not installed: scripts/setup.sh installs it (pyproject.toml's "
                        "[tool.trainop] test-no-deps)", pytrace=False)
        pytest.skip("timm is not installed: scripts/setup.sh installs it "
                    "(pyproject.toml's [tool.trainop] test-no-deps)", allow_module_level=True)
    if _torchvision_imports():
        importlib.import_module("timm.optim")
        importlib.import_module("timm.scheduler")
        return sys.modules["timm"]
    finder = _PlaceholderFinder()
    sys.meta_path.insert(0, finder)
    try:
        importlib.import_module("timm.optim")
        importlib.import_module("timm.scheduler")
    finally:
        sys.meta_path.remove(finder)
        _forget(_PREFIX)
    return sys.modules["timm"]
