"""Checks of the arguments of the TF contract (variables, gradients, losses, ``global_step``).

Each raises ``TypeError``/``ValueError`` in the project's style, naming the argument and the
value; callers run them before mutating anything.
"""

from __future__ import annotations

from typing import Any

import torch

from trainop.contract.validation import describe
from trainop.kernels import native

__all__ = ["VALID_DTYPES", "WIDENED_DTYPES", "check_global_step", "check_gradient", "check_loss",
           "check_sparse_rows", "check_variable", "describe_var"]

#: The floating dtypes TF's ``_valid_dtypes`` allows for variables and losses.
VALID_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: The gradient dtypes a float32 variable takes with ``widen=True`` (read as float32, exactly).
WIDENED_DTYPES = (torch.float16, torch.bfloat16)


def describe_var(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"<tensor shape={tuple(v.shape)} dtype={v.dtype}>"
    return repr(v)


def check_variable(v: Any, where: str) -> None:
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"Expected {where} to be a torch.Tensor variable, got {describe(v)}")
    if v.layout != torch.strided:
        raise TypeError(f"Expected {where} to be a dense tensor, got layout {v.layout}")
    if v.dtype not in VALID_DTYPES:
        raise TypeError(
            f"Expected {where} to have a floating dtype in "
            f"{[str(d) for d in VALID_DTYPES]}, got {v.dtype}"
        )
    if not v.is_leaf:
        raise TypeError(f"Trying to update a Tensor that is not a leaf variable: {where}")


def check_gradient(g: Any, v: torch.Tensor, where: str, *, widen: bool = False) -> None:
    """``g`` a dense or sparse COO tensor of ``v``'s dtype, shape and device; with ``widen``
    a dense float16/bfloat16 gradient of a float32 variable passes too (it stands for its
    float32 widening, ``apply_gradients(widen_gradients=True)``)."""
    if not isinstance(g, torch.Tensor):
        raise TypeError(
            f"Gradient must be a Tensor, a sparse COO Tensor (IndexedSlices) or None: "
            f"{where} is {describe(g)}"
        )
    if g.layout not in (torch.strided, torch.sparse_coo):
        raise TypeError(
            f"Gradient must be a Tensor, a sparse COO Tensor (IndexedSlices) or None: "
            f"{where} has layout {g.layout}"
        )
    if g.dtype != v.dtype and not (widen and v.dtype == torch.float32 and g.dtype in
                                   WIDENED_DTYPES and g.layout == torch.strided):
        raise TypeError(f"Expected {where} to have the variable's dtype {v.dtype}, got {g.dtype}")
    if tuple(g.shape) != tuple(v.shape):
        raise ValueError(
            f"Expected {where} to have the variable's shape {tuple(v.shape)}, "
            f"got {tuple(g.shape)}"
        )
    if g.device != v.device:
        raise ValueError(
            f"Expected {where} to be on the variable's device {v.device}, got {g.device}"
        )
    if g.layout == torch.sparse_coo:
        check_sparse_rows(g, where)


def check_sparse_rows(g: torch.Tensor, where: str) -> None:
    """Every index of a sparse COO gradient lies in ``[0, size)`` of its dimension (negative
    ones included: torch's own sparse ops do not check them). With one sparse dimension on
    the CPU, one pass in C (``kernels.native.first_outside``; the message names the first
    index outside); else the indices' minimum and maximum read on the host: one
    synchronisation per sparse gradient on a GPU (the documented exception to "no host reads
    in a step")."""
    indices = g._indices()
    if indices.numel() == 0:
        return
    bad = native.first_outside(indices, g.shape[0]) if indices.shape[0] == 1 else None
    if bad is not None:  # one sparse dimension (an embedding's rows), read in one C pass
        if bad >= 0:
            _rows_outside(where, g.shape[0], 0, int(indices[0, bad]))
        return
    low_high = torch.aminmax(indices, dim=1)
    for d, (lo, hi) in enumerate(zip(low_high.min.tolist(), low_high.max.tolist(),
                                     strict=True)):
        if lo < 0 or hi >= g.shape[d]:
            _rows_outside(where, g.shape[d], d, lo if lo < 0 else hi)


def _rows_outside(where: str, size: int, dim: int, bad: int) -> None:
    raise ValueError(f"Expected the indices of {where} (a sparse gradient) to lie in "
                     f"[0, {size}) in dimension {dim}, got {bad}")


def check_loss(t: Any, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"Expected `{name}` to be a tensor (or a callable returning one), "
                        f"got {describe(t)}")
    if t.dtype not in VALID_DTYPES:
        raise ValueError(
            f"Invalid type {t.dtype} for `{name}`, expected: {[str(d) for d in VALID_DTYPES]}."
        )


def check_global_step(global_step: Any) -> None:
    if global_step is None:
        return
    if (not isinstance(global_step, torch.Tensor) or global_step.dim() != 0
            or global_step.is_floating_point() or global_step.is_complex()
            or global_step.dtype == torch.bool):
        raise TypeError(
            "Expected `global_step` to be None or a 0-dim integer tensor, got "
            + (f"a tensor of shape {tuple(global_step.shape)} and dtype {global_step.dtype}"
               if isinstance(global_step, torch.Tensor) else describe(global_step))
        )
