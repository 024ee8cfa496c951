"""State loaded around ``load_state_dict`` is checked at the next update
(``contract/outside_load.py``, issue #47 Z1 and Z3), in process.

The distributed tests (``test_zero_counters.py``, ``test_zero_rank_counters.py``) check it in
spawned gloo ranks, which mutmut's per-test statistics do not see. Here:

- ``ZeroRedundancyOptimizer`` over a process group of one rank (gloo, this process): a checkpoint
  whose groups lack ``non_slot`` is refused at the next step as plain ``load_state_dict`` refuses
  the same file, with nothing written; a whole checkpoint resumes the uninterrupted run;
- the loads ZeRO and RETURNN-style code do by hand (a group's ``non_slot`` replaced, a
  parameter's entry assigned whole): what is refused, what is used (TF1's Adam in float64,
  ``tests/tf_formulas.py``, at the loaded step), what is a reset;
- ranks as threads (``ThreadRanks`` of ``test_rank_agreement.py``): counters loaded that differ
  across ranks are refused on every rank, before anything is written.
"""

from __future__ import annotations

import copy
import sys
from collections import defaultdict

import numpy as np
import pytest
import torch
from test_rank_agreement import ThreadRanks, disagreement
from tf_formulas import beta_power, f32
from tf_formulas import step as tf_step

import trainop

LR, B1, B2, EPS = 0.1, 0.9, 0.999, 1e-8
#: load_state_dict's refusal of a group without counters (its keys, then the one missing).
MISSING_NON_SLOT = ("Invalid optimizer checkpoint, group {g}: Expected the group keys ['beta1', "
                    "'beta2', 'epsilon', 'lr', 'non_slot'], missing ['non_slot']")


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=gen, dtype=torch.float64))
            for s in ((3, 2), (4,), (2,))]


def _grads(params, k: int) -> None:
    gen = torch.Generator().manual_seed(100 + k)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)


def _adam(params):
    """Adam over two groups: the first parameter, then the other two."""
    return trainop.AdamOptimizer(LR, B1, B2, EPS, params=[{"params": params[:1]},
                                                          {"params": params[1:]}])


def _train(opt, params, steps) -> None:
    for k in steps:
        _grads(params, k)
        opt.step()


def _everything(params, opt) -> list[torch.Tensor]:
    """Every number a step could write: parameters, slots, counters."""
    out = [p.detach().clone() for p in params]
    for p in params:
        out += [t.clone() for _, t in sorted(opt.state.get(p, {}).items())]
    for g in opt.param_groups:
        out += [t.clone() for _, t in sorted(g.get("non_slot", {}).items())]
    return out


def _same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _refused(opt, params, k: int = 9) -> str:
    """The ``ValueError`` of the next step; asserts that it changed nothing."""
    before = _everything(params, opt)
    _grads(params, k)
    with pytest.raises(ValueError) as caught:
        opt.step()
    assert _same(before, _everything(params, opt))
    return str(caught.value)


# --- ZeroRedundancyOptimizer, one rank -----------------------------------------------------------

def _zero(params):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return ZeroRedundancyOptimizer([{"params": params[:1]}, {"params": params[1:]}],
                                   optimizer_class=trainop.AdamOptimizer, lr=LR, beta1=B1,
                                   beta2=B2, epsilon=EPS)


def _zero_checkpoint(steps: int = 2, params=None) -> dict:
    """ZeRO's checkpoint after ``steps`` updates (the parameters trained: ``params``)."""
    params = _params() if params is None else params
    zero = _zero(params)
    _train(zero, params, range(steps))
    zero.consolidate_state_dict(to=0)
    return copy.deepcopy(zero.state_dict())


def test_zero_resumes_the_uninterrupted_run(one_rank):
    params = _params()
    _train(_zero(params), params, range(4))
    resumed = _params()
    zero = _zero(resumed)
    zero.load_state_dict(_zero_checkpoint(2, resumed))
    _train(zero, resumed, range(2, 4))
    assert all(torch.equal(a, b) for a, b in zip(params, resumed, strict=True))


