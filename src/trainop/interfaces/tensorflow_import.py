"""TensorFlow imported so that Triton can still load after it.

TensorFlow and Triton each carry their own copy of LLVM. Once TensorFlow's is loaded, loading
Triton's (``import triton``, which ``torch._dynamo`` does on its first import when Triton is
installed) registers LLVM's command-line options a second time and LLVM aborts the whole process
("CommandLine Error: Option ... registered more than once"). Loaded in the other order, both
work. Every place in trainop that imports TensorFlow (``--compare-tf``, the TF1 benchmark peer)
goes through ``import_tensorflow``, which loads Triton first where it is installed. Where a
script imported TensorFlow first, trainop switches Triton off for the process
(``contract.llvm_order``) rather than let it abort.

Example::

    tf = import_tensorflow()
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
from typing import Any

from trainop.contract.llvm_order import block_triton_after_tensorflow

__all__ = ["import_tensorflow", "load_triton_before_tensorflow", "load_triton_first"]


def load_triton_first() -> None:
    """Import Triton if it is installed and TensorFlow is not loaded yet (else nothing)."""
    if "triton" in sys.modules or "tensorflow" in sys.modules:
        return
    if importlib.util.find_spec("triton") is None:
        return
    with contextlib.suppress(Exception):  # a broken Triton installation: TF still loads
        import triton  # noqa: F401


def import_tensorflow() -> Any:
    """``import tensorflow`` after ``load_triton_first``; raises what the import raises."""
    load_triton_first()
    import tensorflow

    return tensorflow


class _TritonFirst(importlib.abc.MetaPathFinder):
    """Finds nothing; at the first ``import tensorflow`` it loads Triton first, then leaves."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname == "tensorflow":
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
            load_triton_first()


def load_triton_before_tensorflow() -> None:
    """Make the process's first ``import tensorflow`` load Triton first (where Triton is
    installed and TensorFlow not loaded yet): called when trainop is imported, so a script
    that imports trainop before TensorFlow never meets the LLVM abort. The hook finds no
    module and removes itself at that import. Where TensorFlow is loaded already, Triton is
    blocked for the process instead (``contract.llvm_order``)."""
    if "tensorflow" in sys.modules:
        block_triton_after_tensorflow()
        return
    if "triton" in sys.modules:
        return
    if any(isinstance(finder, _TritonFirst) for finder in sys.meta_path):
        return
    try:  # a blocked or broken Triton (sys.modules["triton"] = None) counts as absent
        present = importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        present = False
    if present:
        sys.meta_path.insert(0, _TritonFirst())
