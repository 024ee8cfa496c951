"""``load_state_dict``'s load protocol (``contract/checkpoint_load.py``), decided in process.

What a load must do, from torch's protocol and the module's contract: the pre-hooks see a
shallow copy and may return another dict, which is then validated whole before anything
changes; every tensor is copied (a checkpoint edited after the load changes nothing), slots in
the dtype the optimizer makes them in and contiguous, a wrapper's per-parameter entries cast as
torch casts them (a nested ``step`` kept as it is), counters on the CPU with ``step`` as int64
(0 where a fresh checkpoint has none), the loader's own parameters, names and callables;
entries that are no parameter's kept as they are; the post-hooks run on the loaded optimizer.
The numbers after a load are TF1's Adam in float64 (``tests/tf_formulas.py``) continuing from
the loaded state. Under FSDP2: ``test_checkpoint_load_fsdp2.py``.
"""

from __future__ import annotations

import copy
from collections import deque

import numpy as np
import pytest
import torch
from tf_formulas import beta_power, f32
from tf_formulas import step as tf_step

import trainop

LR, B1, B2, EPS = 0.1, 0.9, 0.999, 1e-8


def _params(dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=gen, dtype=torch.float64).to(dtype))
            for s in ((3, 2), (4,))]


def _grads(params, k):
    gen = torch.Generator().manual_seed(100 + k)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)


def _adam(params, **kw):
    return trainop.AdamOptimizer(LR, B1, B2, EPS, params=[{"params": params[:1]},
                                                          {"params": params[1:]}], **kw)


def _trained(steps=2, dtype=torch.float64):
    params = _params(dtype)
    opt = _adam(params)
    for k in range(steps):
        _grads(params, k)
        opt.step()
    return params, opt


def _everything(params, opt):
    out = [p.detach().clone() for p in params]
    for p in params:
        out += [t.clone() for _, t in sorted(opt.state.get(p, {}).items())
                if isinstance(t, torch.Tensor)]
    for g in opt.param_groups:
        out += [t.clone() for _, t in sorted(g["non_slot"].items())]
    return out


def _same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _tf_next(params, sd, k):
    """TF1's Adam update ``k`` in float64 from ``sd`` (its slots and per-group step)."""
    hp = {"lr": f32(LR), "beta1": f32(B1), "beta2": f32(B2), "epsilon": f32(EPS)}
    gen = torch.Generator().manual_seed(100 + k)
    out = []
    for i, p in enumerate(params):
        g = torch.randn(p.shape, generator=gen, dtype=torch.float64).numpy()
        group = 0 if i == 0 else 1
        t = int(sd["param_groups"][group]["non_slot"]["step"])
        slots = {n: s.double().numpy().copy() for n, s in sd["state"].get(i, {}).items()}
        var = p.detach().double().numpy().copy()
        tf_step("AdamOptimizer", hp, var, g, slots, t)
        out.append(var)
    return out


# --- the pre-hooks, the validation, the post-hooks ---------------------------------------------

def test_pre_hooks_see_a_copy_and_their_result_is_what_loads():
    _, opt = _trained()
    sd = opt.state_dict()
    keys = set(sd)
    target = _adam(_params())
    seen = []

    def strip(o, state_dict):  # edits the dict it is given, returns nothing
        seen.append(("strip", o is target, state_dict is sd))
        state_dict["param_groups"] = copy.deepcopy(state_dict["param_groups"])
        for g in state_dict["param_groups"]:
            g["lr"] = 0.25

    def replace(o, state_dict):  # returns another dict
        seen.append(("replace", state_dict["param_groups"][0]["lr"]))
        return {**state_dict, "param_groups": [{**g, "epsilon": 0.5}
                                               for g in state_dict["param_groups"]]}

    target.register_load_state_dict_pre_hook(strip)
    target.register_load_state_dict_pre_hook(replace)
    target.load_state_dict(sd)
    assert seen == [("strip", True, False), ("replace", 0.25)]
    assert set(sd) == keys and sd["param_groups"][0]["lr"] == LR  # the caller's dict as it was
    assert [(g["lr"], g["epsilon"]) for g in target.param_groups] == [(0.25, 0.5)] * 2


