"""The reference's argument tables, as the site renders them (griffe with the site's own
extensions, scripts/docs/griffe_*.py): every public class a user constructs has exactly one row
per constructor argument, in the signature's order (Python's ``inspect.signature``, so the
torch-style ``lr`` counts), each row typed; the default comes from the signature."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "docs"))
from public_api import PUBLIC_MODULES, is_module, public_names  # noqa: E402

griffe = pytest.importorskip("griffe")

#: Classes trainop builds and hands back (results, records, errors, engine hooks): a caller
#: reads their fields and never constructs them, so their docs list the fields instead.
BUILT_BY_TRAINOP = {
    "trainop.StepResult", "trainop.TrainOp", "trainop.Recipe", "trainop.RecipeError",
    "trainop.NumericsError", "trainop.FlatLayout", "trainop.Gate", "trainop.SlotSpec",
    "trainop.training.TensorStats", "trainop.checkpoints.Layout",
    "trainop.checkpoints.LoadReport", "trainop.checkpoints.TFCheckpoint",
    "trainop.returnn.EngineUpdater",
}


@pytest.fixture(scope="module")
def loaded():
    extensions = griffe.load_extensions(f"{ROOT}/scripts/docs/griffe_rst.py:ReSTToMarkdown",
                                        f"{ROOT}/scripts/docs/griffe_args.py:ArgsTable")
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "src")], extensions=extensions,
                                 docstring_parser="google")
    loader.load("trainop")
    loader.resolve_aliases(implicit=False, external=None)
    return loader.modules_collection


def _public_classes():
    seen = {}
    for module, _, _ in PUBLIC_MODULES:
        for name in public_names(module):
            value = getattr(importlib.import_module(module), name)
            if not is_module(module, name) and inspect.isclass(value) and value not in seen:
                seen[value] = f"{module}.{name}"
    return seen


def _signature(cls) -> list[inspect.Parameter]:
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # exceptions without an __init__ of their own
        return []
    return [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def test_every_constructed_class_has_one_typed_row_per_argument(loaded):
    wrong = []
    for cls, path in _public_classes().items():
        params = _signature(cls)
        if path in BUILT_BY_TRAINOP or not params:
            continue
        module, _, name = path.rpartition(".")
        found = loaded.get_member(module)[name]
        found = found.final_target if found.is_alias else found
        sections = found.docstring.parse("google", warnings=False) if found.docstring else []
        rows = [p for s in sections if s.kind.value == "parameters" for p in s.value]
        names = [p.name for p in params]
        if [r.name for r in rows] != names:
            wrong.append(f"{path}: signature {names}, rows {[r.name for r in rows]}")
            continue
        untyped = [r.name for r in rows if not r.annotation]
        if untyped:
            wrong.append(f"{path}: rows without a type: {untyped}")
        defaults = {p.name: p.default for p in params}
        missing = [r.name for r in rows
                   if defaults[r.name] is not inspect.Parameter.empty and r.default is None]
        if missing:
            wrong.append(f"{path}: rows whose default is not shown: {missing}")
    assert wrong == []


def test_built_classes_are_public_classes():
    assert set(_public_classes().values()) >= BUILT_BY_TRAINOP
