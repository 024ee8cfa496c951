"""Branch coverage of the audited layers, traced only while their own tests run (issue #40).

``scripts/test.sh`` runs pytest with ``--cov`` (pytest-cov; the measured files and ``branch =
true`` are pyproject.toml's ``[tool.coverage.run]``). Tracing every test would make the suite
about 65% slower on its Python-heavy tests, so the tracer is paused outside the test files of
the round-5 audit's layers (``LAYER_TESTS``) and the ``test_pin5_*`` files, and during
collection: the measured modules are imported traced first (their module-level lines count),
then only those layers' test modules are collected traced (importing TensorFlow, hypothesis,
timm, ... for the others under the tracer took 45 s of a worker's start instead of 27). Every
test of those layers is traced; Triton's interpreter runs untraced (it runs the kernels, which
are not measured, through Triton's own Python: ``untraced_triton_interpreter``). The
figures are the layers' coverage by their own tests, a lower bound of what the whole suite
covers. Under pytest-xdist (``scripts/test.sh``) each worker has its own tracer (pytest-cov's
``DistWorker``), paused the same way around the tests it runs; pytest-cov combines the workers'
data into the one table (the same table as a serial run: the same TOTAL, checked with and
without ``-n 2``).
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from pathlib import Path

import pytest

#: The test files of the audited layers (issue #40's groups TL to EB), besides ``test_pin5_*``.
LAYER_TESTS = (
    "test_configs_idioms.py", "test_contract_lr.py", "test_errors_checkpoints.py",
    "test_errors_configs.py", "test_errors_hardening.py", "test_errors_recipes.py",
    "test_errors_returnn_engine.py", "test_errors_tf_checkpoints.py", "test_errors_tf_files.py",
    "test_errors_torch_optim.py", "test_errors_torch_style.py", "test_errors_updater.py",
    "test_flat.py", "test_native.py", "test_native_metadata.py", "test_novograd.py",
    "test_pin_configs.py", "test_pin_returnn.py", "test_pin_tf_checkpoints.py",
    "test_policy_learning_rate.py", "test_property_checkpoints.py", "test_recipe_values.py",
    "test_recipes.py", "test_recipes_upstream_modes.py", "test_replay_oracle.py",
    "test_returnn_engine_amp.py", "test_step_reads.py", "test_tensorflow_import.py",
    "test_tf_checkpoint_reading.py", "test_tf_checkpoint_switch.py", "test_tf_checkpoints.py",
    "test_torch_habits.py", "test_torch_optim_checkpoints.py",
    "test_torch_schedulers_momentum.py", "test_torch_schedulers_over_schedules.py",
    "test_train_replay.py", "test_triton_interpreter.py",
)
TESTS = Path(__file__).resolve().parent


def layer_test_files() -> frozenset[str]:
    """The test files (names under tests/) whose tests are traced."""
    return frozenset(LAYER_TESTS) | {p.name for p in TESTS.glob("test_pin5_*.py")}


def _coverage(config):
    plugin = config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    return getattr(controller, "cov", None)


@contextlib.contextmanager
def _paused(cov):
    """The tracer of ``cov`` (a ``coverage.Coverage``) stopped inside; None: nothing to pause."""
    if cov is None:
        yield
        return
    cov.stop()
    try:
        yield
    finally:
        cov.start()


@contextlib.contextmanager
def traced_only_in_layers(item, files: frozenset[str]):
    """Pause the coverage tracer around a test outside the layers' files."""
    with _paused(None if item.path.name in files else _coverage(item.config)):
        yield


def one_tracer(config) -> None:
    """Leave the controller's tracer the only one. Under pytest-xdist pytest-cov starts a
    ``Coverage`` in each worker when it loads (as for the controlling process) and the worker's
    own at session start; coverage stacks their collectors, so stopping the worker's (to pause
    it around a test outside the layers) resumed the first one underneath: every test was
    traced, and what that one traced was never reported."""
    cov = _coverage(config)
    if cov is None:
        return
    import coverage

    cov.stop()
    while (other := coverage.Coverage.current()) is not None:
        other.stop()
    cov.start()


def measured_modules(include: list[str]) -> list[str]:
    """The modules of coverage's ``include`` patterns (pyproject.toml's ``[tool.coverage.run]``:
    ``*/trainop/a/b.py`` -> ``trainop.a.b``; a package's ``__init__.py`` -> the package)."""
    names = []
    for pattern in include:
        parts = pattern.split("/")
        parts = parts[parts.index("trainop"):]
        parts[-1] = parts[-1].removesuffix(".py")
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


@contextlib.contextmanager
def collected_untraced(config):
    """Collection with the tracer paused, the measured modules imported (traced) first."""
    cov = _coverage(config)
    for name in measured_modules(cov.config.run_include) if cov is not None else ():
        importlib.import_module(name)
    with _paused(cov):
        yield


@contextlib.contextmanager
def collected_traced_in_layers(collector, files: frozenset[str]):
    """Inside the untraced collection, the tracer on while one of the layers' test modules is
    collected (its import and parametrizations call the measured code)."""
    cov = _coverage(collector.config)
    if cov is None or not isinstance(collector, pytest.Module) or collector.path.name not in files:
        yield
        return
    cov.start()
    try:
        yield
    finally:
        cov.stop()


def _running_coverage():
    """The ``coverage.Coverage`` tracing now, or None (no coverage, or its tracer paused)."""
    if sys.gettrace() is None:
        return None
    try:
        import coverage
    except ImportError:
        return None
    return coverage.Coverage.current()


@contextlib.contextmanager
def untraced_imports():
    """The tracer paused while the conftest imports third-party modules (torch, Triton), which
    coverage does not measure; a no-op without coverage running."""
    with _paused(_running_coverage()):
        yield


def untraced_triton_interpreter() -> bool:
    """Run Triton's interpreter (``TRITON_INTERPRET=1``) with the tracer paused: it runs
    trainop's kernel bodies (``kernels/triton/*`` kernels, not measured) through Triton's own
    Python, which the tracer slowed twofold (test_triton_interpreter.py: 127 s against 60);
    the measured host code around a launch stays traced. True if in place."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except Exception:  # no usable Triton: its tests skip on their own
        return False
    run = getattr(InterpretedFunction, "run", None)
    if run is None:  # an older Triton (3.0, beside torch 2.4): nothing of this shape to wrap
        return False
    if getattr(run, "_trainop_untraced", False):
        return True

    @functools.wraps(run)
    def untraced_run(self, *args, **kwargs):
        with _paused(_running_coverage()):
            return run(self, *args, **kwargs)

    untraced_run._trainop_untraced = True
    InterpretedFunction.run = untraced_run
    return True
