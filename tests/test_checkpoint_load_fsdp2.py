"""``load_state_dict`` of an optimizer of DTensor parameters (FSDP2,
``contract/checkpoint_load.py``) in process: the parameters on a CPU mesh of one rank
(``one_rank``), several ranks as threads (``ThreadRanks`` of ``test_rank_agreement.py``) for
the counters' agreement over the mesh's group.

A plain tensor where a DTensor slot belongs is refused at the load with nothing changed (#47
Z4); a whole checkpoint resumes the uninterrupted run (also with a callable lr, saved as the
"not saved" marker); counters that differ across ranks are refused on every rank (#47 Z3), the
same checkpoint loads, and a rank that refuses its checkpoint (a plain slot, malformed groups)
still takes part in the one collective and is named by the others.
"""

from __future__ import annotations

import copy
import sys

import pytest
import torch
from test_checkpoint_load import B1, B2, EPS, LR, _everything, _same
from test_rank_agreement import ThreadRanks, disagreement

import trainop


def _fsdp2(seed=0, one_parameter=False, lr=LR):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(seed)
    net = (torch.nn.Linear(3, 2, bias=False) if one_parameter else
           torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)))
    fully_shard(net)
    return net, trainop.AdamOptimizer(lr, B1, B2, EPS, params=list(net.parameters()))


def _fsdp2_step(net, opt, k):
    gen = torch.Generator().manual_seed(k)
    x, y = torch.randn(4, 3, generator=gen), torch.randn(4, 2, generator=gen)
    torch.nn.functional.mse_loss(net(x), y).backward()
    opt.step()
    opt.zero_grad()


def _fsdp2_state(net, opt):
    return [t.full_tensor().clone() if hasattr(t, "full_tensor") else t.clone()
            for t in _everything(list(net.parameters()), opt)]


def test_fsdp2_a_plain_tensor_where_a_dtensor_slot_belongs_is_refused(one_rank):
    net, opt = _fsdp2()
    _fsdp2_step(net, opt, 0)
    sd = copy.deepcopy(opt.state_dict())
    sd["state"][2]["v"] = sd["state"][2]["v"].full_tensor()
    fresh, target = _fsdp2(1)
    _fsdp2_step(fresh, target, 5)
    before = _fsdp2_state(fresh, target)
    with pytest.raises(TypeError) as caught:
        target.load_state_dict(sd)
    assert str(caught.value).startswith("Invalid optimizer checkpoint, group 0, parameter "
                                        "index 2 (id 2): Expected slot `v` to be a DTensor "
                                        "like its parameter, got a plain tensor")
    assert _same(before, _fsdp2_state(fresh, target))


@pytest.mark.parametrize("lr", [LR, lambda: LR], ids=["float", "callable"])
def test_fsdp2_a_whole_checkpoint_resumes(one_rank, lr):
    # a callable lr is saved as a marker and the loader keeps its own
    net, opt = _fsdp2(lr=lr)
    for k in range(3):
        _fsdp2_step(net, opt, k)
    fresh, target = _fsdp2(lr=lr)
    for k in range(2):
        _fsdp2_step(fresh, target, k)
    target.load_state_dict(copy.deepcopy(opt.state_dict()))
    with torch.no_grad():
        for p, q in zip(net.parameters(), fresh.parameters(), strict=True):
            q.copy_(p)
    _fsdp2_step(net, opt, 3)
    _fsdp2_step(fresh, target, 3)
    assert _same(_fsdp2_state(net, opt), _fsdp2_state(fresh, target))


