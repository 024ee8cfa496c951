"""The Triton path's device contract, as torch's own kernels keep it:

- a launch runs on its tensors' device, whatever the current device is (``guard``: Triton
  launches on the current device, so each entry point makes the tensors' device current
  while it runs, as ``torch.cuda.device`` does);
- a step runs on the current stream;
- device state that lives across steps (a layout's table, its hyperparameter scalars, the
  read pass's work space) is ordered on the stream that uses it (``order``): its holder
  remembers the last stream; on a change the new stream waits for the old one (so a rewrite
  of a table does not race with the last step's reads of it) and the tensors are recorded on
  the new stream (so the caching allocator does not reuse their memory, when an eviction or
  the optimizer's end frees them, before that stream's work is done).

``on_cuda`` is the one function the tests replace to show all this on the CPU, with torch's
device and stream calls mocked (no GPU, let alone two, in CI).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["guard", "on_cuda", "order"]


def on_cuda(device: torch.device) -> bool:
    """Whether ``device`` is a CUDA device (its launches need a guard and stream order)."""
    return device.type == "cuda"


def guard(device: torch.device) -> contextlib.AbstractContextManager:
    """``device`` made current while the block runs (a CUDA device), else nothing."""
    return torch.cuda.device(device) if on_cuda(device) else contextlib.nullcontext()


def order(holder: Any, device: torch.device, tensors: Iterable[torch.Tensor | None]) -> None:
    """Order ``holder``'s device ``tensors`` on the current stream of ``device`` (see the
    module doc): ``holder.stream`` is the stream that used them last (``None``: not yet)."""
    if not on_cuda(device):
        return
    stream = torch.cuda.current_stream(device)
    last = holder.stream
    if last is not None and last != stream:
        stream.wait_stream(last)
        for t in tensors:
            if t is not None:
                t.record_stream(stream)
    holder.stream = stream
