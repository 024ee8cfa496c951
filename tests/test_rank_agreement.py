"""The counters' agreement across ranks (``contract/rank_agreement.py``, issue #47 Z3), in process.

The distributed tests (``test_zero_rank_counters.py``, ``test_fsdp2_load_checks.py``) check it
in spawned gloo ranks; here a process group of N ranks is N threads of this process
(``ThreadRanks``: ``all_gather`` exchanges the tensors through a barrier), so every rank runs
the real check and the inputs can vary: any number of ranks and groups, counters that are
integers, floats (compared bit for bit: ``-0.0`` is not ``0.0``, a NaN is itself), missing or
malformed, ranks that refused their checkpoint. What each rank must raise is derived here from
the rule (the first counter, in group and name order, whose ranks' values are not the same),
not from the module's encoding.
"""

from __future__ import annotations

import struct
import sys
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trainop
from trainop.contract import rank_agreement
from trainop.contract.rank_agreement import agree_across_ranks, counter_names, sharded_group

SETTINGS = settings(max_examples=40, derandomize=True, deadline=None, database=None)


class ThreadRanks:
    """What the check uses of ``torch.distributed``, for ``world`` ranks that are threads."""

    def __init__(self, world: int, backend: str = "gloo"):
        self.world = world
        self.backend = backend
        self.barrier = threading.Barrier(world, timeout=60)
        self.sent: list = [None] * world
        self.rank = threading.local()
        self.gathers = 0
        self.groups: list = []

    def is_available(self):
        return True

    def is_initialized(self):
        return True

    def get_world_size(self, group=None):
        self.groups.append(group)
        return self.world

    def get_backend(self, group=None):
        self.groups.append(group)
        return self.backend

    def all_gather(self, out, tensor, group=None):
        self.groups.append(group)
        assert len(out) == self.world
        self.sent[self.rank.r] = tensor.clone()
        self.barrier.wait()
        for o, t in zip(out, self.sent, strict=True):
            o.copy_(t)  # a size that differs across ranks fails here, as in a real collective
        self.barrier.wait()
        self.rank.gathered = True
        if self.rank.r == 0:
            self.gathers += 1

    def run(self, each_rank):
        """``each_rank(r)`` on every rank at once: each rank's exception, or None."""
        errors: list = [None] * self.world

        def body(r):
            self.rank.r, self.rank.gathered = r, False
            try:
                each_rank(r)
            except BaseException as e:  # noqa: BLE001 - the rank's outcome is the result
                errors[r] = e
                if not self.rank.gathered:  # a rank that stopped before the collective
                    self.barrier.abort()    # never leaves the others waiting

        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        return errors


@pytest.fixture
def ranks(monkeypatch):
    """``make(world, backend)``: a ThreadRanks that the module sees as torch.distributed."""

    def make(world, backend="gloo"):
        fake = ThreadRanks(world, backend)
        monkeypatch.setitem(sys.modules, "torch.distributed", fake)
        return fake

    return make


# --- what each rank must raise, from the rule --------------------------------------------------

def _same(a, b) -> bool:
    """Two ranks' values of one counter are the same: both missing, or equal bit for bit."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) != isinstance(b, float):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


def _readable(value) -> str:
    return "missing" if value is None else repr(value)


def _plain(value):
    """A counter's value as the rule sees it: an int, a float (as float64), or None."""
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or value.is_complex():
        return None
    if value.is_floating_point():
        return struct.unpack("<d", struct.pack("<d", value.item()))[0]
    return int(value.item())


def _expected_counter_error(names, counters_by_rank):
    """The message every rank raises for the first counter that differs, or None."""
    for g, group_names in enumerate(names):
        for name in group_names:
            values = []
            for counters in counters_by_rank:
                non_slot = counters[g]
                values.append(_plain(non_slot[name]) if isinstance(non_slot, dict)
                              and name in non_slot else None)
            if any(not _same(values[0], v) for v in values[1:]):
                return disagreement(g, name, ", ".join(
                    f"rank {r}: {_readable(v)}" for r, v in enumerate(values)))
    return None


