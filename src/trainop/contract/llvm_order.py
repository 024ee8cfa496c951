"""TensorFlow imported before Triton: one clear error instead of an aborted process.

TensorFlow and Triton each carry their own LLVM. torch's ``Optimizer.add_param_group`` imports
``torch._dynamo`` at its first call, which imports Triton where it is installed; with
TensorFlow's LLVM already loaded, Triton's registers LLVM's command-line options a second time
and LLVM aborts the whole process ("CommandLine Error: Option ... registered more than once"),
with no Python traceback. ``check`` runs when an optimizer is built, before torch's base class:
where that abort would come, it raises a ``RuntimeError`` saying why and what to do.
``trainop`` itself, imported before TensorFlow, loads Triton ahead of it
(``interfaces.tensorflow_import.load_triton_before_tensorflow``).
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["check"]


def check(name: str) -> None:
    """``RuntimeError`` where building optimizer ``name`` would import Triton after
    TensorFlow (TensorFlow loaded; Triton installed, not loaded; ``torch._dynamo`` not
    loaded)."""
    if ("tensorflow" not in sys.modules or "triton" in sys.modules
            or "torch._dynamo" in sys.modules or importlib.util.find_spec("triton") is None):
        return
    raise RuntimeError(
        f"{name}: TensorFlow was imported before Triton. Building an optimizer imports "
        f"torch._dynamo, which imports Triton, and with TensorFlow's LLVM already loaded "
        f"Triton's would abort this process (\"CommandLine Error: Option ... registered more "
        f"than once\"). Import trainop (or torch._dynamo) before tensorflow in your script")
