"""Branch coverage of the audited layers, traced only while their own tests run (issue #40).

``scripts/test.sh`` runs pytest with ``--cov`` (pytest-cov; the measured files and ``branch =
true`` are pyproject.toml's ``[tool.coverage.run]``). Tracing every test would make the suite
about 65% slower on its Python-heavy tests, so the tracer is paused outside the test files of
the round-5 audit's layers (``LAYER_TESTS``) and the ``test_pin5_*`` files: imports and
collection are traced (module-level lines count), and so is every test of those layers. The
figures are the layers' coverage by their own tests, a lower bound of what the whole suite
covers. Under pytest-xdist (``scripts/test.sh``) each worker has its own tracer (pytest-cov's
``DistWorker``), paused the same way around the tests it runs; pytest-cov combines the workers'
data into the one table (the same table as a serial run: the same TOTAL, checked with and
without ``-n 2``).
"""
from __future__ import annotations

import contextlib
from pathlib import Path

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
