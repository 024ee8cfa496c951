"""The loaded kernel library as Python sees it: which dtypes and devices it serves, the data
pointers it is handed, and its exported C functions with their argument types."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence

import numpy as np
import torch

from trainop.kernels.boundary import PLAIN_TYPES
from trainop.kernels.native import metadata
from trainop.kernels.native.build import load, unavailable_reason

SUFFIXES = {torch.float32: "f32", torch.float64: "f64"}
DTYPES = tuple(SUFFIXES)
# The uniform signature of the rule kernels (see csrc/driver.c).
RULE_ARGS = [ctypes.c_int64] + [ctypes.c_void_p] * 5 + [ctypes.c_int]
_functions: dict[str, ctypes._CFuncPtr] = {}
_data_ptr = torch.Tensor.data_ptr
_is_contiguous = torch.Tensor.is_contiguous
_numel = torch.Tensor.numel


def available() -> bool:
    """Whether the kernels are built and loaded (building them on the first call)."""
    return load() is not None


def supports(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether tensors of this dtype and device can go to the kernels (when contiguous)."""
    return device.type == "cpu" and dtype in SUFFIXES and available()


def pointers(lists: Sequence[Sequence[torch.Tensor]]) -> np.ndarray | None:
    """The data pointers of every tensor, list after list, or ``None`` if one is not contiguous
    (the caller has checked dtype and device once per list, see ``supports``). Read in bulk
    by the metadata reader where it is built, else tensor by tensor."""
    reader = metadata.load()
    if reader is not None:
        lists = [t if type(t) is list else list(t) for t in lists]
        out = np.empty(sum(map(len, lists)), dtype=np.uint64)
        return out if reader.pointers(lists, out.ctypes.data) else None
    flat = [t for tensors in lists for t in tensors]
    if not all(map(_is_contiguous, flat)):
        return None
    return np.fromiter(map(_data_ptr, flat), dtype=np.uint64, count=len(flat))


def reads_in_c() -> bool:
    """Whether the metadata reader is built (the bulk reads run in C)."""
    return metadata.load() is not None


#: torch device type -> c10's DeviceType number (the devices ``plain_on`` reads).
_DEVICE_TYPES = {"cpu": 0, "cuda": 1}


def plain_on(lists: list[list[torch.Tensor]], dtypes: tuple[torch.dtype, ...],
             device: torch.device) -> tuple[np.ndarray, np.ndarray] | None:
    """Where every tensor of every list is exactly a ``torch.Tensor`` or ``nn.Parameter``,
    strided, contiguous, on ``device`` and of its list's dtype (one per list): their data
    pointers (uint64) and element counts (int64), list after list, read in one C pass; else
    ``None`` (also where the metadata reader is not built: the caller checks in Python)."""
    reader = metadata.load()
    kind = _DEVICE_TYPES.get(device.type)
    if reader is None or kind is None:
        return None
    total = sum(map(len, lists))
    out = np.empty(2 * total, dtype=np.uint64)
    status = reader.plain(lists, PLAIN_TYPES, dtypes, out.ctypes.data,
                          out.ctypes.data + 8 * total, False, kind,
                          -1 if device.index is None else device.index)
    return (out[:total], out[total:].view(np.int64)) if status == 0 else None


def sizes(tensors: Sequence[torch.Tensor]) -> np.ndarray:
    """Each tensor's number of elements, as the int64 array the kernels take."""
    reader = metadata.load()
    if reader is not None:
        out = np.empty(len(tensors), dtype=np.int64)
        reader.sizes(tensors if type(tensors) is list else list(tensors), out.ctypes.data)
        return out
    return np.fromiter(map(_numel, tensors), dtype=np.int64, count=len(tensors))


def doubles(values: Sequence[float]) -> bytes:
    """``values`` as C doubles, one after another: what a kernel's ``const double *``
    argument reads (bytes pass as a pointer to their buffer; a quarter of numpy's cost)."""
    return struct.pack(f"{len(values)}d", *values)


def function(name: str, argtypes: list = RULE_ARGS, restype=ctypes.c_int):
    """The exported C function ``name`` with its argument and result types set (looked up
    once); raises ``RuntimeError`` where the kernels are unavailable."""
    found = _functions.get(name)
    if found is None:
        library = load()
        if library is None:
            raise RuntimeError(f"trainop's native kernels are unavailable: {unavailable_reason()}")
        found = getattr(library, name)
        found.argtypes = argtypes
        found.restype = restype
        _functions[name] = found
    return found
