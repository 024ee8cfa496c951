"""trainop's own single-pass CPU kernels: the ``native`` implementation.

torch has fused CPU kernels only for some algorithms (Adam(W), SGD, Adagrad). For the other
update rules, and wherever a gradient multiplier must be applied without rewriting the
gradients, trainop runs its own C loops (``csrc/rules.h``): one pass over each tensor that
reads the variable, the gradient and the slots once and writes the variable and slots once,
vectorised and shared among threads, over whole lists of tensors in one call. The rules are
the same as the Python reference in ``trainop.algorithms`` in the same order of operations;
results agree within rounding (different instruction sequences), not bit for bit.

Requirements: CPU tensors, float32 or float64, contiguous. The library is compiled on first
use with the system C compiler (see ``build``); without one, ``available()`` is False and the
optimizers fall back to ``foreach``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np
import torch

from trainop.kernels.native.build import load, unavailable_reason

__all__ = ["DTYPES", "available", "l2_norms", "lazy_adam_rows", "pointers", "run", "supports",
           "unavailable_reason"]

SUFFIXES = {torch.float32: "f32", torch.float64: "f64"}
DTYPES = tuple(SUFFIXES)
# The uniform signature of the rule kernels (see csrc/driver.c) and the two others.
_RULE_ARGS = [ctypes.c_int64] + [ctypes.c_void_p] * 5 + [ctypes.c_int]
_SQUARE_SUMS_ARGS = [ctypes.c_int64] + [ctypes.c_void_p] * 3 + [ctypes.c_int]
_LAZY_ADAM_ARGS = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 6 + [ctypes.c_int]
_functions: dict[str, ctypes._CFuncPtr] = {}


def available() -> bool:
    """Whether the kernels are built and loaded (building them on the first call)."""
    return load() is not None


def supports(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether tensors of this dtype and device can go to the kernels (when contiguous)."""
    return device.type == "cpu" and dtype in SUFFIXES and available()


def pointers(lists: Sequence[Sequence[torch.Tensor]]) -> np.ndarray | None:
    """The data pointers of every tensor, list after list, or ``None`` if one is not contiguous
    (the caller has checked dtype and device once per list, see ``supports``)."""
    flat = [t for tensors in lists for t in tensors]
    if not all([t.is_contiguous() for t in flat]):
        return None
    return np.fromiter([t.data_ptr() for t in flat], dtype=np.uint64, count=len(flat))


def _function(name: str, argtypes: list = _RULE_ARGS):
    """The exported C function ``name`` with its argument types set (looked up once)."""
    function = _functions.get(name)
    if function is None:
        library = load()
        if library is None:
            raise RuntimeError(f"trainop's native kernels are unavailable: {unavailable_reason()}")
        function = getattr(library, name)
        function.argtypes = argtypes
        function.restype = ctypes.c_int
        _functions[name] = function
    return function


def _scalar(value: torch.Tensor | None) -> torch.Tensor | None:
    """A 0-dim tensor as a float64 CPU tensor the kernel can read (``None`` stays ``None``)."""
    if value is None:
        return None
    return value.detach().to(device="cpu", dtype=torch.float64).contiguous()


def run(rule: str, lists: Sequence[Sequence[torch.Tensor]], hyper: Sequence[float], *,
        multiplier: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
        addresses: np.ndarray | None = None, numel: np.ndarray | None = None) -> None:
    """Run ``rule`` over the tensor lists (variables, gradients, slots..., as the rule in
    ``csrc/rules.h`` lists them) in one call.

    ``multiplier`` scales every gradient inside the update (the gradients are not written);
    a nonzero ``found_inf`` leaves everything as it is. Both are 0-dim tensors or ``None``.
    The caller guarantees what ``supports`` checks (for the variables; the other lists share
    their dtype, except NovoGrad's float32 moments), contiguity, and equal sizes within each
    tensor tuple; ``addresses`` are the lists' ``pointers`` and ``numel`` the variables' sizes
    (int64) if the caller already has them.
    """
    variables = lists[0]
    if not variables:
        return
    function = _function(f"trainop_{rule}_{SUFFIXES[variables[0].dtype]}")
    if addresses is None:
        addresses = pointers(lists)
        if addresses is None:
            raise ValueError(f"trainop's native {rule} kernel needs contiguous tensors")
    if numel is None:
        numel = np.fromiter([t.numel() for t in variables], dtype=np.int64,
                            count=len(variables))
    hyper_array = np.asarray(hyper, dtype=np.float64)
    multiplier = _scalar(multiplier)
    found_inf = _scalar(found_inf)
    status = function(len(variables), numel.ctypes.data, addresses.ctypes.data,
                      hyper_array.ctypes.data,
                      None if multiplier is None else multiplier.data_ptr(),
                      None if found_inf is None else found_inf.data_ptr(),
                      torch.get_num_threads())
    if status != 0:
        raise MemoryError(f"trainop's native {rule} kernel could not allocate its work plan")


def l2_norms(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """Per float32 tensor, its L2 norm as a 1-D float32 tensor (squares summed in double, over
    every thread: one read pass at memory speed), or ``None`` where the kernels cannot read the
    tensors (not all float32, on the CPU and contiguous): then use ``torch._foreach_norm``.
    """
    dtype = torch.float32
    if not tensors or not supports(dtype, tensors[0].device):
        return None
    if any(t.dtype != dtype or t.device.type != "cpu" for t in tensors):
        return None
    addresses = pointers([tensors])
    if addresses is None:
        return None
    function = _function(f"trainop_square_sums_{SUFFIXES[dtype]}", _SQUARE_SUMS_ARGS)
    numel = np.fromiter([t.numel() for t in tensors], dtype=np.int64, count=len(tensors))
    sums = torch.empty(len(tensors), dtype=torch.float64)
    if function(len(tensors), numel.ctypes.data, addresses.ctypes.data, sums.data_ptr(),
                torch.get_num_threads()) != 0:
        raise MemoryError("trainop's native norm kernel could not allocate its work plan")
    return sums.sqrt_().to(torch.float32)


def lazy_adam_rows(var: torch.Tensor, m: torch.Tensor, v: torch.Tensor, indices: torch.Tensor,
                   values: torch.Tensor, hyper: Sequence[float]) -> bool:
    """LazyAdam's sparse update of the rows ``indices`` (unique) in one threaded pass; returns
    False (nothing done) where the kernel cannot run these tensors, so the caller runs the
    reference. ``hyper``: alpha, beta1, beta2, epsilon."""
    dtype = var.dtype
    if (not supports(dtype, var.device) or var.dim() == 0 or indices.dtype != torch.int64
            or not all(t.dtype == dtype and t.device.type == "cpu" and t.is_contiguous()
                       for t in (m, v, values))
            or not (m.shape == v.shape == var.shape and var.is_contiguous()
                    and indices.is_contiguous() and indices.dim() == 1
                    and values.shape == (indices.numel(), *var.shape[1:]))):
        return False
    if indices.numel() and not (int(indices.min()) >= 0 and int(indices.max()) < var.shape[0]):
        return False  # the reference raises torch's index error
    function = _function(f"trainop_lazy_adam_rows_{SUFFIXES[dtype]}", _LAZY_ADAM_ARGS)
    width = var[0].numel()
    hyper_array = np.asarray(hyper, dtype=np.float64)
    function(indices.numel(), width, indices.data_ptr(), values.data_ptr(), var.data_ptr(),
             m.data_ptr(), v.data_ptr(), hyper_array.ctypes.data, torch.get_num_threads())
    return True
