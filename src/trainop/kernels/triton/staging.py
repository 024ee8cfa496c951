"""Values sent from the host into an existing device tensor, capturable, with no allocation
after the first step: the Triton path's way of giving the device what changes between steps
(gradient addresses, Python-number hyperparameters).

A ``Staging`` keeps a few host rows (pinned on CUDA, so the copy does not wait for the
device), each used for one copy at a time: a row is written again only once its last copy
finished (its event; on the CPU copies are synchronous). A copy made while a CUDA graph is
being captured is recorded in the graph, which at every replay reads its host row again: that
row is frozen (never written again) and, from then on, every ``send`` copies even an unchanged
value, since a replay may have written the device tensor in between; a capture always copies.
A capture takes a free row without asking the device (no event query is allowed while
capturing; ``torch.cuda.graph`` synchronizes before it captures); with every row frozen it
raises.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["ROWS", "Staging", "capturing", "warm_up_error"]

_NUMPY = {torch.int64: np.int64, torch.float32: np.float32}
#: Host rows made with a ``Staging`` (more are added when all are in flight, never while
#: capturing).
ROWS = 4


def capturing(device: torch.device) -> bool:
    """Whether a CUDA graph is being captured on ``device``'s current stream (the one
    function the tests replace to simulate a capture on the CPU)."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def warm_up_error(what: str) -> RuntimeError:
    """The error for something the Triton path would create during a CUDA graph capture."""
    return RuntimeError(
        f"trainop's Triton kernels met {what} during a CUDA graph capture; the device tables "
        "and constants of a layout are made at its first step, which a capture cannot "
        "record. Run the same step once before capturing (torch's warm-up): later steps, "
        "gradients at new addresses and new hyperparameter values included, make nothing new")


class Staging:
    """Host rows of ``width`` values of ``dtype`` copied into device tensors of ``device``
    (see the module doc). ``send(values, dest)`` copies ``values`` (a tuple) into ``dest``
    unless they are the ones last sent (and no capture recorded a copy)."""

    __slots__ = ("cuda", "device", "dtype", "events", "frozen", "last", "replayed", "rows",
                 "views", "width")

    def __init__(self, width: int, dtype: torch.dtype, device: torch.device) -> None:
        if capturing(device):
            raise warm_up_error("a new layout")
        self.width, self.dtype, self.device = width, dtype, device
        self.cuda = device.type == "cuda"
        self.rows: list[torch.Tensor] = []
        self.views: list = []  # each row as a numpy array (written without torch's dispatch)
        self.events: list = []
        self.frozen: list[bool] = []
        self.last: tuple | None = None
        self.replayed = False  # a capture recorded a copy: every send copies
        for _ in range(ROWS):
            self._grow()

    def _grow(self) -> int:
        row = torch.zeros(max(self.width, 1), dtype=self.dtype)
        if self.cuda:
            row = row.pin_memory()
        self.rows.append(row)
        # a numpy view of the row's memory (``Tensor.numpy`` would be a host read to the
        # no-sync checks, which patch it)
        memory = (ctypes.c_byte * (row.numel() * row.element_size())).from_address(
            row.data_ptr())
        self.views.append(np.frombuffer(memory, dtype=_NUMPY[self.dtype]))
        self.events.append(None)
        self.frozen.append(False)
        return len(self.rows) - 1

    def _free_row(self, capture: bool) -> int:
        for i, frozen in enumerate(self.frozen):
            if frozen:
                continue
            event = self.events[i]
            if capture or event is None or event.query():
                return i
        if capture:
            raise RuntimeError(
                "trainop's Triton kernels: every host row of a device table is held by a "
                f"captured CUDA graph ({len(self.rows)} captures of one layout); capture "
                "fewer graphs of one model, or step once eagerly between captures")
        return self._grow()

    def changed(self, key: object) -> bool:
        """Whether ``send(..., key=key)`` would copy: the values differ from the last sent, a
        capture recorded a copy (a replay may have written the device tensor since), or a
        capture is under way (the graph must write them at every replay: another model of the
        same sizes may share a read pass's table between replays)."""
        return self.replayed or key != self.last or capturing(self.device)

    def send(self, values: Sequence, dest: torch.Tensor, *, key: tuple | None = None) -> None:
        """Copy ``values`` into ``dest`` (a device tensor of ``len(values)`` elements) through
        a free host row, unless ``key`` (default: the values, a tuple) is the one last sent."""
        key = tuple(values) if key is None else key
        if not self.changed(key):
            return
        capture = capturing(self.device)
        i = self._free_row(capture)
        n = len(values)
        self.views[i][:n] = values
        row = self.rows[i]
        dest.copy_(row if n == row.numel() else row[:n], non_blocking=self.cuda)
        if capture:
            self.frozen[i] = self.replayed = True
        elif self.cuda:
            event = self.events[i] or torch.cuda.Event()
            event.record(torch.cuda.current_stream(self.device))
            self.events[i] = event
        self.last = key
