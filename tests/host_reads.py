"""A context in which reading a tensor's value on the host raises (for no-sync tests)."""

from __future__ import annotations

import contextlib

import torch

#: What reads a device value: what the issues' no-sync checks patch.
READS = ("item", "__bool__", "tolist", "numpy")
#: Also the conversions; the native CPU kernels read CPU scalar hyperparameters this way.
ALL_READS = (*READS, "__float__", "__int__", "__index__")


@contextlib.contextmanager
def no_host_reads(names=READS):
    saved = {n: getattr(torch.Tensor, n) for n in names}

    def boom(*args, **kwargs):
        raise AssertionError("a tensor value was read on the host inside the step")

    try:
        for n in names:
            setattr(torch.Tensor, n, boom)
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)
