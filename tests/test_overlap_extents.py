"""``contract.overlap.byte_extents``: the byte addresses ``[start, end)`` from each tensor's first
to past its last element, derived here from each element's own address (``data_ptr`` plus its
offset times the element size), with the metadata reader and without it (its fallback), for
a list or any other sequence; ``[0, 0)`` for a tensor without a storage to compare."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from trainop.contract import overlap
from trainop.kernels.native import metadata


def _addresses(t: torch.Tensor) -> tuple[int, int]:
    """Lowest element address and one past the highest element's last byte, element by
    element."""
    if t.numel() == 0 or t.layout != torch.strided or t.is_meta or type(t) not in (
            torch.Tensor, torch.nn.Parameter):
        return 0, 0
    offsets = [sum(i * s for i, s in zip(index, t.stride(), strict=True))
               for index in itertools.product(*(range(n) for n in t.shape))]
    size = t.element_size()
    return t.data_ptr() + min(offsets) * size, t.data_ptr() + (max(offsets) + 1) * size


class _Sub(torch.Tensor):
    pass


def _tensors() -> list[torch.Tensor]:
    base = torch.arange(60, dtype=torch.float64).reshape(6, 10)
    return [base, base[2:4, 3:7], base.t(), base[::2, 1::3], base[1], base[1:1],
            torch.zeros(3, dtype=torch.float16)[1:], torch.zeros(4).expand(3, 4),
            torch.nn.Parameter(torch.ones(5)), torch.zeros(2, device="meta"),
            torch.zeros(3).as_subclass(_Sub), torch.eye(3).to_sparse(), torch.tensor(2.0)]


@pytest.mark.parametrize("reader", ["built", "none"])
@pytest.mark.parametrize("kind", [list, tuple])
def test_byte_extents_are_each_tensors_first_and_past_last_element(reader, kind, monkeypatch):
    if reader == "none":
        monkeypatch.setattr(metadata, "load", lambda: None)
    elif metadata.load() is None:
        pytest.skip("the metadata reader is not built here")
    tensors = _tensors()
    start, end = overlap.byte_extents(kind(tensors))
    assert start.dtype == end.dtype == np.int64
    assert [(int(s), int(e)) for s, e in zip(start, end, strict=True)] == [
        _addresses(t) for t in tensors]


def test_byte_extents_take_one_pass_of_the_reader_where_it_is_built(monkeypatch):
    """The documented cost: one C pass where the metadata reader is built, no per-tensor
    Python walk (counted: the fallback's per-tensor range is never asked for)."""
    if metadata.load() is None:
        pytest.skip("the metadata reader is not built here")
    calls = []
    monkeypatch.setattr(overlap, "_byte_range", lambda t: calls.append(t))
    start, end = overlap.byte_extents(_tensors())
    assert calls == [] and len(start) == len(end) == len(_tensors())


@pytest.mark.parametrize(("views", "shapes"), [
    ((slice(0, 10), slice(4, 5)), ((10,), (1,))),  # the second inside the first
    ((slice(0, 4), slice(0, 2)), ((4,), (2,))),  # both from the same element
    ((slice(4, 5), slice(0, 10)), ((1,), (10,))),  # the first inside the second
])
def test_overlapping_parameters_are_named_both_the_lower_first(views, shapes):
    x = torch.zeros(10)
    with pytest.raises(ValueError) as caught:
        overlap.check_no_overlap([x[v] for v in views])
    named = sorted([(0, shapes[0]), (1, shapes[1])], key=lambda p: views[p[0]].start)
    assert str(caught.value) == (
        f"Expected parameters that do not share memory, got parameters {named[0][0]} (shape "
        f"{named[0][1]}) and {named[1][0]} (shape {named[1][1]}) overlapping in one storage; "
        "give every parameter its own storage (e.g. .clone())")


def test_memory_written_twice_says_what_to_do():
    """Both refusals of memory an update would write twice end with the remedy (the module
    doc's: give it its own storage)."""
    p = torch.zeros(4)
    with pytest.raises(ValueError, match=r"an expanded tensor\?\); give it its own storage "
                                         r"\(e\.g\. \.clone\(\)\)$"):
        overlap.check_memory_written([(torch.zeros(1).expand(3), "parameter 0")])
    with pytest.raises(ValueError, match=r"^Expected the parameters and slots an update writes "
                                         r"not to share memory, got parameter 0 and the slot 'm' "
                                         r"overlapping in one storage; give each its own "
                                         r"storage \(e\.g\. \.clone\(\)\)$"):
        overlap.check_memory_written([(p, "parameter 0"), (p[1:], "the slot 'm'")])


def test_an_expanded_tensor_anywhere_in_its_storage_is_refused_and_a_repeat_is_no_overlap():
    """Own elements overlapping is measured from the tensor's first element, wherever it
    starts in its storage; one parameter listed twice is not two that overlap (duplicates
    are ``check_no_duplicates``' refusal, where a list must not repeat)."""
    for offset in (0, 5):
        t = torch.zeros(10)[offset:offset + 1].expand(3)
        assert overlap.own_elements_overlap(t)
        with pytest.raises(ValueError, match="whose own elements overlap"):
            overlap.check_memory_written([(t, "parameter 0")])
        with pytest.raises(ValueError, match=r"^Expected parameters that do not share memory, "
                                             r"got parameter 0 \(shape \(3,\), stride \(0,\)\) "
                                             r"whose own elements overlap \(an expanded "
                                             r"tensor\?\); give it its own storage \(e\.g\. "
                                             r"\.clone\(\)\)$"):
            overlap.check_no_overlap([t])
    x, y = torch.zeros(4), torch.zeros(4)
    overlap.check_no_overlap([x, y, x])
    z = torch.zeros(6)  # ... and the parameters after a repeat are still checked
    with pytest.raises(ValueError, match=r"got parameters 3 \(shape \(3,\)\) and 4 "):
        overlap.check_no_overlap([x, y, x, z[:3], z[2:]])
    assert not overlap.own_elements_overlap(torch.zeros(10)[5:8])
