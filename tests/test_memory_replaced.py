"""A parameter's or slot's memory replaced after the first step (``p.data = t``) so that an
update would write one element twice is refused before anything is written, on every
implementation (#47 D1: an expanded, stride-0 tensor raised in torch mid-step; D2: ``c.data =
b.data`` or half-overlapping views were accepted by foreach and reference, a double update, and
refused by native and Triton only after an earlier param group was written). Parameters,
slots and counters stay as they were; the geometry (sizes, where the views start and end,
which group and which tensor) varies."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trainop
from trainop.kernels import native
from trainop.kernels import triton as tk

IMPLS = ["reference", "foreach", "native", "triton"]
MESSAGE = "Expected the parameters and slots an update writes not to share memory"


def _implementation(impl, monkeypatch):
    if impl == "native" and not native.available():
        pytest.skip("the native kernels are not built here")
    if impl == "triton":
        if not tk.available():
            pytest.skip("Triton is not installed")
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def _everything(opt, params):
    out = [p.detach().clone() for p in params]
    for p in params:
        out += [t.clone() for _, t in sorted(opt.state[p].items())]
    for g in opt.param_groups:
        out += [t.clone() for _, t in sorted(g["non_slot"].items())]
    return out


def _setup(impl, n, sizes, grouped):
    params = [torch.nn.Parameter(torch.full((k,), float(i + 1))) for i, k in enumerate(sizes)]
    groups = [{"params": [p]} for p in params] if grouped else params
    opt = trainop.AdamOptimizer(learning_rate=0.1, params=groups, implementation=impl)
    for _ in range(n):  # the first step makes the slots, the next ones take the step plan
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()
    return opt, params


def _refused(opt, params):
    for p in params:
        p.grad = torch.ones_like(p)
    before = _everything(opt, params)
    with pytest.raises(ValueError, match=MESSAGE):
        opt.step()
    after = _everything(opt, params)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the env is the same
@given(data=st.data())
def test_shared_memory_after_steps_is_refused_before_any_write(impl, data, monkeypatch):
    _implementation(impl, monkeypatch)
    n = data.draw(st.integers(1, 3), label="steps before")
    count = data.draw(st.integers(2, 4), label="parameters")
    size = data.draw(st.integers(2, 9), label="size")
    grouped = data.draw(st.booleans(), label="a param group each")
    opt, params = _setup(impl, n, [size] * count, grouped)
    b, c = sorted(data.draw(st.lists(st.integers(0, count - 1), min_size=2, max_size=2,
                                     unique=True), label="which two"))
    kind = data.draw(st.sampled_from(["same", "overlap", "expand"]), label="how")
    if kind == "same":
        params[c].data = params[b].data
    elif kind == "overlap":  # two views of one storage, overlapping by 1..size-1 elements
        shift = data.draw(st.integers(1, size - 1), label="shift")
        base = torch.zeros(size + shift)
        params[b].data, params[c].data = base[:size], base[shift:]
    else:  # an expanded tensor: its own elements overlap
        params[c].data = torch.ones(1).expand(size)
    _refused(opt, params)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("impl", IMPLS)
def test_memory_replaced_apart_is_taken(impl, monkeypatch):
    """A replacement that shares nothing is an ordinary step (the check is not a refusal of
    every ``p.data = t``)."""
    _implementation(impl, monkeypatch)
    opt, params = _setup(impl, 2, [3, 3], True)
    params[1].data = torch.full((3,), 5.0)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    assert params[1].detach().lt(5.0).all()
