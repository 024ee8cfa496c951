"""Every public name's docstring examples run, as a reader would paste them: each ``>>>``
example from an empty namespace (its own imports only), its printed output equal to what the
docstring shows. The names are the reference's (scripts/docs/public_api.py: each public
module's ``__all__``, with the methods and members documented under them)."""

from __future__ import annotations

import doctest
import importlib
import inspect
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "docs"))
from public_api import PUBLIC_MODULES, is_module, public_names  # noqa: E402

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _examples(module_name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = finder.find(module, module_name, module=module, globs={})[:1]  # the module's own
    for name in public_names(module_name):
        if is_module(module_name, name):
            continue
        value = getattr(module, name)
        home = inspect.getmodule(value) or module
        found += finder.find(value, f"{module_name}.{name}", module=home, globs={})
    return [test for test in found if test.examples]


@pytest.mark.parametrize("module_name", [m for m, _, _ in PUBLIC_MODULES])
def test_docstring_examples_run_and_print_what_they_show(module_name):
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    tests = _examples(module_name)
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)[-6000:]
    assert runner.tries > 0 or not tests