@pytest.mark.parametrize("fixes", [True, False])
def test_the_checkpoint_is_validated_after_the_pre_hooks_and_before_any_change(fixes):
    _, opt = _trained()
    sd = copy.deepcopy(opt.state_dict())
    bad = copy.deepcopy(sd)
    bad["param_groups"][1]["non_slot"]["beta1_power"] = torch.tensor(1.5)
    params, target = _trained(1)
    before = _everything(params, target)
    target.register_load_state_dict_pre_hook(lambda o, s: sd if fixes else bad)
    post = []
    target.register_load_state_dict_post_hook(lambda o: post.append(o))
    if fixes:
        target.load_state_dict(bad)
        assert post == [target]
        assert int(target.param_groups[1]["non_slot"]["step"]) == 2
        return
    with pytest.raises(ValueError, match=r"group 1: Expected `non_slot\['beta1_power'\]` in "
                                         r"\[0, 1\), got 1.5"):
        target.load_state_dict(sd)
    assert _same(before, _everything(params, target)) and post == []


def test_post_hooks_see_the_loaded_optimizer():
    _, opt = _trained()
    sd = opt.state_dict()
    params = _params()
    target = _adam(params)
    seen = []
    target.register_load_state_dict_post_hook(lambda o: seen.append(
        (type(o.state).__name__, int(o.param_groups[0]["non_slot"]["step"]),
         type(o.state[params[0]]).__name__)))
    target.load_state_dict(sd)
    assert seen == [("OptimizerState", 2, "SlotState")]


# --- what is loaded ---------------------------------------------------------------------------

def test_the_next_update_continues_from_the_loaded_state():
    params, opt = _trained(3)
    sd = copy.deepcopy(opt.state_dict())
    resumed, target = _trained(1)
    with torch.no_grad():
        for p, q in zip(params, resumed, strict=True):
            q.copy_(p)
    target.load_state_dict(sd)
    want = _tf_next(resumed, sd, 3)
    _grads(resumed, 3)
    target.step()
    for q, w in zip(resumed, want, strict=True):
        np.testing.assert_allclose(q.detach().numpy(), w, rtol=1e-6, atol=1e-9)
    assert [int(g["non_slot"]["step"]) for g in target.param_groups] == [4, 4]


def test_every_tensor_is_copied():
    _, opt = _trained()
    sd = copy.deepcopy(opt.state_dict())
    sd["state"][0]["lookahead"] = {"slow": torch.ones(3, 2, dtype=torch.float64),
                                   "step": torch.tensor(4.0, dtype=torch.float64)}
    params = _params()
    target = _adam(params)
    target.load_state_dict(sd)
    loaded = _everything(params, target)
    extra = {k: v.clone() for k, v in target.state[params[0]]["lookahead"].items()}
    for entry in sd["state"].values():
        for value in entry.values():
            for t in value.values() if isinstance(value, dict) else [value]:
                t.add_(1.0)
    for g in sd["param_groups"]:
        for t in g["non_slot"].values():
            t.add_(1)
    assert _same(loaded, _everything(params, target))
    assert _same(list(extra.values()), list(target.state[params[0]]["lookahead"].values()))


def test_the_checkpoints_hyperparameters_are_deep_copied():
    params, opt = _trained()
    sd = copy.deepcopy(opt.state_dict())
    sd["param_groups"][0]["param_names"] = ["w"]
    target = _adam(_params())
    target.load_state_dict(sd)
    sd["param_groups"][0]["param_names"].append("x")
    assert target.param_groups[0]["param_names"] == ["w"]


def test_the_loaders_own_parameters_names_and_callables():
    params, opt = _trained()
    sd = copy.deepcopy(opt.state_dict())
    own = _params(seed=1)
    target = trainop.AdamOptimizer(
        lambda: 0.125, B1, B2, EPS,
        params=[{"params": own[:1], "param_names": ["a"]},
                {"params": own[1:], "param_names": ["b"]}])
    sd["param_groups"][1]["param_names"] = ["saved"]
    callable_lr = trainop.AdamOptimizer(lambda: 0.5, B1, B2, EPS, params=[{"params": params[:1]},
                                                                          {"params": params[1:]}])
    marker = callable_lr.state_dict()["param_groups"][0]["lr"]
    assert isinstance(marker, str)
    sd["param_groups"][0]["lr"] = marker
    lr1 = target.param_groups[1]["lr"]
    target.load_state_dict(sd)
    assert [g["params"] for g in target.param_groups] == [own[:1], own[1:]]
    assert [g["param_names"] for g in target.param_groups] == [["a"], ["saved"]]
    assert target.param_groups[0]["lr"]() == 0.125  # the loader's callable, not the marker
    assert target.param_groups[1]["lr"] == LR != lr1  # a saved value loads