@pytest.mark.parametrize("stripped", [(0,), (1,), (0, 1)])
@pytest.mark.parametrize("first", [0, 2])
def test_zero_refuses_a_checkpoint_without_counters_as_load_state_dict_does(one_rank, stripped,
                                                                            first):
    bare = _zero_checkpoint()
    for g in stripped:
        del bare["param_groups"][g]["non_slot"]
    expected = MISSING_NON_SLOT.format(g=min(stripped))
    with pytest.raises(ValueError) as plain:
        _adam(_params()).load_state_dict(copy.deepcopy(bare))
    assert str(plain.value) == expected
    params = _params()
    zero = _zero(params)
    _train(zero, params, range(first))
    zero.load_state_dict(bare)
    assert _refused(zero.optim, params) == expected
    assert _refused(zero.optim, params) == expected  # refused again: not accepted once seen


def test_zero_refuses_counters_out_of_range(one_rank):
    sd = _zero_checkpoint()
    sd["param_groups"][1]["non_slot"]["beta1_power"] = torch.tensor(1.5)
    params = _params()
    zero = _zero(params)
    zero.load_state_dict(sd)
    assert _refused(zero.optim, params) == ("Invalid optimizer checkpoint, group 1: Expected "
                                            "`non_slot['beta1_power']` in [0, 1), got 1.5")


# --- the loads by hand: counters replaced, entries assigned whole -------------------------------

def _tf_adam(params, slots, g_steps, t0):
    """TF1's Adam in float64 on copies of ``params`` (and ``slots``, by parameter): one apply
    per step in ``g_steps`` (the gradients ``_grads`` gives), parameter ``i``'s first at
    ``t0[i]`` applies done."""
    hp = {"lr": f32(LR), "beta1": f32(B1), "beta2": f32(B2), "epsilon": f32(EPS)}
    var = [p.detach().numpy().copy() for p in params]
    for n, k in enumerate(g_steps):
        gen = torch.Generator().manual_seed(100 + k)
        for i, p in enumerate(params):
            g = torch.randn(p.shape, generator=gen, dtype=p.dtype).numpy()
            tf_step("AdamOptimizer", hp, var[i], g, slots[i], t0[i] + n)
    return var


def _counters(t: int) -> dict:
    """Adam's counters after ``t`` applies: TF's float32 beta powers of apply ``t + 1``."""
    return {"step": torch.tensor(t), "beta1_power": torch.tensor(beta_power(B1, t)),
            "beta2_power": torch.tensor(beta_power(B2, t))}


@pytest.mark.parametrize("group", [0, 1])
def test_replaced_counters_are_used_by_the_next_update(group):
    params = _params()
    opt = _adam(params)
    _train(opt, params, range(1))
    slots = [{n: t.numpy().copy() for n, t in opt.state[p].items()} for p in params]
    opt.param_groups[group]["non_slot"] = _counters(7)
    start = [p.detach().clone() for p in params]
    _train(opt, params, range(1, 3))
    t0 = [7, 1, 1] if group == 0 else [1, 7, 7]
    for p, want in zip(params, _tf_adam(start, slots, range(1, 3), t0), strict=True):
        np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-6, atol=1e-9)
    assert int(opt.param_groups[group]["non_slot"]["step"]) == 9


@pytest.mark.parametrize("group", [0, 1])
def test_replaced_counters_without_the_beta_powers_are_refused(group):
    params = _params()
    opt = _adam(params)
    _train(opt, params, range(1))
    opt.param_groups[group]["non_slot"] = {"step": torch.tensor(5)}
    message = (f"Invalid optimizer checkpoint, group {group}: Expected the non-slot variables "
               "['beta1_power', 'beta2_power'] (saved after a step); they are missing and "
               "would be re-initialised")
    assert _refused(opt, params) == message
    assert _refused(opt, params) == message
    opt.param_groups[group]["non_slot"] = _counters(5)  # whole counters: the update goes on
    _train(opt, params, range(9, 10))


def test_replaced_counters_out_of_range_are_refused_in_the_group_that_has_them():
    params = _params()
    opt = _adam(params)
    _train(opt, params, range(1))
    opt.param_groups[1]["non_slot"] = {**_counters(3), "beta2_power": torch.tensor(-0.5)}
    assert _refused(opt, params) == ("Invalid optimizer checkpoint, group 1: Expected "
                                     "`non_slot['beta2_power']` in [0, 1), got -0.5")


@pytest.mark.parametrize("where", [0, 1, 2])
def test_an_entry_assigned_whole_without_counters_is_refused(where):
    # ZeRO's load from a checkpoint without non_slot: the entries, not the counters
    params = _params()
    opt = _adam(params)
    _train(opt, params, range(2))
    p = params[where]
    opt.state[p] = {n: t.clone() for n, t in opt.state[p].items()}
    group = 0 if where == 0 else 1
    assert _refused(opt, params) == MISSING_NON_SLOT.format(g=group)
    assert _refused(opt, params) == MISSING_NON_SLOT.format(g=group)


