"""``TensorList``: run a per-tensor update rule over a whole list of tensors at once.

The update rules in ``trainop.algorithms`` are written once, for one tensor. Called with
``TensorList`` arguments instead, every arithmetic operation becomes one ``torch._foreach_*``
call over the whole list (a multi-tensor kernel), in the same order of operations, so the
foreach path gives bit-identical results to the per-tensor reference without a second copy of
the math. Operations with no foreach kernel (comparisons, ``torch.where``, ``.sum()``, ...) fall
back to a per-tensor loop through ``__torch_function__``.

Scalars (Python numbers or 0-dim tensors) broadcast over the list.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from trainop.kernels.torch_version import require

__all__ = ["TensorList"]


def _is_scalar(x: Any) -> bool:
    return isinstance(x, numbers.Number) or (isinstance(x, torch.Tensor) and x.dim() == 0)



def _rsqrt_present() -> None:
    """``torch._foreach_rsqrt`` came with torch 2.6: below it, one message, not AttributeError."""
    if not hasattr(torch, "_foreach_rsqrt"):
        require("the foreach path of Adagrad, Adadelta and ProximalAdagrad")

class TensorList:
    """A list of tensors that behaves like one tensor under arithmetic (see module doc)."""

    __slots__ = ("tensors",)

    def __init__(self, tensors: Iterable[torch.Tensor]) -> None:
        self.tensors = list(tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def __iter__(self):
        return iter(self.tensors)

    @property
    def dtype(self) -> torch.dtype:
        return self.tensors[0].dtype

    @property
    def device(self) -> torch.device:
        return self.tensors[0].device

    def __repr__(self) -> str:
        return f"TensorList({len(self.tensors)} tensors)"

    # -------------------------------------------------------------- generic fallback
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        return _map(func, *args, **kwargs)

    # -------------------------------------------------------------- binary ops
    def _binary(self, other, op: Callable, fallback: Callable) -> TensorList:
        if isinstance(other, TensorList):
            if all(a.shape == b.shape for a, b in zip(self.tensors, other.tensors, strict=True)):
                return TensorList(op(self.tensors, other.tensors))
            return _map(fallback, self, other)
        if _is_scalar(other):
            return TensorList(op(self.tensors, other))
        return NotImplemented

    def __add__(self, other):
        return self._binary(other, torch._foreach_add, torch.add)

    def __sub__(self, other):
        return self._binary(other, torch._foreach_sub, torch.sub)

    def __mul__(self, other):
        return self._binary(other, torch._foreach_mul, torch.mul)

    def __truediv__(self, other):
        return self._binary(other, torch._foreach_div, torch.div)

    def __radd__(self, other):
        return self.__add__(other)

    def __rmul__(self, other):
        return self.__mul__(other)

    def __rsub__(self, other):
        if not _is_scalar(other):
            return NotImplemented
        return TensorList(torch._foreach_add(torch._foreach_neg(self.tensors), other))

    def __rtruediv__(self, other):
        if not _is_scalar(other):
            return NotImplemented
        return TensorList(other / t for t in self.tensors)

    def __neg__(self):
        return TensorList(torch._foreach_neg(self.tensors))

    def __gt__(self, other):
        return _map(torch.gt, self, other)

    def __eq__(self, other):  # noqa: D105 - elementwise, like a tensor
        return _map(torch.eq, self, other)

    __hash__ = None  # elementwise __eq__, like torch.Tensor's, is not a hash relation

    # -------------------------------------------------------------- in-place ops
    def _inplace(self, other, op: Callable, fallback: Callable) -> TensorList:
        if isinstance(other, TensorList):
            if all(a.shape == b.shape for a, b in zip(self.tensors, other.tensors, strict=True)):
                op(self.tensors, other.tensors)
            else:
                for a, b in zip(self.tensors, other.tensors, strict=True):
                    fallback(a, b)
        else:
            op(self.tensors, other)
        return self

    def add_(self, other) -> TensorList:
        return self._inplace(other, torch._foreach_add_, torch.Tensor.add_)

    def sub_(self, other) -> TensorList:
        return self._inplace(other, torch._foreach_sub_, torch.Tensor.sub_)

    def mul_(self, other) -> TensorList:
        return self._inplace(other, torch._foreach_mul_, torch.Tensor.mul_)

    def div_(self, other) -> TensorList:
        return self._inplace(other, torch._foreach_div_, torch.Tensor.div_)

    def copy_(self, other) -> TensorList:
        return self._inplace(other, torch._foreach_copy_, torch.Tensor.copy_)

    def clamp_(self, min=None) -> TensorList:  # noqa: A002 - torch's argument name
        torch._foreach_clamp_min_(self.tensors, min)
        return self

    def sqrt_(self) -> TensorList:
        torch._foreach_sqrt_(self.tensors)
        return self

    def rsqrt_(self) -> TensorList:
        _rsqrt_present()
        torch._foreach_rsqrt_(self.tensors)
        return self

    def sign_(self) -> TensorList:
        torch._foreach_sign_(self.tensors)
        return self

    # -------------------------------------------------------------- unary ops
    def sqrt(self) -> TensorList:
        return TensorList(torch._foreach_sqrt(self.tensors))

    def rsqrt(self) -> TensorList:
        _rsqrt_present()
        return TensorList(torch._foreach_rsqrt(self.tensors))

    def abs(self) -> TensorList:
        return TensorList(torch._foreach_abs(self.tensors))

    def sign(self) -> TensorList:
        return TensorList(torch._foreach_sign(self.tensors))

    def square(self) -> TensorList:
        return TensorList(torch._foreach_mul(self.tensors, self.tensors))

    def pow(self, exponent) -> TensorList:
        return TensorList(torch._foreach_pow(self.tensors, exponent))

    def float(self) -> TensorList:
        return TensorList(t.float() for t in self.tensors)

    def to(self, *args, **kwargs) -> TensorList:
        return TensorList(t.to(*args, **kwargs) for t in self.tensors)

    def sum(self) -> TensorList:
        return TensorList(t.sum() for t in self.tensors)


def _map(func: Callable, *args, **kwargs) -> TensorList:
    """Apply ``func`` tensor by tensor, zipping every ``TensorList`` argument."""
    length = next(len(a) for a in (*args, *kwargs.values()) if isinstance(a, TensorList))

    def pick(x: Any, i: int) -> Any:
        if isinstance(x, TensorList):
            return x.tensors[i]
        if isinstance(x, Sequence) and not isinstance(x, str) and any(
                isinstance(e, TensorList) for e in x):
            return type(x)(pick(e, i) for e in x)
        return x

    return TensorList(
        func(*(pick(a, i) for a in args), **{k: pick(v, i) for k, v in kwargs.items()})
        for i in range(length)
    )