def test_slots_take_the_parameters_dtype_and_are_contiguous():
    _, opt = _trained(dtype=torch.float32)
    sd = copy.deepcopy(opt.state_dict())
    sd["state"][0]["m"] = sd["state"][0]["m"].t().contiguous().t()  # strides (1, 3)
    assert not sd["state"][0]["m"].is_contiguous()
    params = _params(torch.float64)
    target = _adam(params)
    target.load_state_dict(sd)
    for i, p in enumerate(params):
        for name in ("m", "v"):
            slot = target.state[p][name]
            assert slot.dtype == torch.float64 and slot.is_contiguous(), (i, name)
            assert torch.equal(slot, sd["state"][i][name].double())


def test_a_fixed_dtype_slot_keeps_its_dtype():
    # NovoGrad's per-tensor grad_norm_ema is float32 whatever the parameter's dtype
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float32))
    opt = trainop.NovoGrad(learning_rate=0.1, params=[p])
    p.grad = torch.full((3,), 2.0)
    opt.step()
    sd = opt.state_dict()
    q = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    target = trainop.NovoGrad(learning_rate=0.1, params=[q])
    target.load_state_dict(sd)
    assert target.state[q]["grad_norm_ema"].dtype == torch.float32
    assert torch.equal(target.state[q]["grad_norm_ema"], sd["state"][0]["grad_norm_ema"])


@pytest.mark.parametrize("param_dtype", [torch.float64, torch.float32])
def test_a_wrappers_entries_are_cast_as_torch_casts_them(param_dtype):
    _, opt = _trained(dtype=param_dtype)
    sd = copy.deepcopy(opt.state_dict())
    half = torch.full((3, 2), 0.5, dtype=torch.float16)
    sd["state"][0]["buf"] = half
    sd["state"][0]["nested"] = {"slow": half, "step": torch.tensor(7.0, dtype=torch.float16),
                                "count": torch.tensor(3, dtype=torch.int32)}
    sd["state"][0]["pair"] = (half, [half, 2], "text")
    sd["state"][0]["note"] = {"seen": {1, 2}, "recent": deque([[1.0, 2.0]])}
    params = _params(param_dtype)
    target = _adam(params)
    target.load_state_dict(sd)
    entry = target.state[params[0]]
    assert entry["buf"].dtype == param_dtype and torch.equal(entry["buf"], half.to(param_dtype))
    nested = entry["nested"]
    assert nested["slow"].dtype == param_dtype
    assert nested["step"].dtype == torch.float16 and float(nested["step"]) == 7.0
    assert nested["count"].dtype == param_dtype  # only a step is kept as it is
    pair = entry["pair"]
    assert type(pair) is tuple and type(pair[1]) is list and pair[1][1] == 2 and pair[2] == "text"
    assert pair[0].dtype == param_dtype and pair[1][0].dtype == param_dtype
    sd["state"][0]["note"]["seen"].add(3)  # a value that is no tensor is copied, deeply
    sd["state"][0]["note"]["recent"][0].append(3.0)
    assert entry["note"] == {"seen": {1, 2}, "recent": deque([[1.0, 2.0]])}


def test_a_wrappers_entry_of_a_parameter_that_is_no_float_keeps_its_dtype():
    # torch casts a parameter's state to its dtype only for a floating-point parameter
    p = torch.nn.Parameter(torch.ones(3))
    sd = trainop.GradientDescentOptimizer(0.1, params=[p]).state_dict()
    half = torch.full((3,), 0.5, dtype=torch.float16)
    sd["state"][0] = {"slow": half}
    target = trainop.GradientDescentOptimizer(0.1, params=[p])
    p.data = torch.ones(3, dtype=torch.complex64)
    target.load_state_dict(sd)
    assert target.state[p]["slow"].dtype == torch.float16
    assert torch.equal(target.state[p]["slow"], half)


def test_slots_and_a_wrappers_entries_move_to_the_parameters_device():
    # a checkpoint read on the CPU loaded into a model on another device (here "meta")
    _, opt = _trained()
    sd = copy.deepcopy(opt.state_dict())
    sd["state"][1]["slow"] = torch.ones(4, dtype=torch.float64)
    params = [torch.nn.Parameter(p.detach().to("meta")) for p in _params()]
    target = _adam(params)
    target.load_state_dict(sd)
    assert {t.device.type for p in params for t in target.state[p].values()} == {"meta"}
    assert all(t.device.type == "cpu" for g in target.param_groups
               for t in g["non_slot"].values())