def disagreement(group: int, name: str, shown: str) -> str:
    """The error every rank raises when counter ``name`` of ``group`` differs (``shown``: the
    ranks' values, ``rank 0: 2, rank 1: 3``)."""
    return (f"Invalid optimizer checkpoint, group {group}: Expected `{name}` to be the same on "
            f"every rank (each rank updates its part of the parameters with its own copy), got "
            f"{shown}")


# --- generated counters -------------------------------------------------------------------------

_FLOATS = st.sampled_from([0.0, -0.0, 0.9, 0.81, 1e-300, float("inf"), float("nan"), 0.5])
_STEPS = st.sampled_from([0, 1, 2, 3, 2 ** 40, 2 ** 62])


@st.composite
def _agreement_case(draw):
    world = draw(st.integers(2, 4))
    n_groups = draw(st.integers(1, 3))
    names = [["step", "beta1_power", "beta2_power"] if draw(st.booleans()) else ["step"]
             for _ in range(n_groups)]
    base = []
    for group_names in names:
        group = {"step": torch.tensor(draw(_STEPS), dtype=torch.int64)}
        for name in group_names[1:]:
            dtype = draw(st.sampled_from([torch.float32, torch.float64]))
            group[name] = torch.tensor(draw(_FLOATS), dtype=dtype)
        base.append(group)
    by_rank = [[dict(g) for g in base] for _ in range(world)]
    # each rank may change counters of its own copy: another value, or none at all
    for r in range(world):
        for g, group_names in enumerate(names):
            for name in group_names:
                change = draw(st.sampled_from(["keep"] * 4 + ["value", "missing"]))
                if change == "missing":
                    del by_rank[r][g][name]
                elif change == "value":
                    old = by_rank[r][g][name]
                    new = draw(_STEPS if name == "step" else _FLOATS)
                    by_rank[r][g][name] = torch.tensor(new, dtype=old.dtype)
    return names, by_rank


@SETTINGS
@given(_agreement_case())
def test_every_rank_raises_for_the_first_counter_that_differs(case):
    names, by_rank = case
    world = len(by_rank)
    expected = _expected_counter_error(names, by_rank)
    fake = ThreadRanks(world)
    saved = sys.modules["torch.distributed"]
    sys.modules["torch.distributed"] = fake
    try:
        errors = fake.run(lambda r: agree_across_ranks(names, by_rank[r], None))
    finally:
        sys.modules["torch.distributed"] = saved
    assert fake.gathers == 1  # one collective, whatever the number of groups and counters
    for r, e in enumerate(errors):
        if expected is None:
            assert e is None, (r, e)
        else:
            assert type(e) is ValueError and str(e) == expected, (r, e, expected)


def test_counters_equal_on_every_rank_pass(ranks):
    fake = ranks(3)
    names = [["step", "beta1_power", "beta2_power"], ["step"]]
    counters = [{"step": torch.tensor(7), "beta1_power": torch.tensor(0.9 ** 7),
                 "beta2_power": torch.tensor(float("nan"))}, {"step": torch.tensor(2)}]
    assert fake.run(lambda r: agree_across_ranks(names, counters, None)) == [None] * 3
    assert fake.gathers == 1


@pytest.mark.parametrize(("a", "b", "shown"), [
    (0.0, -0.0, "rank 0: 0.0, rank 1: -0.0"),
    (0.9, 0.9 + 2 ** -52, f"rank 0: 0.9, rank 1: {0.9 + 2 ** -52!r}"),
    (float("nan"), 1.0, "rank 0: nan, rank 1: 1.0"),
])
def test_floats_are_compared_bit_for_bit_and_shown_decoded(ranks, a, b, shown):
    fake = ranks(2)
    names = [["step", "beta1_power"]]
    values = [a, b]
    errors = fake.run(lambda r: agree_across_ranks(
        names, [{"step": torch.tensor(4), "beta1_power": torch.tensor(values[r],
                                                                       dtype=torch.float64)}],
        None))
    for e in errors:
        assert isinstance(e, ValueError)
        assert str(e).startswith("Invalid optimizer checkpoint, group 0: Expected `beta1_power` "
                                 "to be the same on every rank")
        assert str(e).endswith("got " + shown)


