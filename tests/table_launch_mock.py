"""Gradient descent's Triton launch mocked for tests of the host's bookkeeping (the layout
cache, threads): the kernels' numbers are tested elsewhere, so here each launch of the rule's
kernel is replaced by its rule done in torch over the launch's own block records and device
table, as the GPU reads them (each block's tensor, element range, and its variable's and
gradient's addresses). ``Device`` resolves each address to a tensor of the launching thread;
anything else is an error (on a GPU, a write to memory not its own). The rule in float32:
``var[start:stop] -= grad[start:stop] * lr``, TF's ``var - lr*g``. Other launches (the step
counters') run as they are."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

__all__ = ["Device", "mocked_rule", "set_thread_index", "thread_index"]

_local = threading.local()


def thread_index() -> int:
    """The launching thread's index (``Device.add``'s owner; 0 unless set)."""
    return getattr(_local, "index", 0)


def set_thread_index(index: int) -> None:
    _local.index = index


class Device:
    """Every tensor a thread may launch over, by data pointer (keep the gradients alive here,
    so no address is reused), and the errors the mocked launches found."""

    def __init__(self) -> None:
        self.owner: dict[int, tuple[int, torch.Tensor]] = {}
        self.errors: list[str] = []
        self.blocks = 0
        self.lock = threading.Lock()

    def add(self, tensors) -> None:
        with self.lock:
            for t in tensors:
                self.owner[t.data_ptr()] = (thread_index(), t.detach().view(-1))

    def at(self, address: int) -> torch.Tensor | None:
        index, tensor = self.owner.get(address, (None, None))
        return tensor if index == thread_index() else None


@contextlib.contextmanager
def mocked_rule(device: Device) -> Iterator[Device]:
    """Triton's interpreted launches of ``_gradient_descent`` done as the module doc says
    while the block runs (the interpreter on: ``TRITON_INTERPRET=1`` is the caller's)."""
    from triton.runtime.interpreter import InterpretedFunction

    real = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        if self.fn.__name__ != "_gradient_descent":
            return real(self, *args, grid=grid, warmup=warmup, **kwargs)
        if warmup:
            return None
        if not kwargs["TABLE"] or kwargs["HAS_MULT"] or kwargs["HAS_INF"]:
            device.errors.append(f"unexpected launch {kwargs}")
            return None
        _var, _grad, _half, h, _mult, _inf, count, table, records = args
        lr = h[0]
        for t, start, stop, _ in records[:4 * grid[0]].view(-1, 4).tolist():
            var, grad = device.at(int(table[t])), device.at(int(table[count + t]))
            if var is None or grad is None or stop > min(var.numel(), grad.numel()):
                device.errors.append(f"thread {thread_index()}: block ({t}, {start}, {stop})"
                                     " of memory not its own")
                continue
            var[start:stop] -= grad[start:stop] * lr
            device.blocks += 1
        return None

    InterpretedFunction.run = run
    try:
        yield device
    finally:
        InterpretedFunction.run = real
