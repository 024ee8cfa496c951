"""Issue #44, item 4: the Triton path's layout bookkeeping is thread-safe, with nothing
half-applied. Threads stepping optimizers of their own once shared one layout cache with no
lock: one thread's eviction iterated the cache while another's inserted or evicted, raising
"OrderedDict mutated during iteration" (or a ``KeyError``) in the middle of a step whose first
groups were already written. Now each optimizer's entry has its own cache, and the entry of
calls made without an optimizer (``kernels.triton.run``) holds a lock around its bookkeeping.

Under Triton's interpreter the kernels run one at a time (the interpreter's lock), so a plain
many-thread test passes with or without the fix. Here the interleaving is forced, never left
to the scheduler: the cache's limit is 4 layouts, each thread has more groups than that, and
each thread's first look into an eviction (``Layout.pinned``) waits there until every other
thread is waiting too: at the same place, or for the entry's lock (``Rendezvous``), or done.
Without the lock (or with the old shared cache) all threads are inside one eviction at once.

The launches of the rule are mocked (``table_launch_mock``: this test is about the host's
bookkeeping; the kernels' numbers are tested elsewhere): the mock reads the launch's block
records and device table as the GPU would, resolves each address to a tensor of the launching
thread (anything else is an error) and applies gradient descent's rule in float32 to that
range. Afterwards every parameter must be exactly ``w - lr*g``, step after step,
computed here independently: a step cut short by an exception, or a block of a stale or
foreign table, shows as an error or a wrong value. Counts, not times."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from table_launch_mock import Device, mocked_rule, set_thread_index, thread_index

import trainop
from trainop.kernels import triton as tk

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]

THREADS, STEPS, LIMIT = 4, 3, 4
#: Seconds a thread waits for the others before the test fails (it never waits that long).
PATIENCE = 120.0
_met = threading.local()


class Rendezvous:
    """Where the threads meet: ``meet()`` returns once every other thread is waiting in
    ``meet()``, blocked on the entry's lock (``Lock``) or done. With a lock around the cache,
    the thread inside the eviction holds it and the others queue for it; without one, all of
    them are inside at once."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.waiting = 0
        self.done = 0
        self.met: list[int] = []
        self.stuck = False
        self.cond = threading.Condition()

    def _everyone(self) -> bool:
        return self.waiting + self.done == self.threads

    def meet(self) -> None:
        with self.cond:
            self.waiting += 1
            self.met.append(thread_index())
            self.cond.notify_all()
            if not self.cond.wait_for(self._everyone, timeout=PATIENCE):
                self.stuck = True  # (a lock the rendezvous does not know of: fail, not hang)
        self.leave()

    def blocked(self) -> None:
        with self.cond:
            self.waiting += 1
            self.cond.notify_all()

    def leave(self) -> None:
        with self.cond:
            self.waiting -= 1

    def finished(self) -> None:
        with self.cond:
            self.done += 1
            self.cond.notify_all()


class Lock:
    """The entry's lock, telling the rendezvous when a thread waits for it."""

    def __init__(self, rendezvous: Rendezvous) -> None:
        self.real = threading.RLock()
        self.rendezvous = rendezvous

    def __enter__(self) -> Lock:
        if not self.real.acquire(blocking=False):
            self.rendezvous.blocked()
            self.real.acquire()
            self.rendezvous.leave()
        return self

    def __exit__(self, *exc) -> None:
        self.real.release()


def _model(index: int) -> tuple[list[list[torch.nn.Parameter]], list[float]]:
    """6 + index groups of two tensors each (each group one table launch), and their lrs."""
    gen = torch.Generator().manual_seed(index)
    params = [[torch.nn.Parameter(torch.randn(1 + (g + j) % 9, generator=gen))
               for j in range(2)] for g in range(6 + index)]
    return params, [0.01 * (1 + g % 5) for g in range(len(params))]


def _gradients(index: int, step: int, params) -> list[list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(100 * index + step)
    return [[torch.randn(p.numel(), generator=gen) for p in ps] for ps in params]


def _worker(index: int, shared: bool, device: Device, rendezvous: Rendezvous,
            results: dict) -> None:
    """``STEPS`` steps of gradient descent: an optimizer of the thread's own, or (``shared``)
    one ``kernels.triton.run`` call per group, through the entry of calls without one."""
    set_thread_index(index)
    params, lrs = _model(index)
    results[index] = params
    device.add([p for ps in params for p in ps])
    opt = trainop.GradientDescentOptimizer(
        0.1, params=[{"params": ps, "lr": lr} for ps, lr in zip(params, lrs, strict=True)],
        implementation="triton")
    try:
        for step in range(STEPS):
            grads = _gradients(index, step, params)
            device.add([g for gs in grads for g in gs])  # (kept alive there)
            if shared:
                with torch.no_grad():
                    for ps, gs, lr in zip(params, grads, lrs, strict=True):
                        assert tk.run("gradient_descent", [ps, gs], [lr])
                continue
            for ps, gs in zip(params, grads, strict=True):
                for p, g in zip(ps, gs, strict=True):
                    p.grad = g
            opt.step()
    except Exception as error:  # (reported by the test, with the thread's index)
        device.errors.append(f"thread {index}: {type(error).__name__}: {error!r}")
    finally:
        rendezvous.finished()


def _expected(index: int) -> list[np.ndarray]:
    """Gradient descent in float32, by hand: ``w - lr*g`` at every step."""
    params, lrs = _model(index)
    out = [[p.detach().numpy().copy() for p in ps] for ps in params]
    for step in range(STEPS):
        grads = _gradients(index, step, params)
        for ws, gs, lr in zip(out, grads, lrs, strict=True):
            for w, g in zip(ws, gs, strict=True):
                w -= g.numpy() * np.float32(lr)
    return [w for ws in out for w in ws]


@pytest.mark.parametrize("shared", [False, True], ids=["own_optimizers", "shared_entry"])
def test_threads_meeting_inside_an_eviction_apply_every_step_whole(monkeypatch, shared):
    from trainop.kernels.triton import tables

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(tables, "LIMIT", LIMIT)
    rendezvous, device, results = Rendezvous(THREADS), Device(), {}
    if shared:  # a fresh entry of calls without an optimizer, its lock told to the rendezvous
        from trainop.kernels.triton import entry

        fresh = entry.Entry(steps=False)
        fresh.lock = Lock(rendezvous)
        monkeypatch.setattr(entry, "_SHARED", fresh)
    real_pinned = tables.Layout.pinned

    def pinned(layout):
        if not getattr(_met, "done", False):  # the thread's first look into an eviction
            _met.done = True
            rendezvous.meet()
        return real_pinned.fget(layout)

    monkeypatch.setattr(tables.Layout, "pinned", property(pinned))
    workers = [threading.Thread(target=_worker, args=(i, shared, device, rendezvous, results))
               for i in range(THREADS)]
    with mocked_rule(device):
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert not rendezvous.stuck
    assert sorted(rendezvous.met) == list(range(THREADS))  # each was inside an eviction
    assert device.errors == []
    for index in range(THREADS):  # nothing half-applied: every value the formula's
        got = [p.detach().numpy() for ps in results[index] for p in ps]
        for ours, theirs in zip(got, _expected(index), strict=True):
            np.testing.assert_array_equal(ours, theirs)