def test_entries_assigned_whole_with_the_counters_replaced_resume():
    # ZeRO's load of a whole checkpoint: every entry and every group's counters
    params = _params()
    opt = _adam(params)
    _train(opt, params, range(3))
    sd = copy.deepcopy(opt.state_dict())
    resumed = _params()
    target = _adam(resumed)
    _train(target, resumed, range(1))
    with torch.no_grad():
        for p, q in zip(params, resumed, strict=True):
            q.copy_(p)
    for i, q in enumerate(resumed):
        target.state[q] = dict(sd["state"][i])
    for group, saved in zip(target.param_groups, sd["param_groups"], strict=True):
        group["non_slot"] = saved["non_slot"]
    _train(opt, params, range(3, 5))
    _train(target, resumed, range(3, 5))
    assert all(torch.equal(a, b) for a, b in zip(params, resumed, strict=True))


@pytest.mark.parametrize("where", [0, 1, 2])
def test_a_bad_slot_loaded_by_hand_is_named_as_load_state_dict_names_it(where):
    # the same checks, the same messages: the parameter by its index and id in the checkpoint
    params = _params()
    opt = _adam(params)
    _train(opt, params, range(2))
    sd = copy.deepcopy(opt.state_dict())
    sd["state"][where]["m"] = torch.zeros(5, dtype=torch.float64)
    group = 0 if where == 0 else 1
    expected = (f"Invalid optimizer checkpoint, group {group}, parameter index {where} "
                f"(id {where}): Expected slot `m` of shape {tuple(params[where].shape)}, "
                f"got (5,)")
    with pytest.raises(ValueError) as plain:
        _adam(_params()).load_state_dict(copy.deepcopy(sd))
    assert str(plain.value) == expected
    opt.state[params[where]] = dict(sd["state"][where])
    for g, saved in zip(opt.param_groups, sd["param_groups"], strict=True):
        g["non_slot"] = saved["non_slot"]
    assert _refused(opt, params) == expected


@pytest.mark.parametrize("reset", ["empty entry", "whole state", "new state dict"])
def test_a_reset_is_no_load(reset):
    # an empty entry, or a state object replaced as a whole, is the user's reset or copy
    params = _params()
    opt = _adam(params)
    _train(opt, params, range(2))
    slots = [{n: t.numpy().copy() for n, t in opt.state[p].items()} for p in params]
    if reset == "empty entry":
        opt.state[params[1]] = {}
        slots[1] = {}
    elif reset == "whole state":
        opt.state = defaultdict(dict, {p: {n: t.clone() for n, t in opt.state[p].items()}
                                       for p in params})
    else:
        opt.state = defaultdict(dict)
        slots = [{}, {}, {}]
    start = [p.detach().clone() for p in params]
    _train(opt, params, range(2, 3))
    for p, want in zip(params, _tf_adam(start, slots, range(2, 3), [2, 2, 2]), strict=True):
        np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-6, atol=1e-9)


def test_a_group_added_after_steps_is_no_load():
    params = _params()
    opt = trainop.AdamOptimizer(LR, B1, B2, EPS, params=params[:2])
    _train(opt, params[:2], range(2))
    opt.add_param_group({"params": params[2:]})
    _train(opt, params, range(2, 3))
    assert [int(g["non_slot"]["step"]) for g in opt.param_groups] == [3, 1]


@pytest.mark.parametrize("complete", [True, False])
def test_a_group_appended_by_hand_is_checked_as_a_loaded_one(complete):
    params = _params()
    opt = trainop.AdamOptimizer(LR, B1, B2, EPS, params=params[:2])
    _train(opt, params[:2], range(1))
    keys = {k: v for k, v in opt.param_groups[0].items() if k not in ("params", "non_slot")}
    opt.param_groups.append({**keys, "params": params[2:]})
    if complete:
        opt.param_groups[1]["non_slot"] = {"step": torch.tensor(0)}
        _train(opt, params, range(1, 2))
        assert [int(g["non_slot"]["step"]) for g in opt.param_groups] == [2, 1]
    else:
        assert _refused(opt, params) == MISSING_NON_SLOT.format(g=1)


