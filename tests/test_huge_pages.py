"""Large slots and flat buffers are advised onto transparent huge pages (Linux), and only they.

Each test records the ``madvise`` calls (passing them on to libc) and checks that the
tensor's 2 MiB-aligned interior was advised, and that the kernel took the advice: it shows as
the ``hg`` flag of the mapping in ``/proc/self/smaps``. Whether huge pages are then actually
free is up to the machine, so the flag, not ``AnonHugePages``, is asserted. (The flag alone
would not do: memory from the heap keeps the flag of an earlier, freed tensor.)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import trainop
from trainop import _huge_pages

BIG = 10 * 2**20  # float32 elements: 40 MiB

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or _huge_pages._madvise() is None,
    reason="transparent huge pages are not available here")


def has_hg_flag(t: torch.Tensor) -> bool:
    """Whether the mapping holding the middle of ``t`` carries the MADV_HUGEPAGE flag."""
    address = t.data_ptr() + t.numel() * t.element_size() // 2
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        header = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if header:
            inside = int(header[1], 16) <= address < int(header[2], 16)
        elif inside and line.startswith("VmFlags:"):
            return "hg" in line.split()[1:]
    raise AssertionError("no mapping holds the tensor")


@pytest.fixture
def calls(monkeypatch):
    """The (address, length, advice) of every madvise call trainop makes, passed on to libc."""
    real, made = _huge_pages._madvise(), []

    def recording(address, length, advice):
        made.append((address, length, advice))
        return real(address, length, advice)

    monkeypatch.setattr(_huge_pages, "_madvise", lambda: recording)
    return made


def advised(t: torch.Tensor, calls) -> bool:
    """Whether trainop advised the aligned interior of ``t`` and the kernel took it."""
    start = t.data_ptr()
    first = -(-start // _huge_pages.HUGE_PAGE_BYTES) * _huge_pages.HUGE_PAGE_BYTES
    last = (start + t.numel() * t.element_size()) // _huge_pages.HUGE_PAGE_BYTES * (
        _huge_pages.HUGE_PAGE_BYTES)
    return (first, last - first, 14) in calls and has_hg_flag(t)


def test_a_fresh_large_tensor_is_advised_and_keeps_its_values(calls):
    t = _huge_pages.on_huge_pages(torch.empty(BIG))
    assert advised(t, calls)
    t.fill_(0.25)
    assert t.min().item() == t.max().item() == 0.25


def test_switched_off_by_the_environment(monkeypatch, calls):
    monkeypatch.setenv("TRAINOP_HUGE_PAGES", "0")
    _huge_pages.on_huge_pages(torch.empty(BIG))
    assert calls == []


def test_small_and_non_cpu_tensors_are_left_alone(calls):
    _huge_pages.on_huge_pages(torch.empty(_huge_pages.MIN_BYTES // 4 - 1))
    _huge_pages.on_huge_pages(torch.empty(BIG, device="meta"))
    assert calls == []


@pytest.mark.parametrize("name, slots", [("AdagradOptimizer", ["accumulator"]),
                                         ("LazyAdamOptimizer", ["m", "v"]),
                                         ("RMSPropOptimizer", ["rms", "momentum"])])
def test_an_optimizers_large_slots_are_advised(name, slots, calls):
    var = torch.zeros(BIG, requires_grad=True)
    opt = getattr(trainop, name)(0.1)
    opt.apply_gradients([(torch.zeros(BIG), var)])
    for slot in slots:
        tensor = opt.get_slot(var, slot)
        assert advised(tensor, calls), slot
        assert tensor.dtype == var.dtype and tensor.shape == var.shape


def test_slot_initial_values_on_huge_pages(calls):
    """The advice changes the page size only: TF's initial slot values fill every element."""
    var = torch.zeros(BIG, requires_grad=True)
    opt = trainop.RMSPropOptimizer(0.1)
    slots = opt._make_slots(var, opt.defaults)
    assert all(advised(t, calls) for t in slots.values())
    assert slots["rms"].min().item() == slots["rms"].max().item() == 1.0
    assert slots["momentum"].abs().max().item() == 0.0


def test_flat_buffers_are_advised(calls):
    params = [torch.zeros(BIG // 2, requires_grad=True) for _ in range(2)]
    opt = trainop.MomentumOptimizer(0.1, 0.9, params=params)
    bucket = trainop.flatten(opt).buckets[0]
    assert advised(bucket.param_buffer, calls) and advised(bucket.grad_buffer, calls)
    assert all(advised(b, calls) for b in bucket.slot_buffers.values())
    assert bucket.grad_buffer.abs().max().item() == 0.0
    assert bucket.slot_buffers["momentum"].abs().max().item() == 0.0
