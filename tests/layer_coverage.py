"""Branch coverage of the audited layers, traced only while their own tests run (issue #40).

``scripts/test.sh`` runs pytest with ``--cov`` (pytest-cov; the measured files and ``branch =
true`` are pyproject.toml's ``[tool.coverage.run]``). Tracing every test would make the suite
about 65% slower on its Python-heavy tests, so the tracer is paused outside the test files of the
round-5 mutation audit's groups (``scripts/mutation_audit.py``'s GROUPS, TL to EB) and the
``test_pin5_*`` files: imports and collection are traced (module-level lines count), and so is
every test of those layers. The figures are the layers' coverage by their own tests, a lower
bound of what the whole suite covers. Under pytest-xdist (``scripts/test.sh``) each worker has
its own tracer (pytest-cov's ``DistWorker``), paused the same way around the tests it runs;
pytest-cov combines the workers' data into the one table (the same table as a serial run: the
same TOTAL on the audit's files, checked with and without ``-n 2``).
"""
from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROUND5 = ("TL", "BT", "HB", "RV", "OR", "EG", "CR", "EB")


def layer_test_files() -> frozenset[str]:
    """The test files (names under tests/) whose tests are traced."""
    spec = importlib.util.spec_from_file_location("_audit_groups",
                                                  ROOT / "scripts" / "mutation_audit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names = {Path(a).name for g in ROUND5 for a in module.GROUPS[g] if a.endswith(".py")}
    names |= {p.name for p in (ROOT / "tests").glob("test_pin5_*.py")}
    return frozenset(names)


def _coverage(config):
    plugin = config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    return getattr(controller, "cov", None)


@contextlib.contextmanager
def traced_only_in_layers(item, files: frozenset[str]):
    """Pause the coverage tracer around a test outside the layers' files."""
    cov = _coverage(item.config)
    if cov is None or item.path.name in files:
        yield
        return
    cov.stop()
    try:
        yield
    finally:
        cov.start()
