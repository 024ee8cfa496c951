"""Issue #44, item 4 (and #47's thread break): the Triton path's layouts belong to their
optimizer. An optimizer with more param groups than the cache's limit (layer-wise LR decay:
2 x 48 groups) used to rebuild every layout at every step (a shared cache of 64, least recently
used out), so such a step could not be captured either. Counted, never timed: layouts made per
step, and every value by the formula. (Threads: ``test_triton_cache_threads``.)"""

from __future__ import annotations

import pytest
import torch
from table_launch_mock import Device, mocked_rule

import trainop
from trainop.bench.host import counted_launches
from trainop.kernels import triton as tk

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]

GROUPS = 100


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _model(groups: int, seed: int) -> tuple[list, list]:
    """``groups`` param groups of two tensors each (so each is a table launch), sizes 1-9."""
    gen = torch.Generator().manual_seed(seed)
    params = [[torch.nn.Parameter(torch.randn(1 + (g + j) % 9, generator=gen))
               for j in range(2)] for g in range(groups)]
    return params, [{"params": ps, "lr": 0.01 * (1 + g % 5)} for g, ps in enumerate(params)]


def _grads(params, k: int) -> None:
    gen = torch.Generator().manual_seed(1000 + k)
    for ps in params:
        for p in ps:
            p.grad = torch.randn(p.numel(), generator=gen)  # new addresses every step


def _made(monkeypatch) -> list:
    """Every ``tables.Layout`` made from now on."""
    from trainop.kernels.triton import tables

    made = []
    real = tables.Layout.__init__

    def counted(self, *args, **kwargs):
        made.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(tables.Layout, "__init__", counted)
    return made


def test_a_hundred_groups_build_their_layouts_once(monkeypatch):
    """100 param groups (more than the cache's limit): the first step makes one layout per
    group, later steps (new gradient addresses every step) make none; every value is
    gradient descent's ``w - lr*g``, step after step. The rule's launches are mocked
    (``table_launch_mock``: done in torch over each launch's own block records and table,
    the kernels' numbers being tested elsewhere), so a table that points at another group's
    tensors, or at last step's gradients, shows as an error or a wrong value."""
    made = _made(monkeypatch)
    params, groups = _model(GROUPS, 0)
    start = [[p.detach().clone() for p in ps] for ps in params]
    opt = trainop.GradientDescentOptimizer(0.1, params=groups, implementation="triton")
    device, per_step = Device(), []
    device.add([p for ps in params for p in ps])
    with mocked_rule(device):
        for k in range(3):
            _grads(params, k)
            device.add([p.grad for ps in params for p in ps])  # (kept alive there)
            made.clear()
            opt.step()
            per_step.append(len(made))
    assert per_step == [GROUPS, 0, 0]
    assert device.errors == [] and device.blocks == 3 * 2 * GROUPS
    for k in range(3):  # the formula, in float32
        gen = torch.Generator().manual_seed(1000 + k)
        for ws, group in zip(start, groups, strict=True):
            for w in ws:
                w -= torch.randn(w.numel(), generator=gen) * torch.tensor(group["lr"])
    for ours, theirs in zip(params, start, strict=True):
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a.detach(), b)


def test_a_capture_after_warm_up_works_past_the_cache_limit(monkeypatch):
    """A simulated CUDA graph capture (``staging.capturing`` says yes) of a step of 100
    groups after two warm-up steps: nothing to make, so no warm-up error. The launches are
    no-ops (the host's work only: whether a step makes anything is decided before them)."""
    from trainop.kernels.triton import staging

    params, groups = _model(GROUPS, 1)
    opt = trainop.AdamOptimizer(0.01, params=groups, implementation="triton")
    with counted_launches(run=False) as launched:
        for k in range(2):
            _grads(params, k)
            opt.step()
        _grads(params, 2)
        with monkeypatch.context() as patch:
            patch.setattr(staging, "capturing", lambda device: True)
            opt.step()  # (raised "...during a CUDA graph capture" when it rebuilt a layout)
    assert len(launched) == 3 * (GROUPS + 1)  # (each group's update, and the counters')
    assert all(layout.pinned for layout in tk.entry_of(opt).cache.values())


def test_layouts_of_tensors_no_longer_stepped_go_once_over_the_limit(monkeypatch):
    """Bounded all the same: an optimizer whose variables are new tensors every step (a
    rebuilt model) keeps at most the limit plus what its last steps used."""
    from trainop.kernels.triton import tables

    monkeypatch.setattr(tables, "LIMIT", 4)
    opt = trainop.GradientDescentOptimizer(0.1, implementation="triton")
    for k in range(12):
        (variables,), _ = _model(1, k)
        opt.apply_gradients([(torch.ones_like(v), v) for v in variables])
    assert len(tk.entry_of(opt).cache) <= 4 + 2
