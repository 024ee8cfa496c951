"""TensorFlow imported before Triton: Triton is switched off for the process instead of the
process aborting.

TensorFlow and Triton each carry their own LLVM. torch's ``Optimizer.add_param_group`` imports
``torch._dynamo`` at its first call, which imports Triton where it is installed; with
TensorFlow's LLVM already loaded, Triton's registers LLVM's command-line options a second time
and LLVM aborts the whole process ("CommandLine Error: Option ... registered more than once"),
with no Python traceback. ``check`` runs when an optimizer is built, before torch's base class
(and ``trainop``'s import runs ``block_triton_after_tensorflow``): where that abort would come,
Triton is blocked for the process (``sys.modules["triton"] = None``, so every later
``import triton`` is an ``ImportError``, which torch reads as "no Triton"), with one
``RuntimeWarning`` saying so. Everything but Triton works: trainop's CPU kernels, and
``torch.compile`` on the CPU. Only what needs Triton is refused: an optimizer built with
``implementation="triton"`` raises a ``RuntimeError`` saying why and what to do. ``trainop``
itself, imported before TensorFlow, loads Triton ahead of it
(``interfaces.tensorflow_import.load_triton_before_tensorflow``), and then both work.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import warnings

__all__ = ["block_triton_after_tensorflow", "check"]

#: Set once this module blocked Triton in this process.
_blocked = threading.Event()
_ORDER = ("TensorFlow was imported before Triton, and with TensorFlow's LLVM loaded, loading "
          "Triton's (torch._dynamo imports it when an optimizer is built) would abort this "
          "process (\"CommandLine Error: Option ... registered more than once\")")
_FIX = "import trainop (or torch._dynamo) before tensorflow in your script to have both"


def _would_abort() -> bool:
    """TensorFlow loaded; Triton installed, not loaded (nor blocked); ``torch._dynamo`` not
    loaded (it would import Triton)."""
    if ("tensorflow" not in sys.modules or "triton" in sys.modules
            or "torch._dynamo" in sys.modules):
        return False
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def block_triton_after_tensorflow() -> None:
    """Block Triton for this process where importing it would abort it (see the module
    docstring), with one ``RuntimeWarning``; else nothing."""
    if not _would_abort():
        return
    sys.modules["triton"] = None  # type: ignore[assignment]
    _blocked.set()
    warnings.warn(f"trainop: {_ORDER}; Triton is switched off in this process "
                  f"(sys.modules['triton'] = None): trainop's Triton kernels and "
                  f"torch.compile's Triton backend are unavailable, the rest works; {_FIX}",
                  RuntimeWarning, stacklevel=3)


def check(name: str, implementation: str | None) -> None:
    """Before optimizer ``name`` is built: ``block_triton_after_tensorflow``, and a
    ``RuntimeError`` if it asks for ``implementation="triton"`` while Triton is blocked."""
    block_triton_after_tensorflow()
    if implementation == "triton" and _blocked.is_set():
        raise RuntimeError(f"{name}: implementation='triton' is unavailable in this process: "
                           f"{_ORDER}, so trainop switched Triton off; {_FIX}, or use another "
                           f"implementation")