@pytest.mark.parametrize("value", [0.5, 1.5])
def test_counters_loaded_into_an_optimizer_without_parameters_are_checked(value):
    # (an optimizer that holds no parameter yet: a TF-style one, or a ZeRO rank's share)
    opt = trainop.AdamOptimizer(LR, B1, B2, EPS, params=[{"params": []}, {"params": []}])
    opt.param_groups[1]["non_slot"] = {**_counters(4), "beta1_power": torch.tensor(value)}
    if value < 1:
        opt.create_slots()
        assert float(opt.param_groups[1]["non_slot"]["beta1_power"]) == value
        return
    with pytest.raises(ValueError, match=r"group 1: Expected `non_slot\['beta1_power'\]` in "
                                         r"\[0, 1\), got 1.5"):
        opt.create_slots()


def test_an_update_with_nothing_loaded_reads_no_entry_of_the_state(monkeypatch):
    # the check costs one comparison per group and one of the state's change count
    from trainop.contract.state import OptimizerState

    params = _params()
    opt = _adam(params)
    _train(opt, params, range(2))  # the slots made, then seen
    reads = []
    for name in ("get", "__getitem__", "items", "values", "__iter__"):
        real = getattr(OptimizerState, name)
        monkeypatch.setattr(OptimizerState, name,
                            lambda self, *a, _real=real, _name=name: (reads.append(_name),
                                                                      _real(self, *a))[1])
    _train(opt, params, range(2, 4))
    assert reads == []


# --- ranks as threads: counters loaded that differ across ranks -----------------------------------

def _rank_loads(world: int, counters_of_rank, monkeypatch, one_parameter=False):
    """Each rank (a thread) trains 1 step, has its group 1's counters replaced by
    ``counters_of_rank(r)`` and takes the next step: each rank's exception and whether its
    parameters, slots and counters are as the load left them."""
    ranks = ThreadRanks(world)
    opts = []
    for r in range(world):
        params = _params()
        if one_parameter:
            params = params[:1]
            opt = trainop.AdamOptimizer(LR, B1, B2, EPS, params=[{"params": []},
                                                                 {"params": params}])
        else:
            opt = _adam(params)
        _train(opt, params, range(1))
        opt.param_groups[1]["non_slot"] = counters_of_rank(r)
        opts.append((params, opt, _everything(params, opt)))
    monkeypatch.setitem(sys.modules, "torch.distributed", ranks)

    def each(r):
        params, opt, _ = opts[r]
        _train(opt, params, range(1, 2))

    errors = ranks.run(each)
    monkeypatch.undo()
    unchanged = [_same(before, _everything(params, opt)) for params, opt, before in opts]
    return errors, unchanged, ranks


def test_counters_that_differ_across_ranks_are_refused_on_every_rank(monkeypatch):
    errors, unchanged, ranks = _rank_loads(3, lambda r: _counters(4 if r == 1 else 3),
                                           monkeypatch)
    assert ranks.gathers == 1
    assert unchanged == [True] * 3
    for e in errors:
        assert type(e) is ValueError
        assert str(e) == disagreement(1, "step", "rank 0: 3, rank 1: 4, rank 2: 3")


@pytest.mark.parametrize("one_parameter", [False, True])
def test_counters_that_agree_across_ranks_are_used(monkeypatch, one_parameter):
    errors, unchanged, ranks = _rank_loads(2, lambda r: _counters(3), monkeypatch,
                                           one_parameter)
    assert errors == [None, None] and unchanged == [False, False]
    assert ranks.gathers == 1


def test_a_rank_whose_load_is_refused_says_so_and_the_others_name_it(monkeypatch):
    def counters(r):
        return {"step": torch.tensor(3)} if r == 0 else _counters(3)

    errors, unchanged, _ = _rank_loads(2, counters, monkeypatch)
    assert unchanged == [True, True]
    assert str(errors[0]).startswith("Invalid optimizer checkpoint, group 1: Expected the "
                                     "non-slot variables ['beta1_power', 'beta2_power']")
    assert str(errors[1]) == ("Invalid optimizer checkpoint: rank(s) [0] refused the state they "
                              "were given (their error says why), so every rank refuses it")


def test_an_update_with_nothing_loaded_gathers_nothing(monkeypatch):
    ranks = ThreadRanks(2)
    params = _params()
    opt = _adam(params)
    _train(opt, params, range(1))
    monkeypatch.setitem(sys.modules, "torch.distributed", ranks)
    _train(opt, params, range(1, 3))  # one rank only: a collective here would wait forever
    assert ranks.gathers == 0