def test_a_float32_counter_is_shown_as_its_float64_value(ranks):
    fake = ranks(2)
    values = [0.9, 0.8]
    errors = fake.run(lambda r: agree_across_ranks(
        [["step", "beta2_power"]],
        [{"step": torch.tensor(1), "beta2_power": torch.tensor(values[r])}], None))
    shown = (f"rank 0: {float(torch.tensor(0.9).double())!r}, "
             f"rank 1: {float(torch.tensor(0.8).double())!r}")
    assert [str(e).endswith("got " + shown) for e in errors] == [True, True]


def test_the_step_is_shown_as_it_is_and_a_missing_one_as_missing(ranks):
    fake = ranks(3)
    counters = [{"step": torch.tensor(2 ** 62)}, {"step": torch.tensor(3)}, {}]
    errors = fake.run(lambda r: agree_across_ranks([["step"]], [counters[r]], None))
    for e in errors:
        assert str(e).endswith(f"got rank 0: {2 ** 62}, rank 1: 3, rank 2: missing"), e


@pytest.mark.parametrize(("a", "b", "shown"), [
    (torch.tensor(3), torch.tensor(3.0), "rank 0: 3, rank 1: 3.0"),  # an integer is no float
    (torch.tensor(2.5), torch.tensor(3.5), "rank 0: 2.5, rank 1: 3.5"),  # a float step, decoded
    (torch.tensor(-0.0), None, "rank 0: -0.0, rank 1: missing"),  # -0.0 is a value
    (torch.tensor(-(2 ** 63)), None, f"rank 0: {-(2 ** 63)}, rank 1: missing"),
    (torch.tensor(0), None, "rank 0: 0, rank 1: missing"),
])
def test_a_value_never_agrees_with_another_kind_or_with_missing(ranks, a, b, shown):
    fake = ranks(2)
    counters = [{"step": a}, {} if b is None else {"step": b}]
    errors = fake.run(lambda r: agree_across_ranks([["step"]], [counters[r]], None))
    assert [str(e).endswith("got " + shown) for e in errors] == [True, True], errors


@pytest.mark.parametrize(("odd", "why"), [
    (3, "a Python int"),
    (torch.tensor([3, 3]), "two elements"),
    (torch.tensor(3 + 0j), "complex"),
    (torch.tensor([]), "empty"),
])
def test_a_counter_that_is_not_a_one_element_real_tensor_counts_as_missing(ranks, odd, why):
    fake = ranks(2)
    counters = [{"step": torch.tensor(3)}, {"step": odd}]
    errors = fake.run(lambda r: agree_across_ranks([["step"]], [counters[r]], None))
    assert all(str(e).endswith("got rank 0: 3, rank 1: missing") for e in errors), (why, errors)


def test_counters_that_are_all_missing_or_malformed_agree(ranks):
    # nothing to compare is no disagreement: the rank's own load checks judge the file
    fake = ranks(2)
    counters = [[None], [{"step": torch.tensor([1, 2])}]]
    assert fake.run(lambda r: agree_across_ranks([["step"]], counters[r], None)) == [None, None]


def test_a_one_element_tensor_of_any_shape_is_its_value(ranks):
    fake = ranks(2)
    counters = [{"step": torch.tensor([[5]]), "beta1_power": torch.tensor([0.5])},
                {"step": torch.tensor(5), "beta1_power": torch.tensor(0.5, requires_grad=True)}]
    names = [["step", "beta1_power"]]
    assert fake.run(lambda r: agree_across_ranks(names, [counters[r]], None)) == [None, None]


