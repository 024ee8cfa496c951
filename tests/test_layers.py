"""#16's architecture point, read from the source: data flows one way (contract -> plan ->
dispatch -> kernels), a lower layer never imports a higher one, and trainop's C functions are
looked up only by the modules that check every tensor at the one boundary first."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trainop

ROOT = Path(trainop.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every ``trainop`` module a file imports (top level or inside functions)."""
    out = set()
    package = _module(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            # a relative import (``from .._x import y``) counts as the module it names
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m == "trainop" or m.startswith("trainop.")}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = sorted(ROOT.rglob("*.py"))

#: The design's layers as folders, and the thin public entry modules beside them.
LAYER_FOLDERS = {"algorithms", "kernels", "contract", "optimizers", "processing", "schedules",
                 "training", "configs", "interfaces", "bench"}
PUBLIC_ENTRY_MODULES: set[str] = {"checkpoints.py", "returnn.py"}

#: layer (a package prefix) -> the trainop modules it may import (prefixes).
ALLOWED = {
    "trainop.algorithms": ("trainop.algorithms",),
    "trainop.kernels": ("trainop.kernels", "trainop.algorithms"),
    "trainop.schedules": ("trainop.schedules", "trainop.contract.validation",
                          "trainop.contract.ranges"),
    # The contract layer (Optimizer, slots, state, checkpoints, plans) sits on the kernels; it
    # reaches the schedules only to evaluate a policy given as a hyperparameter.
    "trainop.contract": ("trainop.contract", "trainop.kernels", "trainop.algorithms",
                         "trainop.schedules"),
}


@pytest.mark.parametrize("layer", list(ALLOWED))
def test_a_lower_layer_imports_no_higher_one(layer):
    wrong = {}
    for path in FILES:
        module = _module(path)
        if module == layer or module.startswith(layer + "."):
            bad = {m for m in _imports(path)
                   if not any(m == a or m.startswith(a + ".") for a in ALLOWED[layer])}
            if bad:
                wrong[module] = sorted(bad)
    assert wrong == {}


def test_nothing_below_flat_imports_it():
    users = {_module(p) for p in FILES if "trainop.contract.flat" in _imports(p)}
    assert not users & {"trainop.contract.optimizer", "trainop.contract.flat_plan",
                        "trainop.contract.step_plan"}
    assert not {u for u in users if u.startswith("trainop.kernels")}


def test_the_package_root_holds_only_entry_modules_and_layer_folders():
    """#25: a newcomer opening ``src/trainop/`` sees the layers of the design as folders."""
    modules = {p.name for p in ROOT.glob("*.py")}
    assert modules == {"__init__.py", "__main__.py", "registry.py"} | PUBLIC_ENTRY_MODULES
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= LAYER_FOLDERS


def test_only_the_checked_entry_points_look_up_c_functions():
    """``_binding.function`` hands out the C symbols; only ``native/__init__.py`` (``run``,
    ``l2_norms``) and ``native/rows.py`` (``sparse_rows``, ``unique_rows``) take it, and each of
    those calls the boundary (``boundary.checked``/``checked_rows``/``plain_dense``)."""
    takers = {_module(p) for p in FILES
              if "trainop.kernels.native._binding.function" in _imports(p)}
    assert takers == {"trainop.kernels.native", "trainop.kernels.native.rows"}
    for module in takers:
        path = ROOT.parent / Path(*module.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        assert "boundary." in path.read_text()