@pytest.mark.parametrize("centered", [True, False])
def test_the_slots_are_those_of_the_loaded_groups_hyperparameters(centered):
    # centered RMSProp keeps `mg` besides `rms` and `momentum`
    p = torch.nn.Parameter(torch.ones(3, 2))
    opt = trainop.RMSPropOptimizer(0.1, centered=centered, params=[p])
    p.grad = torch.full((3, 2), 0.5)
    opt.step()
    sd = copy.deepcopy(opt.state_dict())
    for name in sd["state"][0]:
        sd["state"][0][name] = sd["state"][0][name].t().contiguous().t()
    q = torch.nn.Parameter(torch.ones(3, 2, dtype=torch.float64))
    target = trainop.RMSPropOptimizer(0.1, centered=not centered, params=[q])
    target.load_state_dict(sd)
    assert target.param_groups[0]["centered"] is centered
    slots = target.state[q]
    assert sorted(slots) == (["mg", "momentum", "rms"] if centered else ["momentum", "rms"])
    for name, slot in slots.items():
        assert slot.dtype == torch.float64 and slot.is_contiguous(), name
        assert torch.equal(slot, sd["state"][0][name].double()), name


def test_an_entry_that_is_no_parameters_is_kept_as_it_is():
    _, opt = _trained()
    sd = copy.deepcopy(opt.state_dict())
    sd["state"]["note"] = {"epoch": 3}
    sd["state"]["count"] = 5
    target = _adam(_params())
    target.load_state_dict(sd)
    assert target.state["note"] == {"epoch": 3} and target.state["count"] == 5


def test_counters_load_on_the_cpu_with_the_step_as_int64():
    _, opt = _trained()
    sd = copy.deepcopy(opt.state_dict())
    sd["param_groups"][0]["non_slot"]["step"] = torch.tensor(2, dtype=torch.int32)
    target = _adam(_params())
    target.load_state_dict(sd)
    non_slot = [g["non_slot"] for g in target.param_groups]
    assert all(t.device.type == "cpu" for ns in non_slot for t in ns.values())
    assert non_slot[0]["step"].dtype == torch.int64 and int(non_slot[0]["step"]) == 2
    for ns, saved in zip(non_slot, sd["param_groups"], strict=True):
        for name in ("beta1_power", "beta2_power"):  # TF's float32 powers, as saved
            assert ns[name].dtype == torch.float32 and ns[name] == saved["non_slot"][name]


def test_a_fresh_checkpoint_without_a_step_starts_at_step_zero():
    fresh = _adam(_params()).state_dict()
    for g in fresh["param_groups"]:
        g["non_slot"] = {}
    params = _params()
    target = _adam(params)
    target.load_state_dict(fresh)
    steps = [g["non_slot"]["step"] for g in target.param_groups]
    assert all(s.dtype == torch.int64 and s.shape == () and int(s) == 0 for s in steps)
    sd = {"state": {}, "param_groups": [{"non_slot": {"step": 0}}] * 2}
    start = [p.detach().clone() for p in params]
    want = _tf_next(start, sd, 0)
    _grads(params, 0)
    target.step()
    for p, w in zip(params, want, strict=True):
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-6, atol=1e-9)
    assert float(target.param_groups[0]["non_slot"]["beta1_power"]) == beta_power(B1, 1)


def test_a_string_hyperparameter_loads_as_saved():
    # NovoGrad's second_moment: one of its choices (only the "not saved" marker is replaced)
    p = torch.nn.Parameter(torch.ones(3))
    sd = trainop.NovoGrad(learning_rate=0.1, second_moment="openseq2seq", params=[p]).state_dict()
    target = trainop.NovoGrad(learning_rate=0.1, params=[torch.nn.Parameter(torch.ones(3))])
    target.load_state_dict(sd)
    assert target.param_groups[0]["second_moment"] == "openseq2seq"


def test_counters_computed_with_autograd_load_detached():
    _, opt = _trained()
    sd = copy.deepcopy(opt.state_dict())
    base = torch.tensor(B1, requires_grad=True)
    power = (base * B1).float()  # B1 ** 2, not a leaf: it has no deepcopy
    sd["param_groups"][1]["non_slot"]["beta1_power"] = power
    target = _adam(_params())
    target.load_state_dict(sd)
    loaded = target.param_groups[1]["non_slot"]["beta1_power"]
    assert not loaded.requires_grad and torch.equal(loaded, power.detach())
