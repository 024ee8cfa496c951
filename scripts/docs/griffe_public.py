"""Griffe extension for the site's reference: no private name on a public page.

- A base class whose name starts with ``_`` (``ExpDecay(_Decay)``) is shown as its nearest
  public ancestor (``Policy``).
- A default written in the source as a private constant (``dtype=_F32``) is shown as its value
  (``torch.float32``), read from the imported object (constructors, inherited ones included,
  and module functions).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import griffe

sys.path.insert(0, str(Path(__file__).parent))
from griffe_args import classes, runtime_class  # noqa: E402


def _private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__")
               for part in name.split("."))


def _public_bases(runtime) -> list[str]:
    """Each base class, or its nearest ancestor whose name is public."""
    shown = []
    for base in runtime.__bases__:
        public = next((a for a in base.__mro__ if not a.__qualname__.startswith("_")), object)
        if public.__qualname__ not in shown:
            shown.append(public.__qualname__)
    return shown


def _show_defaults(func: griffe.Function, runtime_func) -> None:
    try:
        params = inspect.signature(runtime_func).parameters
    except (TypeError, ValueError):
        return
    for param in func.parameters:
        if param.default is not None and _private(str(param.default)) and param.name in params:
            value = params[param.name].default
            if value is not inspect.Parameter.empty:
                param.default = repr(value)


def _functions(module: griffe.Module):
    for member in module.members.values():
        if member.is_alias:
            continue
        if member.is_module:
            yield from _functions(member)
        elif member.is_function:
            yield member


def _runtime_function(func: griffe.Function):
    try:
        return getattr(importlib.import_module(func.module.path), func.name)
    except (ImportError, AttributeError):
        return None


class PublicNames(griffe.Extension):
    """Rewrites private bases and private-constant defaults once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        for cls in classes(pkg):
            runtime = runtime_class(cls)
            if runtime is None:
                continue
            if any(_private(str(b)) for b in cls.bases):
                cls.bases = _public_bases(runtime)
            init = cls.all_members.get("__init__")  # inherited too: the one the page shows
            if init is not None and not init.is_alias and init.is_function:
                _show_defaults(init, runtime.__init__)
        for func in _functions(pkg):
            runtime = _runtime_function(func)
            if runtime is not None:
                _show_defaults(func, runtime)
