"""Issue #44, items 2 and 3: the Triton path's device contract, shown on the CPU under Triton's
interpreter with torch's device and stream calls MOCKED (CI has no GPU, let alone two):
``device.on_cuda`` says yes for the CPU tensors, ``torch.cuda.device`` records the device it
makes current, ``torch.cuda.current_stream`` returns fake streams that record ``wait_stream``,
and ``Tensor.record_stream`` records its calls. What a real GPU adds (that a launch on the
wrong device faults, that an unordered rewrite races) cannot run here; what the code does
about it can.

- Every entry point (a dense bucket, a sparse gradient, the read pass of the pipeline,
  ``square_sums``, the module-level ``run``) launches each kernel with the tensors' device
  current (Triton launches on the current device).
- Device state that lives across steps is ordered on the stream that uses it: a step on a
  new stream waits for the last one and records the kept tensors on it; a step on the same
  stream does neither; two optimizers of the same sizes share no per-step buffer.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

import trainop
from trainop.kernels import triton as tk
from trainop.processing import ClipByGlobalNorm, GradientPipeline

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


class FakeStream:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: FakeStream) -> None:
        self.log.append(("wait", self.name, other.name))

    def __repr__(self) -> str:
        return self.name


@pytest.fixture
def cuda(monkeypatch):
    """The mocked device and stream calls (see the module doc): ``current`` the device made
    current (``"elsewhere"`` outside any guard), ``stream`` the current stream, ``launches``
    the current device at each kernel launch, ``log`` the waits and records."""
    from triton.runtime.interpreter import InterpretedFunction

    from trainop.kernels.triton import device

    log: list = []
    state = SimpleNamespace(current="elsewhere", launches=[], log=log,
                            streams={name: FakeStream(name, log) for name in ("s0", "s1")})
    state.stream = state.streams["s0"]

    @contextlib.contextmanager
    def made_current(where):
        saved, state.current = state.current, str(where)
        try:
            yield
        finally:
            state.current = saved

    real_run = InterpretedFunction.run

    def launched(self, *args, **kwargs):
        state.launches.append(state.current)
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(device, "on_cuda", lambda where: True)
    monkeypatch.setattr(torch.cuda, "device", made_current)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda where=None: state.stream)
    monkeypatch.setattr(torch.Tensor, "record_stream",
                        lambda self, stream: log.append(("record", stream.name,
                                                         self.data_ptr())))
    monkeypatch.setattr(InterpretedFunction, "run", launched)
    return state


def _params(n: int = 3) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.linspace(-1.0, 1.0, 5 + 3 * i)) for i in range(n)]


def _grads(params, k: int) -> None:
    for i, p in enumerate(params):
        p.grad = torch.linspace(0.5, -0.25, p.numel()) * (k + i + 1)


def test_guard_makes_the_tensors_device_current(monkeypatch):
    """``device.guard`` of a CUDA device enters ``torch.cuda.device`` of that device (mocked:
    ``torch.device("cuda", 1)`` needs no GPU to exist)."""
    from trainop.kernels.triton import device

    entered = []

    @contextlib.contextmanager
    def made_current(where):
        entered.append(where)
        yield

    monkeypatch.setattr(torch.cuda, "device", made_current)
    with device.guard(torch.device("cuda", 1)):
        pass
    with device.guard(torch.device("cpu")):
        pass
    assert entered == [torch.device("cuda", 1)]


def test_every_entry_point_launches_on_the_tensors_device(cuda):
    """A dense bucket (Adam through the pipeline: its read pass too), a sparse gradient
    (Adagrad's rows, NovoGrad's densified rule), ``square_sums`` and the module-level
    ``run``: every kernel launches with the tensors' device current."""
    params = _params()
    opt = trainop.AdamOptimizer(0.1, params=params, implementation="triton")
    pipe = GradientPipeline(opt, [ClipByGlobalNorm(1.0)])
    _grads(params, 0)
    pipe.step()
    for name in ("AdagradOptimizer", "NovoGrad"):
        table = torch.nn.Parameter(torch.ones(6, 2))
        sparse = getattr(trainop, name)(0.1, params=[table], implementation="triton")
        table.grad = torch.sparse_coo_tensor(torch.tensor([[1, 4]]), torch.ones(2, 2), (6, 2))
        sparse.step()
    assert tk.square_sums([torch.ones(3), torch.ones(7)]) is not None
    assert tk.run("gradient_descent", [[torch.zeros(3)], [torch.ones(3)]], [0.5])
    kinds = len(cuda.launches)
    assert kinds >= 8, cuda.launches
    assert set(cuda.launches) == {"cpu"}, cuda.launches


def _kept(opt) -> dict[int, str]:
    """The data pointers of the device tensors ``opt``'s Triton entry keeps across steps."""
    return {t.data_ptr(): type(holder).__name__ for holder in tk.entry_of(opt).cache.values()
            for t in holder.device_tensors() if t is not None}


def _device_tensors(holder) -> tuple:
    """The device tensors a holder keeps across steps: a layout's, the counters' table and
    factors, a hyperparameter row."""
    if hasattr(holder, "device_tensors"):
        return tuple(holder.device_tensors())
    if hasattr(holder, "table"):
        return holder.table, holder.factors
    return (holder.h,)


def test_state_kept_across_steps_is_ordered_on_the_stream_that_uses_it(cuda):
    """Steps on s0, s0, then s1, s1, then s0 again: a change of stream makes the new stream
    wait for the old one and records every kept tensor (tables, hyperparameter scalars, the
    read pass's work space) on the new stream; steps on the same stream do neither."""
    params = _params()
    opt = trainop.AdamOptimizer(0.1, params=params, implementation="triton")
    pipe = GradientPipeline(opt, [ClipByGlobalNorm(1.0)])
    seen = []
    for k, name in enumerate(("s0", "s0", "s1", "s1", "s0")):
        cuda.stream = cuda.streams[name]
        cuda.log.clear()
        _grads(params, k)
        pipe.step()
        seen.append(list(cuda.log))
    assert seen[0] == seen[1] == seen[3] == []
    # the update layout and the read pass's (the entry's), the step counters' table (the
    # optimizer's) and the folded gate's scalars (the pipeline's)
    kept_by = [*tk.entry_of(opt).cache.values(), opt.__dict__["_triton_counters"],
               pipe.__dict__["_folded_scalars"]]
    kept = {t.data_ptr() for holder in kept_by for t in _device_tensors(holder) if t is not None}
    holders = len(kept_by)
    assert holders == 4
    for log, (new, old) in ((seen[2], ("s1", "s0")), (seen[4], ("s0", "s1"))):
        waits = [e for e in log if e[0] == "wait"]
        records = [e for e in log if e[0] == "record"]
        assert waits == [("wait", new, old)] * holders, log
        assert {e[1] for e in records} == {new}
        assert {e[2] for e in records} == set(kept), (records, kept)


def test_two_optimizers_of_the_same_sizes_share_no_per_step_buffer(cuda):
    """Two models of the same sizes (two streams' worth of work): each optimizer's entry
    keeps its own read pass and update layouts; nothing lands in the shared entry."""
    shared = len(tk.entry_of(None).cache)
    opts = []
    for _ in range(2):
        params = _params()
        opt = trainop.AdamOptimizer(0.1, params=params, implementation="triton")
        _grads(params, 0)
        GradientPipeline(opt, [ClipByGlobalNorm(1.0)]).step()
        opts.append(opt)
    first, second = (set(_kept(opt)) for opt in opts)
    assert first and second and not first & second
    assert len(tk.entry_of(None).cache) == shared
