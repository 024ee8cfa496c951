"""trainop's own single-pass CPU kernels: the ``native`` implementation.

torch has fused CPU kernels only for some algorithms (Adam(W), SGD, Adagrad). For the other
update rules, and wherever a gradient multiplier must be applied without rewriting the
gradients, trainop runs its own C loops (``csrc/rules.h``): one pass over each tensor that
reads the variable, the gradient and the slots once and writes the variable and slots once,
vectorised and shared among threads, over whole lists of tensors in one call. The rules are
the same as the Python reference in ``trainop.algorithms`` in the same order of operations;
results agree within rounding (different instruction sequences), not bit for bit.

Sparse gradients (``rows``, ``csrc/rows.h``, ``csrc/unique_rows.h``): TF's deduplication of a
gradient's rows by a hash over the indices (no sort, no copy when no row repeats), and
LazyAdam's rule over the touched rows only, prefetching rows ahead of the loop.

Every call to C goes through ``boundary.checked`` (plain dense tensors of the expected dtype,
element count and layout, no written memory shared); ``run``, ``sparse_rows``, ``unique_rows``
and ``l2_norms`` are the only entry points; ``torch.compile`` never traces them (a graph
break: they run eagerly, on real tensors). Requirements: CPU tensors, float32 or float64,
contiguous. The library is compiled on first
use with the system C compiler (see ``build``); without one, ``available()`` is False and the
optimizers fall back to ``foreach``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from trainop.kernels.native import boundary, fork
from trainop.kernels.native._binding import (
    DTYPES,
    SUFFIXES,
    available,
    doubles,
    function,
    pointers,
    sizes,
    supports,
)
from trainop.kernels.native._once import NativeFallbackWarning
from trainop.kernels.native.build import unavailable_reason
from trainop.kernels.native.rows import first_outside, sparse_rows, unique_rows

__all__ = ["DTYPES", "LISTS", "SUFFIXES", "NativeFallbackWarning", "available", "boundary",
           "first_outside", "l2_norms", "pointers", "run", "sizes", "sparse_rows", "supports",
           "unavailable_reason", "unique_rows"]

_SQUARE_SUMS_ARGS = [ctypes.c_int64] + [ctypes.c_void_p] * 3 + [ctypes.c_int]

def _scalar(value: torch.Tensor | None) -> torch.Tensor | None:
    """A 0-dim tensor as a float64 CPU tensor the kernel can read (``None`` stays ``None``)."""
    if value is None:
        return None
    return value.detach().to(device="cpu", dtype=torch.float64).contiguous()


#: The tensor lists each dense rule reads (``csrc/rules.h``: variables, gradients, slots...).
LISTS = {"gradient_descent": 2, "adagrad": 3, "adagrad_da": 4, "adadelta": 4, "rmsprop": 4,
         "rmsprop_centered": 5, "ftrl": 4, "proximal_gd": 2, "proximal_adagrad": 3,
         "momentum": 3, "adam": 4, "adam_apply": 3, "novograd": 4}
#: Lists of a rule the kernel only reads (default: the gradients, list 1).
_READ_ONLY = {"adam_apply": frozenset({1, 2})}
#: Lists a rule reads as one float32 per tensor (NovoGrad's 0-dim second moments).
_SCALAR_F32 = {"novograd": frozenset({3})}


# torch._disable_dynamo is torch.compiler.disable that imports torch._dynamo at the first call,
# not at `import trainop` (~0.9 s).
@torch._disable_dynamo  # under torch.compile: a graph break, the C call runs eagerly
def run(rule: str, lists: Sequence[Sequence[torch.Tensor]], hyper: Sequence[float], *,
        multiplier: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
        cache: Any = None, read: tuple[np.ndarray, np.ndarray] | None = None) -> bool:
    """Run ``rule`` over the tensor lists (variables, gradients, slots..., as the rule in
    ``csrc/rules.h`` lists them) in one call, after ``boundary.checked``; returns False
    (nothing done) where the check sends the caller to its safe path (a tensor subclass or a
    non-contiguous tensor), and raises ``ValueError`` for tensors no path can run (see
    ``boundary``).

    ``multiplier`` scales every gradient inside the update (the gradients are not written);
    a nonzero ``found_inf`` leaves everything as it is. Both are 0-dim tensors or ``None``.
    ``cache``: where the check is remembered (a step plan's bucket), or ``None``; ``read``:
    what the step's own pass read of the variables and gradients (``boundary.checked``).
    """
    variables = lists[0]
    if not variables:
        return True
    expected = LISTS.get(rule)
    if expected != len(lists):
        raise ValueError(f"trainop's native {rule} kernel reads {expected} tensor lists, "
                         f"got {len(lists)}")
    dtype = variables[0].dtype
    if not supports(dtype, variables[0].device):
        return False
    scalar = _SCALAR_F32.get(rule, frozenset())
    found = boundary.checked(lists, dtype=dtype, list_dtypes=dict.fromkeys(scalar, torch.float32),
                             scalar_lists=scalar, read_only=_READ_ONLY.get(rule, frozenset({1})),
                             cache=cache, rule=rule, read=read)
    if found is None:
        return False
    addresses, numel = found
    kernel = function(f"trainop_{rule}_{SUFFIXES[dtype]}")
    multiplier = _scalar(multiplier)
    found_inf = _scalar(found_inf)
    status = kernel(len(variables), numel.ctypes.data, addresses.ctypes.data, doubles(hyper),
                      None if multiplier is None else multiplier.data_ptr(),
                      None if found_inf is None else found_inf.data_ptr(),
                      fork.threads())
    if status != 0:
        raise MemoryError(f"trainop's native {rule} kernel could not allocate its work plan")
    return True


@torch._disable_dynamo  # never traced: no fake/functional tensor reaches C
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
    found = boundary.checked([tensors], dtype=dtype, read_only=frozenset({0}), rule="norm")
    if found is None:
        return None
    addresses, numel = found
    kernel = function(f"trainop_square_sums_{SUFFIXES[dtype]}", _SQUARE_SUMS_ARGS)
    sums = torch.empty(len(tensors), dtype=torch.float64)
    if kernel(len(tensors), numel.ctypes.data, addresses.ctypes.data, sums.data_ptr(),
                fork.threads()) != 0:
        raise MemoryError("trainop's native norm kernel could not allocate its work plan")
    return sums.sqrt_().to(torch.float32)


