"""TF's ``DataType`` enum numbers (``types.proto``) and the torch dtypes they read as."""

from __future__ import annotations

import torch

__all__ = ["TF_TO_TORCH", "TORCH_TO_TF", "exact_int", "tf_dtype_name"]

TF_TO_TORCH: dict[int, torch.dtype] = {
    1: torch.float32, 2: torch.float64, 3: torch.int32, 4: torch.uint8, 5: torch.int16,
    6: torch.int8, 8: torch.complex64, 9: torch.int64, 10: torch.bool, 14: torch.bfloat16,
    17: torch.uint16, 18: torch.complex128, 19: torch.float16, 22: torch.uint32,
    23: torch.uint64,
}
TORCH_TO_TF: dict[torch.dtype, int] = {v: k for k, v in TF_TO_TORCH.items()}

_NAMES = {7: "string", 11: "qint8", 12: "quint8", 13: "qint32", 15: "qint16", 16: "quint16",
          20: "resource", 21: "variant"}


def exact_int(tensor: torch.Tensor) -> int:
    """The value of a one-element integer tensor as a Python int, uint64 values above int64's
    range included (``int()`` raises a bare RuntimeError on those)."""
    if tensor.dtype == torch.uint64:
        return int(tensor.reshape(1).view(torch.int64)) % (1 << 64)
    return int(tensor)


def tf_dtype_name(number: int) -> str:
    """A readable name for a TF dtype number (``float32``, ``string``, ``dtype 99``)."""
    if number in TF_TO_TORCH:
        return str(TF_TO_TORCH[number]).removeprefix("torch.")
    return _NAMES.get(number, f"dtype {number}")