def _fsdp2_rank_loads(world, checkpoint_of_rank, monkeypatch, one_parameter=False):
    """Each rank (a thread) loads ``checkpoint_of_rank(r)`` into its own FSDP2 optimizer (one
    step taken): each rank's exception, whether nothing changed, and the ranks."""
    ranks = ThreadRanks(world)
    targets = []
    for r in range(world):
        net, opt = _fsdp2(r, one_parameter)
        _fsdp2_step(net, opt, 10 + r)
        targets.append((net, opt, _fsdp2_state(net, opt)))
    sds = [checkpoint_of_rank(r) for r in range(world)]
    monkeypatch.setitem(sys.modules, "torch.distributed", ranks)
    errors = ranks.run(lambda r: targets[r][1].load_state_dict(sds[r]))
    monkeypatch.undo()
    unchanged = [_same(before, _fsdp2_state(net, opt)) for net, opt, before in targets]
    return errors, unchanged, ranks, targets


def _fsdp2_checkpoints(one_parameter=False):
    net, opt = _fsdp2(one_parameter=one_parameter)
    out = []
    for k in range(3):
        _fsdp2_step(net, opt, k)
        out.append(copy.deepcopy(opt.state_dict()))
    return out


def test_fsdp2_counters_that_differ_across_ranks_are_refused_on_every_rank(one_rank,
                                                                          monkeypatch):
    at = _fsdp2_checkpoints()
    errors, unchanged, ranks, targets = _fsdp2_rank_loads(
        2, lambda r: copy.deepcopy(at[1 + r]), monkeypatch)
    assert ranks.gathers == 1 and unchanged == [True, True]
    group = next(targets[0][0].parameters()).device_mesh.get_group()
    assert ranks.groups and all(g is group for g in ranks.groups)
    for e in errors:
        assert type(e) is ValueError
        assert str(e) == disagreement(0, "step", "rank 0: 2, rank 1: 3")


@pytest.mark.parametrize("one_parameter", [False, True])
def test_fsdp2_the_same_checkpoint_on_every_rank_loads(one_rank, monkeypatch, one_parameter):
    at = _fsdp2_checkpoints(one_parameter)
    errors, unchanged, ranks, targets = _fsdp2_rank_loads(
        2, lambda r: copy.deepcopy(at[2]), monkeypatch, one_parameter)
    assert errors == [None, None] and ranks.gathers == 1
    assert [int(opt.param_groups[0]["non_slot"]["step"]) for _, opt, _ in targets] == [3, 3]


def test_fsdp2_a_rank_that_refuses_its_checkpoint_is_named_by_the_others(one_rank, monkeypatch):
    at = _fsdp2_checkpoints()

    def checkpoint(r):
        sd = copy.deepcopy(at[2])
        if r == 1:
            sd["state"][0]["m"] = sd["state"][0]["m"].full_tensor()
        return sd

    errors, unchanged, ranks, _ = _fsdp2_rank_loads(3, checkpoint, monkeypatch)
    assert ranks.gathers == 1 and unchanged == [True] * 3
    assert type(errors[1]) is TypeError and "Expected slot `m` to be a DTensor" in str(errors[1])
    for r in (0, 2):
        assert str(errors[r]) == ("Invalid optimizer checkpoint: rank(s) [1] refused the state "
                                  "they were given (their error says why), so every rank "
                                  "refuses it")


def test_fsdp2_a_rank_given_a_malformed_checkpoint_still_takes_part(one_rank, monkeypatch):
    # its groups are no dicts: its own error, after the collective the others wait in
    at = _fsdp2_checkpoints()

    def checkpoint(r):
        sd = copy.deepcopy(at[2])
        if r == 0:
            sd["param_groups"] = [[1, 2]]
        return sd

    errors, unchanged, ranks, _ = _fsdp2_rank_loads(2, checkpoint, monkeypatch)
    assert ranks.gathers == 1 and unchanged == [True, True]
    assert str(errors[0]) == ("Invalid optimizer checkpoint, group 0: Expected a dict, got "
                              "[1, 2] (list)")
    assert str(errors[1]) == ("Invalid optimizer checkpoint: rank(s) [0] refused the state they "
                              "were given (their error says why), so every rank refuses it")
