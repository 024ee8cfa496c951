"""Direct changes to ``optimizer.state`` take effect at the next ``step()`` (see ``_state``).

The step plan caches each parameter's slot tensors; these tests change the state the ways torch
users do (replace a slot, replace or delete an entry, clear or reassign the whole state) and
compare with an optimizer that never had the old state: one that loads the changed state through
``load_state_dict`` (a path that does not use the plan), or a fresh one given the same step count.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections import defaultdict

import pytest
import torch
from optimizer_kwargs import kwargs_for

import trainop
from trainop import OPTIMIZER_CLASSES

NAMES = sorted(OPTIMIZER_CLASSES)
SHAPES = [(3, 4), (5,), (2, 2, 2)]


def params(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=dtype) for s in SHAPES]


def set_grads(ps, step):
    g = torch.Generator().manual_seed(100 + step)
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g, dtype=p.dtype)


def make(name, ps, implementation=None):
    return OPTIMIZER_CLASSES[name](params=ps, implementation=implementation, **kwargs_for(name))


def implementations(name):
    return [None, *OPTIMIZER_CLASSES[name].IMPLEMENTATIONS]


def cases():
    return [(n, i) for n in NAMES for i in implementations(n)]


def steps(opt, ps, first, count):
    for k in range(first, first + count):
        set_grads(ps, k)
        opt.step()


def assert_same(opt_a, ps_a, opt_b, ps_b):
    for p, q in zip(ps_a, ps_b, strict=True):
        assert torch.equal(p, q)
        slots_a, slots_b = opt_a.state[p], opt_b.state[q]
        assert slots_a.keys() == slots_b.keys()
        for name in slots_a:
            assert torch.equal(slots_a[name], slots_b[name]), name


def changed(slot: torch.Tensor) -> torch.Tensor:
    """A different, still valid value for any slot (accumulators stay positive)."""
    return slot * 0.5 + slot.abs() * 0.25 if slot.dim() else slot.clone()


@pytest.mark.parametrize(("name", "implementation"), cases())
def test_a_replaced_slot_is_used_at_the_next_step(name, implementation):
    ps = params()
    opt = make(name, ps, implementation)
    steps(opt, ps, 0, 2)
    new = {id(p): {n: changed(s) for n, s in opt.state[p].items()} for p in ps}
    # The expectation: an optimizer that gets the replaced slots through load_state_dict.
    qs = [p.clone() for p in ps]
    ref = make(name, qs, implementation)
    sd = opt.state_dict()
    sd["state"] = {i: {n: s.clone() for n, s in new[id(p)].items()} for i, p in enumerate(ps)}
    ref.load_state_dict(sd)
    for p in ps:
        for n, s in new[id(p)].items():
            opt.state[p][n] = s
    steps(opt, ps, 2, 2)
    steps(ref, qs, 2, 2)
    assert_same(opt, ps, ref, qs)


def reset_by_assignment(opt, ps):
    opt.state = defaultdict(dict)


def reset_by_clear(opt, ps):
    opt.state.clear()


def reset_by_deleting_entries(opt, ps):
    for p in ps:
        del opt.state[p]


def reset_by_empty_entries(opt, ps):
    for p in ps:
        opt.state[p] = {}


RESETS = [reset_by_assignment, reset_by_clear, reset_by_deleting_entries, reset_by_empty_entries]


@pytest.mark.parametrize("reset", RESETS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("name", "implementation"), cases())
def test_a_reset_state_starts_fresh_slots(name, implementation, reset):
    ps = params()
    opt = make(name, ps, implementation)
    steps(opt, ps, 0, 2)
    # The expectation: a fresh optimizer at the same parameters and step count.
    qs = [p.clone() for p in ps]
    ref = make(name, qs, implementation)
    ref.param_groups[0]["non_slot"] = {k: t.clone()
                                       for k, t in opt.param_groups[0]["non_slot"].items()}
    reset(opt, ps)
    steps(opt, ps, 2, 2)
    steps(ref, qs, 2, 2)
    assert_same(opt, ps, ref, qs)


def momentum_run(ps, **kwargs):
    return trainop.MomentumOptimizer(0.1, 0.9, params=ps, **kwargs)


def test_momentum_numbers_after_a_slot_is_replaced():
    # accum = 0.9 accum + g; var -= 0.1 accum, with g = 1 throughout.
    p = torch.ones(3, dtype=torch.float64)
    opt = momentum_run([p])
    for _ in range(2):
        p.grad = torch.ones(3, dtype=torch.float64)
        opt.step()
    assert torch.allclose(opt.state[p]["momentum"], torch.full((3,), 1.9, dtype=torch.float64))
    opt.state[p]["momentum"] = torch.full((3,), 10.0, dtype=torch.float64)
    opt.step()
    assert torch.allclose(opt.state[p]["momentum"], torch.full((3,), 10.0, dtype=torch.float64))
    # 1 - 0.1 * 1 - 0.1 * 1.9 - 0.1 * 10
    assert torch.allclose(p, torch.full((3,), 1 - 0.1 - 0.19 - 1.0, dtype=torch.float64))


def test_a_slot_changed_in_place_needs_no_tracking():
    p = torch.ones(3, dtype=torch.float64)
    opt = momentum_run([p])
    p.grad = torch.ones(3, dtype=torch.float64)
    opt.step()
    version = opt.state.version
    opt.state[p]["momentum"].zero_()
    assert opt.state.version == version
    opt.step()
    assert torch.allclose(opt.state[p]["momentum"], torch.ones(3, dtype=torch.float64))


def test_every_mutating_call_counts_a_change():
    p = torch.ones(2)
    opt = momentum_run([p])
    p.grad = torch.ones(2)
    opt.step()
    state, entry = opt.state, opt.state[p]
    slot = entry["momentum"]
    calls = [lambda: entry.__setitem__("momentum", slot), lambda: entry.update(momentum=slot),
             lambda: entry.setdefault("x", slot), lambda: entry.pop("x"),
             lambda: entry.__setitem__("y", slot), lambda: entry.__delitem__("y"),
             lambda: entry.__ior__({"z": slot}), lambda: entry.popitem(),
             lambda: state.__setitem__(p, entry), lambda: state.update({p: entry}),
             lambda: state.setdefault(p, entry), lambda: state.__ior__({}),
             lambda: state.pop(p), lambda: state.__setitem__(torch.ones(1), {}),
             lambda: state.popitem(), lambda: state.clear()]
    for call in calls:
        before = state.version
        call()
        assert state.version > before


def test_an_assigned_state_is_adopted_and_wrapped():
    p = torch.ones(2)
    opt = momentum_run([p])
    p.grad = torch.ones(2)
    opt.step()
    mine = defaultdict(dict, {p: {"momentum": torch.full((2,), 5.0)}})
    opt.state = mine
    opt.step()
    assert type(opt.state) is trainop.contract.state.OptimizerState
    assert type(opt.state[p]) is trainop.contract.state.SlotState
    assert torch.allclose(opt.state[p]["momentum"], torch.full((2,), 5.5))


def test_state_dict_exports_plain_dicts_that_load_with_weights_only():
    ps = params(torch.float32)
    opt = trainop.AdamOptimizer(0.01, params=ps)
    steps(opt, ps, 0, 2)
    sd = opt.state_dict()
    assert all(type(entry) is dict for entry in sd["state"].values())
    buffer = io.BytesIO()
    torch.save(sd, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    qs = [p.clone() for p in ps]
    other = trainop.AdamOptimizer(0.01, params=qs)
    other.load_state_dict(loaded)
    steps(opt, ps, 2, 1)
    steps(other, qs, 2, 1)
    assert_same(opt, ps, other, qs)


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))],
                         ids=["deepcopy", "pickle"])
def test_a_copied_optimizer_steps_its_own_tensors(clone):
    ps = params()
    opt = trainop.AdamOptimizer(0.01, params=ps)
    steps(opt, ps, 0, 2)
    twin = clone(opt)
    qs = twin.param_groups[0]["params"]
    steps(twin, qs, 2, 2)
    steps(opt, ps, 2, 2)
    assert_same(opt, ps, twin, qs)
    assert all(p.data_ptr() != q.data_ptr() for p, q in zip(ps, qs, strict=True))


@pytest.mark.native
@pytest.mark.parametrize("change", ["replace_slot", "reset"])
def test_flat_buffers_follow_state_changes(change):
    ps = params(torch.float32)
    opt = trainop.AdamOptimizer(0.01, params=ps)
    layout = trainop.flatten(opt)
    steps(opt, ps, 0, 2)
    qs = [p.detach().clone() for p in ps]
    ref = trainop.AdamOptimizer(0.01, params=qs)
    ref.param_groups[0]["non_slot"] = {k: t.clone()
                                       for k, t in opt.param_groups[0]["non_slot"].items()}
    if change == "replace_slot":
        for p, q in zip(ps, qs, strict=True):
            for n, s in opt.state[p].items():
                value = changed(s)
                opt.state[p][n] = value
                ref.state[q][n] = value.clone()
    else:
        opt.state = defaultdict(dict)
    steps(opt, ps, 2, 3)
    steps(ref, qs, 2, 3)
    assert_same(opt, ps, ref, qs)
    # The slots are the flat buffers' views again, so the step is one call per buffer.
    bucket = layout.buckets[0]
    for p, offset in zip(bucket.params, bucket.offsets, strict=True):
        for n, buf in bucket.slot_buffers.items():
            assert opt.state[p][n].data_ptr() == buf[offset:].data_ptr()


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))],
                         ids=["deepcopy", "pickle"])
def test_a_copied_flat_optimizer_keeps_one_buffer_per_group(clone):
    ps = params(torch.float32)
    opt = trainop.MomentumOptimizer(0.1, 0.9, params=ps)
    trainop.flatten(opt)
    steps(opt, ps, 0, 2)
    twin = clone(opt)
    qs = twin.param_groups[0]["params"]
    buffer = twin._flat.buckets[0].param_buffer
    assert buffer.data_ptr() != opt._flat.buckets[0].param_buffer.data_ptr()
    assert all(q.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
               for q in qs)
    steps(twin, qs, 2, 2)
    steps(opt, ps, 2, 2)
    assert_same(opt, ps, twin, qs)


@pytest.mark.parametrize("edit", ["replace_element", "append", "replace_list"])
def test_direct_edits_of_the_param_groups_take_effect(edit):
    # torch's optimizers read group["params"] at every step; so does the cached plan's check.
    p, q = torch.ones(2), torch.zeros(2)
    opt = momentum_run([p])
    p.grad = torch.ones(2)
    opt.step()
    group = opt.param_groups[0]
    if edit == "replace_element":
        group["params"][0] = q
    elif edit == "append":
        group["params"].append(q)
    else:
        group["params"] = [q]
    p.grad, q.grad = torch.ones(2), torch.ones(2)
    opt.step()
    moved_again = edit == "append"
    assert torch.allclose(p, torch.full((2,), 1 - 0.1 - (0.19 if moved_again else 0.0)))
    assert torch.allclose(q, torch.full((2,), -0.1))
    # TF style on the edited groups: q is known, not registered a second time.
    opt.apply_gradients([(torch.ones(2), q)])
    assert sum(any(t is q for t in g["params"]) for g in opt.param_groups) == 1