def test_a_non_mapping_group_has_every_counter_missing(ranks):
    fake = ranks(2)
    counters = [[{"step": torch.tensor(1)}], [[("step", torch.tensor(1))]]]
    errors = fake.run(lambda r: agree_across_ranks([["step"]], counters[r], None))
    assert all(str(e).endswith("got rank 0: 1, rank 1: missing") for e in errors), errors


def test_the_groups_and_names_are_searched_in_order(ranks):
    # group 1's step and group 0's beta2_power differ: group 0 is named (the first)
    fake = ranks(2)
    names = [["step", "beta1_power", "beta2_power"], ["step", "beta1_power", "beta2_power"]]

    def counters(r):
        return [{"step": torch.tensor(1), "beta1_power": torch.tensor(0.9),
                 "beta2_power": torch.tensor(0.999 if r else 0.99)},
                {"step": torch.tensor(1 + r), "beta1_power": torch.tensor(0.9),
                 "beta2_power": torch.tensor(0.999)}]

    errors = fake.run(lambda r: agree_across_ranks(names, counters(r), None))
    assert all("group 0: Expected `beta2_power`" in str(e) for e in errors), errors


@pytest.mark.parametrize(("world", "refusing"), [(2, [1]), (3, [0, 2]), (4, [3]), (3, [0, 1, 2])])
@pytest.mark.parametrize("groups", [1, 3])
def test_a_rank_that_refused_raises_its_own_error_and_the_others_say_which(ranks, world,
                                                                            refusing, groups):
    fake = ranks(world)
    names = [["step", "beta1_power", "beta2_power"]] * groups
    own = {r: KeyError(f"rank {r}'s own refusal") for r in refusing}
    # the ranks that accepted have counters that differ as well: the refusal is reported first
    good = [[{"step": torch.tensor(r), "beta1_power": torch.tensor(0.9),
              "beta2_power": torch.tensor(0.9)}] * groups for r in range(world)]
    # a rank that refused sends no counters, whatever it passes
    errors = fake.run(lambda r: agree_across_ranks(
        names, None if r in own and r % 2 else good[r], own.get(r)))
    assert fake.gathers == 1  # the refusing ranks took part in the collective
    for r, e in enumerate(errors):
        if r in own:
            assert e is own[r]
        else:
            assert type(e) is ValueError
            assert str(e) == (f"Invalid optimizer checkpoint: rank(s) {refusing} refused the "
                              f"state they were given (their error says why), so every rank "
                              f"refuses it")


def test_fewer_counter_groups_than_named_groups_is_an_error_not_a_partial_check(ranks):
    fake = ranks(2)
    names = [["step"], ["step"]]
    errors = fake.run(lambda r: agree_across_ranks(names, [{"step": torch.tensor(1)}], None))
    assert all(isinstance(e, ValueError) for e in errors), errors
    assert fake.gathers == 0


# --- when nothing is compared ------------------------------------------------------------------

class NotInitialised(ThreadRanks):
    def __init__(self, available, initialised):
        super().__init__(2)
        self.available, self.initialised = available, initialised

    def is_available(self):
        return self.available

    def is_initialized(self):
        return self.initialised

    def all_gather(self, out, tensor, group=None):
        raise AssertionError("gathered outside an initialised process group")


@pytest.mark.parametrize(("available", "initialised"), [(False, True), (True, False),
                                                        (False, False)])
def test_nothing_is_gathered_without_an_initialised_process_group(monkeypatch, available,
                                                                  initialised):
    monkeypatch.setitem(sys.modules, "torch.distributed", NotInitialised(available, initialised))
    differing = [{"step": torch.tensor(1)}]
    assert agree_across_ranks([["step"]], differing, None) is None
    own = RuntimeError("this rank's refusal")
    with pytest.raises(RuntimeError) as caught:
        agree_across_ranks([["step"]], None, own)
    assert caught.value is own


