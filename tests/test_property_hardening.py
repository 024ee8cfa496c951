"""Property-based hardening test (hypothesis): every registered optimizer x implementation, with
random layouts (plain ``step``, flat buffers via ``trainop.flatten``, TF-style
``apply_gradients``), dtypes, shapes, sparse gradients (duplicate, negative, out-of-range rows,
none at all) and random corruptions of ``state_dict``s. Each example must give the reference
implementation's result, or a ``ValueError``/``TypeError`` with params, slots and counters
bit-identical to before.

Every (optimizer, implementation) pair is its own test case, so none is left to chance;
hypothesis draws the rest. Profiles: ``ci`` (default, 10 examples per pair and test, well under a
minute on 2 cores) and ``long`` (``TRAINOP_HYPOTHESIS_PROFILE=long``, 200 per pair).
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from optimizer_kwargs import kwargs_for

import trainop
from trainop.contract.slots import TRAINOP_SLOT_NAMES

settings.register_profile("ci", max_examples=10, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = settings.get_profile(os.environ.get("TRAINOP_HYPOTHESIS_PROFILE", "ci"))

NAMES = sorted({trainop.get_optimizer_class(n).__name__: n for n in trainop.optimizer_names()})
CASES = [(name, impl) for name in NAMES
         for impl in trainop.OPTIMIZER_CLASSES[name].IMPLEMENTATIONS if impl != "reference"]


def build(name, impl, params):
    cls = trainop.OPTIMIZER_CLASSES[name]
    return cls(**kwargs_for(name), params=params, implementation=impl)


def snapshot(opt, params):
    out = [p.detach().clone() for p in params]
    for group in opt.param_groups:
        out += [v.clone() for _, v in sorted(group.get("non_slot", {}).items())]
        for p in group["params"]:
            out += [v.clone() for _, v in sorted(opt.state.get(p, {}).items())]
    return out


def identical(a, b):
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
        for x, y in zip(a, b, strict=True))


def close(a, b, dtype):
    # float64: NovoGrad keeps its norm EMA in float32 (TF), so float32-level rounding shows up.
    tol = 1e-4 if dtype == torch.float32 else 1e-6
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol, equal_nan=True)


@st.composite
def problems(draw):
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    shapes = draw(st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=2).map(tuple),
                           min_size=1, max_size=3))
    layout = draw(st.sampled_from(["plain", "flat", "tf"]))
    seed = draw(st.integers(0, 2 ** 16))
    sparse = None
    if layout != "flat" and draw(st.booleans()):
        rows = shapes[0][0]
        sparse = draw(st.lists(st.integers(-3, rows + 2), min_size=0, max_size=6))
    edit = draw(st.sampled_from(EDITS)) if layout != "flat" else "none"
    return dtype, shapes, layout, seed, sparse, edit


#: Changes made by hand between steps, once the step plan is cached: each must be rejected
#: with nothing changed (where the last parameter has a slot of its shape to corrupt).
EDITS = ["none", "none", "0-dim slot", "slot of another dtype", "expanded slot",
         "slot viewing its parameter", "parameter reshaped"]


def apply_edit(opt, params, edit) -> bool:
    """Apply ``edit`` to the last parameter; return whether the next step must be rejected."""
    p = params[-1]
    slots = opt.state.get(p, {})
    key = next((k for k, t in slots.items() if t.dim() > 0), None)
    if edit == "none" or key is None:
        return False
    slot = slots[key]
    if edit == "0-dim slot":
        slots[key] = torch.zeros((), dtype=slot.dtype)
    elif edit == "slot of another dtype":
        slots[key] = slot.to(torch.float64 if slot.dtype == torch.float32 else torch.float32)
    elif edit == "expanded slot":
        slots[key] = torch.zeros((), dtype=slot.dtype).expand(slot.shape)
        return slot.numel() > 1  # one element expanded to one element overlaps nothing
    elif edit == "slot viewing its parameter":
        slots[key] = p.detach()
    else:
        p.data = torch.ones(p.numel() + 1, dtype=p.dtype)
    return True


def make_params(shapes, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=gen, dtype=dtype)) for s in shapes]


def grads_for(params, seed, sparse):
    gen = torch.Generator().manual_seed(seed + 1)
    grads = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]
    if sparse is not None:
        p = params[0]
        values = torch.randn((len(sparse), *p.shape[1:]), generator=gen, dtype=p.dtype)
        index = torch.tensor(sparse, dtype=torch.int64).reshape(1, -1)
        # Unchecked: indices may lie outside the shape (what a buggy embedding hands over).
        grads[0] = torch.sparse_coo_tensor(index, values, p.shape, check_invariants=False)
    return grads


def run_step(opt, params, grads, layout):
    if layout == "tf":
        return opt.apply_gradients(list(zip(grads, params, strict=True)))
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    return opt.step()


def setup(name, impl, dtype, shapes, layout, seed):
    params = make_params(shapes, dtype, seed)
    opt = build(name, impl, None if layout == "tf" else params)
    if layout == "flat":
        trainop.flatten(opt)
    return opt, params


def supported(name, impl, dtype):
    cls = trainop.OPTIMIZER_CLASSES[name]
    return not (impl == "fused" and dtype not in cls._fused_dtypes)


@pytest.mark.parametrize(("name", "impl"), CASES)
@PROFILE
@given(problem=problems())
def test_step_matches_reference_or_rejects_cleanly(name, impl, problem):
    dtype, shapes, layout, seed, sparse, edit = problem
    if not supported(name, impl, dtype):
        return
    if edit == "parameter reshaped" and sparse is not None and len(shapes) == 1:
        edit = "none"  # the sparse gradient is for the first parameter's old shape
    results = {}
    for which in ("reference", impl):
        opt, params = setup(name, which, dtype, shapes, layout, seed)
        for k in range(2):  # slots exist, and the step plan is cached
            run_step(opt, params, grads_for(params, seed + k, None), layout)
        must_reject = apply_edit(opt, params, edit)
        before = snapshot(opt, params)
        try:
            run_step(opt, params, grads_for(params, seed + 7, sparse), layout)
        except (ValueError, TypeError) as err:
            assert identical(before, snapshot(opt, params)), f"{which} changed state: {err}"
            results[which] = "rejected"
            continue
        assert not must_reject, f"{which} accepted a step after '{edit}'"
        results[which] = snapshot(opt, params)
    if sparse is not None and any(not 0 <= r < shapes[0][0] for r in sparse):
        assert results[impl] == "rejected" and results["reference"] == "rejected"
    elif results["reference"] == "rejected":
        assert results[impl] == "rejected"
    else:
        assert results[impl] != "rejected"
        close(results[impl], results["reference"], dtype)


CORRUPTIONS = ["none", "0-dim slot", "int64 slot", "nan slot", "drop slot", "extra slot",
               "nan lr", "negative lr", "float step", "drop non-slot", "reverse ids",
               "drop group", "inf non-slot"]


def corrupt(sd, kind):
    """Apply ``kind``; return whether the result must be rejected (None: it may load)."""
    state, groups = sd["state"], sd["param_groups"]
    some = next(iter(state.values()), None)
    non_slot = groups[0]["non_slot"]
    if kind in ("0-dim slot", "int64 slot", "nan slot", "drop slot", "extra slot"):
        if not some:
            return None
        key = sorted(some)[0]
        if kind == "0-dim slot":
            old = some[key]
            some[key] = torch.zeros((), dtype=old.dtype)
            return old.dim() != 0
        if kind == "int64 slot":
            some[key] = some[key].to(torch.int64)
        elif kind == "nan slot":
            some[key] = torch.full_like(some[key], float("nan"))
        elif kind == "drop slot":
            del some[key]
        else:
            # another trainop optimizer's slot is refused; a key of a wrapper's own (timm's
            # Lookahead keeps ``lookahead_slow_buff`` there) loads, as torch loads it
            some[next(n for n in sorted(TRAINOP_SLOT_NAMES) if n not in some)] = some[key]
            some["wrapper_buffer"] = torch.zeros(())
        return True
    if kind == "nan lr":
        groups[0]["lr"] = float("nan")
        return True
    if kind == "negative lr":
        groups[0]["lr"] = -1.0
        return True
    if kind == "float step":
        non_slot["step"] = non_slot["step"].double()
        return True
    if kind == "inf non-slot":
        non_slot["step"] = torch.tensor(float("inf"))
        return True
    if kind == "drop non-slot":
        extra = [k for k in non_slot if k != "step"]
        if not extra:
            return None
        del non_slot[extra[0]]
        return bool(state)
    if kind == "reverse ids":
        groups[0]["params"] = list(reversed(groups[0]["params"]))
        return None
    if kind == "drop group":
        groups.clear()
        return True
    return False


@pytest.mark.parametrize(("name", "impl"), CASES)
@PROFILE
@given(problem=problems(), kind=st.sampled_from(CORRUPTIONS))
def test_load_corrupted_state_dict(name, impl, problem, kind):
    dtype, shapes, layout, seed, _, _ = problem
    if not supported(name, impl, dtype):
        return
    source, src_params = setup(name, impl, dtype, shapes, layout, seed)
    run_step(source, src_params, grads_for(src_params, seed, None), layout)
    sd = copy.deepcopy(source.state_dict())
    must_reject = corrupt(sd, kind)
    target, params = setup(name, impl, dtype, shapes, layout, seed + 1)
    run_step(target, params, grads_for(params, seed + 2, None), layout)
    before = snapshot(target, params)
    try:
        target.load_state_dict(sd)
    except (ValueError, TypeError):
        assert must_reject is not False, f"{kind}: a valid checkpoint was rejected"
        assert identical(before, snapshot(target, params))
        return
    assert not must_reject, f"{kind}: a bad checkpoint was accepted"
    # Accepted: a step from it equals the reference implementation's step from it.
    ref, ref_params = setup(name, "reference", dtype, shapes, layout, seed + 1)
    run_step(ref, ref_params, grads_for(ref_params, seed + 2, None), layout)
    ref.load_state_dict(copy.deepcopy(sd))
    with torch.no_grad():
        for p, q in zip(params, ref_params, strict=True):
            q.copy_(p)
    grads = grads_for(params, seed + 3, None)
    run_step(target, params, grads, layout)
    run_step(ref, ref_params, grads, layout)
    close(snapshot(target, params), snapshot(ref, ref_params), dtype)


def test_every_optimizer_and_implementation_is_a_case():
    names = {trainop.get_optimizer_class(n).__name__ for n in trainop.optimizer_names()}
    assert {name for name, _ in CASES} == names
    assert len(CASES) == sum(len(trainop.OPTIMIZER_CLASSES[n].IMPLEMENTATIONS) - 1
                             for n in names)
