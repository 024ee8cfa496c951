"""Device operations per step, counted: every ATen operation the step issues (a
``TorchDispatchMode`` sees each one: a kernel launch, a copy, a small allocation, or a view
that launches nothing) and every Triton launch, by name.

Used by ``trainop bench --host`` (the side-by-side table) and by the tests that bound a step's
operations (``tests/test_op_count.py``). On the CPU, torch's recipe issues the same ATen
operations as on CUDA (its ops are dispatched alike: ``_amp_foreach_non_finite_check_and_unscale_``,
``_foreach_norm``, ``_fused_adam_``, ``_amp_update_scale_``); a Triton launch is counted where
the interpreter runs it (``TRITON_INTERPRET=1``) or, on a GPU, where the JIT launches it.

``METADATA`` names the operations that launch nothing on a device (views, the profiler's
``record_function`` markers): ``OpCount.device`` leaves them out, ``OpCount.total`` keeps them.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["METADATA", "OpCount", "counting", "count_step"]

#: Operations that launch nothing on a device: views and aliases of existing memory, a
#: Python scalar lifted to a tensor, the profiler's markers.
METADATA = frozenset({
    "view", "_unsafe_view", "detach", "alias", "slice", "select", "unbind", "reshape",
    "as_strided", "expand", "squeeze", "unsqueeze", "t", "transpose", "permute", "lift_fresh",
    "_record_function_enter_new", "_record_function_exit", "split", "unflatten", "flatten",
})


@dataclass
class OpCount:
    """What one counted block issued: ATen operations and Triton launches, by name."""

    ops: Counter = field(default_factory=Counter)
    launches: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        """Every ATen operation (views and markers included)."""
        return sum(self.ops.values())

    @property
    def device(self) -> int:
        """The ATen operations that may launch work or copy on a device (``METADATA`` left
        out)."""
        return sum(n for name, n in self.ops.items() if name not in METADATA)

    @property
    def triton(self) -> int:
        """Triton launches."""
        return sum(self.launches.values())

    def summary(self, top: int = 6) -> str:
        """``"N ops (M on the device) + L Triton launches; most: mul x8, ..."``."""
        most = ", ".join(f"{k} x{n}" for k, n in self.ops.most_common(top))
        return (f"{self.total} ops ({self.device} on the device) + {self.triton} Triton "
                f"launches" + (f"; most: {most}" if most else ""))


class _Mode(TorchDispatchMode):
    def __init__(self, ops: Counter) -> None:
        super().__init__()
        self._ops = ops
        self.paused = 0  # inside a Triton launch (the interpreter's own torch calls)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.paused:
            self._ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _triton_launches(launches: Counter, mode: _Mode) -> Iterator[None]:
    """Count Triton launches (interpreted or compiled) by kernel name, where Triton is
    installed; they still run, and what runs inside one is not counted as the step's (the
    interpreter's own tensor calls)."""
    patched = []
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except Exception:  # no Triton: nothing to count
        yield
        return
    for cls in (InterpretedFunction, JITFunction):
        real = cls.run

        def counted(self, *args, _real=real, **kwargs):
            fn = getattr(self, "fn", None)
            launches[getattr(fn, "__name__", "kernel")] += 1
            mode.paused += 1
            try:
                return _real(self, *args, **kwargs)
            finally:
                mode.paused -= 1

        cls.run = counted
        patched.append((cls, real))
    try:
        yield
    finally:
        for cls, real in patched:
            cls.run = real


@contextlib.contextmanager
def counting() -> Iterator[OpCount]:
    """Count every ATen operation and Triton launch issued in the block."""
    result = OpCount()
    mode = _Mode(result.ops)
    with _triton_launches(result.launches, mode), mode:
        yield result


def count_step(step: Callable[[], Any], *, prepare: Callable[[], Any] | None = None,
               warmup: int = 2) -> OpCount:
    """The operations of one ``step()`` after ``warmup`` steps (slots, layouts and device
    tables made, as in a training loop's steady state); ``prepare()`` (uncounted) runs before
    every step, e.g. to give the parameters new gradients."""
    for _ in range(warmup):
        if prepare is not None:
            prepare()
        step()
    if prepare is not None:
        prepare()
    with counting() as found:
        step()
    return found