def test_nothing_is_gathered_when_torch_distributed_was_never_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch.distributed")
    assert agree_across_ranks([["step"]], [{"step": torch.tensor(1)}], None) is None
    own = TypeError("refused")
    with pytest.raises(TypeError) as caught:
        agree_across_ranks([["step"]], None, own)
    assert caught.value is own


def test_one_rank_gathers_nothing_and_raises_its_own_error(ranks):
    fake = ranks(1)
    own = ValueError("rank 0's checkpoint is bad")
    assert fake.run(lambda r: agree_across_ranks([["step"]], None, own)) == [own]
    assert fake.run(lambda r: agree_across_ranks([["step"]], [{"step": torch.tensor(1)}],
                                                 None)) == [None]
    assert fake.gathers == 0


def test_the_group_given_is_the_one_asked_and_gathered_over(ranks):
    fake = ranks(2)
    group = object()
    fake.run(lambda r: agree_across_ranks([["step"]], [{"step": torch.tensor(1)}], None,
                                          group=group))
    assert fake.groups and all(g is group for g in fake.groups)
    assert fake.gathers == 1


# --- where the vector is gathered --------------------------------------------------------------

class _Made(Exception):
    pass


@pytest.mark.parametrize(("backend", "given", "expected"), [
    ("gloo", None, "cpu"),
    ("gloo", "cuda:1", "cpu"),  # gloo gathers on the host whatever the parameters' device
    ("nccl", None, "cuda:3"),  # NCCL gathers on the current CUDA device ...
    ("nccl", "cpu", "cuda:3"),
    ("nccl", "cuda:1", "cuda:1"),  # ... or the parameters' CUDA device
    ("ucc", None, "cpu"),
    ("ucc", "cuda:2", "cuda:2"),  # another backend: the parameters' device
])
def test_the_vector_is_made_on_the_device_its_backend_gathers_on(ranks, monkeypatch, backend,
                                                                 given, expected):
    ranks(2, backend)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    made = []
    real = torch.tensor

    def tensor(data, *args, **kwargs):
        if kwargs.get("dtype") is torch.int64 and isinstance(data, list):
            made.append((list(data), kwargs.get("device")))
            raise _Made
        return real(data, *args, **kwargs)

    monkeypatch.setattr(rank_agreement.torch, "tensor", tensor)
    with pytest.raises(_Made):
        agree_across_ranks([["step"]], [{"step": real(6)}], None,
                           device=None if given is None else torch.device(given))
    (_, device), = made
    assert torch.device(device) == torch.device(expected)


# --- the names and the process group -----------------------------------------------------------

def test_counter_names_are_the_step_and_the_algorithms_non_slot_variables_per_group():
    # TF1's Adam keeps beta1_power and beta2_power as non-slot variables; Momentum none
    p, q = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    adam = trainop.AdamOptimizer([{"params": [p]}, {"params": [q]}], learning_rate=0.1)
    assert counter_names(adam) == [["step", "beta1_power", "beta2_power"]] * 2
    momentum = trainop.MomentumOptimizer([p], learning_rate=0.1, momentum=0.9)
    assert counter_names(momentum) == [["step"]]


def test_the_group_is_the_first_dtensors_one_dimensional_mesh(one_rank):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    flat = init_device_mesh("cpu", (1,))
    square = init_device_mesh("cpu", (1, 1))
    plain = torch.ones(2)
    on_flat = distribute_tensor(torch.ones(2), flat, [Replicate()])
    on_square = distribute_tensor(torch.ones(2), square, [Replicate(), Replicate()])
    assert sharded_group([plain, on_flat]) is flat.get_group()
    assert sharded_group([plain]) is None
    assert sharded_group([]) is None
    # a mesh of two dimensions has no one group: the default group is used
    assert sharded_group([on_square, on_flat]) is None
