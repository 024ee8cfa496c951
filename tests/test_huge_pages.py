"""Large slots and flat buffers live in their own mappings advised onto transparent huge pages
(Linux), and nothing else is advised.

The kernel records ``madvise(MADV_HUGEPAGE)`` as the ``hg`` flag of a mapping in
``/proc/self/smaps``; the tests read it back for the tensor's memory. Whether huge pages are then
actually free is up to the machine, so the flag, not ``AnonHugePages``, is asserted.
"""

from __future__ import annotations

import copy
import pickle
import re
import sys
from pathlib import Path

import pytest
import torch

import trainop
from trainop.kernels import huge_pages

BIG = 10 * 2**20  # float32 elements: 40 MiB

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not huge_pages._supported(),
    reason="transparent huge pages are not available here")


def mapping_of(t: torch.Tensor) -> tuple[str, bool]:
    """The name ('' for an anonymous mapping, '[heap]', ...) of the mapping holding the middle
    of ``t``, and whether it carries the MADV_HUGEPAGE flag."""
    address = t.data_ptr() + t.numel() * t.element_size() // 2
    inside, name = False, ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        header = re.match(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$", line)
        if header:
            inside = int(header[1], 16) <= address < int(header[2], 16)
            name = header[3]
        elif inside and line.startswith("VmFlags:"):
            return name, "hg" in line.split()[1:]
    raise AssertionError("no mapping holds the tensor")


def on_huge_pages(t: torch.Tensor) -> bool:
    return mapping_of(t) == ("", True)


def test_a_large_tensor_gets_an_advised_mapping_of_its_own():
    t = huge_pages.empty((BIG // 4, 4), torch.float32)
    assert on_huge_pages(t) and t.shape == (BIG // 4, 4) and t.is_contiguous()
    t.fill_(0.25)
    assert t.min().item() == t.max().item() == 0.25


def test_the_advice_does_not_outlive_the_tensor():
    """Memory that torch hands out after ours was freed is not advised (no leak to others)."""
    for _ in range(3):
        t = huge_pages.empty((BIG,), torch.float32).fill_(1.0)
        del t
        assert not mapping_of(torch.empty(BIG).fill_(2.0))[1]


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("TRAINOP_HUGE_PAGES", "0")
    assert not mapping_of(huge_pages.empty((BIG,), torch.float32))[1]


def test_small_non_contiguous_and_non_cpu_tensors_are_plain():
    small = huge_pages.empty((huge_pages.MIN_BYTES // 4 - 1,), torch.float32)
    assert not mapping_of(small.fill_(0))[1]
    assert huge_pages.empty((BIG,), torch.float32, "meta").device.type == "meta"
    transposed = torch.zeros(4096, BIG // 4096).t()
    like = huge_pages.empty_like(transposed)
    assert like.stride() == transposed.stride()  # layout preserved, torch's allocation


def test_slots_survive_copies_and_pickling():
    var = torch.zeros(BIG, requires_grad=True)
    opt = trainop.AdamOptimizer(0.1, params=[var])
    var.grad = torch.ones(BIG)
    opt.step()
    for other in (copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))):
        (p,) = other.param_groups[0]["params"]
        for name in ("m", "v"):
            assert torch.equal(other.state[p][name], opt.state[var][name])


@pytest.mark.parametrize("name, slots", [("AdagradOptimizer", ["accumulator"]),
                                         ("LazyAdamOptimizer", ["m", "v"]),
                                         ("RMSPropOptimizer", ["rms", "momentum"])])
def test_an_optimizers_large_slots_are_on_huge_pages(name, slots):
    var = torch.zeros(BIG, requires_grad=True)
    opt = getattr(trainop, name)(0.1)
    opt.apply_gradients([(torch.zeros(BIG), var)])
    for slot in slots:
        tensor = opt.get_slot(var, slot)
        assert on_huge_pages(tensor), slot
        assert tensor.dtype == var.dtype and tensor.shape == var.shape


def test_slot_initial_values_on_huge_pages():
    """The page size is all that changes: TF's initial slot values fill every element."""
    var = torch.zeros(BIG, requires_grad=True)
    opt = trainop.RMSPropOptimizer(0.1)
    slots = opt._make_slots(var, opt.defaults)
    assert all(on_huge_pages(t) for t in slots.values())
    assert slots["rms"].min().item() == slots["rms"].max().item() == 1.0
    assert slots["momentum"].abs().max().item() == 0.0


def test_flat_buffers_are_on_huge_pages():
    params = [torch.zeros(BIG // 2, requires_grad=True) for _ in range(2)]
    opt = trainop.MomentumOptimizer(0.1, 0.9, params=params)
    bucket = trainop.flatten(opt).buckets[0]
    assert on_huge_pages(bucket.param_buffer) and on_huge_pages(bucket.grad_buffer)
    assert all(on_huge_pages(b) for b in bucket.slot_buffers.values())
    assert bucket.grad_buffer.abs().max().item() == 0.0
    assert bucket.slot_buffers["momentum"].abs().max().item() == 0.0
