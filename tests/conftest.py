"""Shared fixtures: deterministic torch, and the TensorFlow oracle loaded once per session."""

import omp_wait  # noqa: F401 - first: before torch loads OpenMP
import pytest
from layer_coverage import (
    collected_traced_in_layers,
    collected_untraced,
    layer_test_files,
    one_tracer,
    traced_only_in_layers,
    untraced_imports,
    untraced_triton_interpreter,
)
from slow_first import heaviest_first

with untraced_imports():
    import torch
    from triton_fast_reduce import patch_block_sums
    from triton_numpy_shim import patch_triton_interpreter

from trainop.interfaces.tensorflow_import import load_triton_first

# Triton's LLVM before TensorFlow's, whichever test imports TF first (see the module's doc).
with untraced_imports():
    load_triton_first()
# Triton < 3.8's interpreter with numpy >= 2.4 (the GPU machine's Triton 3.6): see the module.
patch_triton_interpreter()
# The interpreter's block sums (tl.reduce by _common._add) folded by numpy, the same bits.
patch_block_sums()
# With --cov, the interpreter's own Python untraced (the kernels are not measured).
untraced_triton_interpreter()

# torch warns once per process that sparse invariant checks are "implicitly disabled"; the
# tests build many small sparse tensors by hand, so opt out explicitly (torch's default).
torch.sparse.check_sparse_tensor_invariants.disable()


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def tf():
    """TensorFlow (the reference implementation); tests needing it skip if it is missing."""
    return pytest.importorskip("tensorflow")


@pytest.fixture(autouse=True)
def _tensorflow_stays_eager():
    """No test may leave TensorFlow switched to graph mode for the rest of the process (as
    importing ``returnn.tf`` or ``tf.compat.v1.disable_eager_execution()`` does): the oracle
    tests after it would fail far from the cause. Checked only where TF is already imported."""
    yield
    import sys

    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "executing_eagerly"):
        assert tf.executing_eagerly(), "this test left TensorFlow in graph mode (eager disabled)"


def _torch_globals() -> dict:
    return {
        "num_threads": torch.get_num_threads(),
        "default_dtype": torch.get_default_dtype(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "grad_enabled": torch.is_grad_enabled(),
        "inference_mode": torch.is_inference_mode_enabled(),
        "anomaly_mode": torch.is_anomaly_enabled(),
        "anomaly_check_nan": torch.is_anomaly_check_nan_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


@pytest.fixture(autouse=True)
def _torch_globals_restored():
    """No test may leave torch's global state changed for the tests after it (#34: one that ran
    ``trainop train`` in process left one thread set, and a RETURNN engine test after it
    failed on correct code): threads, default dtype, deterministic flags, grad, inference and
    anomaly modes, matmul precision. The leaking test fails, naming what it changed."""
    before = _torch_globals()
    yield
    after = _torch_globals()
    changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    if changed:
        torch.set_num_threads(before["num_threads"])  # the next tests run as before
        torch.set_default_dtype(before["default_dtype"])
        torch.use_deterministic_algorithms(before["deterministic_algorithms"],
                                           warn_only=before["deterministic_warn_only"])
        torch.set_grad_enabled(before["grad_enabled"])
        torch.autograd.set_detect_anomaly(before["anomaly_mode"],
                                          check_nan=before["anomaly_check_nan"])
        torch.set_float32_matmul_precision(before["float32_matmul_precision"])
    assert not changed, f"this test changed torch's global state (before, after): {changed}"


def pytest_configure(config):
    config.addinivalue_line("markers", "native: needs trainop's native C kernels (skipped where "
                            "they cannot be built or TRAINOP_NATIVE=0)")


def pytest_collection_modifyitems(config, items):
    """The heaviest files first (tests/slow_first.py). Where trainop's native kernels cannot
    be had (no C compiler, ``TRAINOP_NATIVE=0``), the tests that need them skip with the reason
    instead of failing on the constructor's clear error: those marked ``native``, and the cases
    that ask for them by parameter (``implementation="native"``, or "native" in the case's
    id)."""
    from trainop.kernels import native

    heaviest_first(items)

    if native.available():
        return
    skip = pytest.mark.skip(reason=f"native kernels unavailable: {native.unavailable_reason()}")
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        if (item.get_closest_marker("native") is not None
                or any(isinstance(v, str) and v == "native" for v in params.values())
                or (callspec is not None and "native" in callspec.id.split("-"))):
            item.add_marker(skip)


_LAYER_FILES = layer_test_files()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With --cov, trace only the audited layers' own tests (tests/layer_coverage.py)."""
    with traced_only_in_layers(item, _LAYER_FILES):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """With --cov, collect untraced (tests/layer_coverage.py)."""
    with collected_untraced(session.config):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """With --cov, the layers' own test modules collected traced (tests/layer_coverage.py)."""
    with collected_traced_in_layers(collector, _LAYER_FILES):
        yield


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    """With --cov, one tracer per process (tests/layer_coverage.py's ``one_tracer``)."""
    one_tracer(session.config)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    """A gloo process group of one rank in this process (ZeRO, FSDP2 and DTensors on a CPU
    mesh of size 1 run in it), destroyed after the module's tests."""
    dist = torch.distributed
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    store = tmp_path_factory.mktemp("store") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()
