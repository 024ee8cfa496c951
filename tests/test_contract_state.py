"""State over the contract table: ``state_dict`` round trips (plain, named parameters,
through ``torch.save``/``torch.load(weights_only=True)``, to another device where one
exists), ``deepcopy`` and ``pickle``, and no optimizer or parameter kept alive after ``del``.
(Non-parameter state entries and dtype casting on load are #25's other rows, tested with
the checkpoint code.)"""

from __future__ import annotations

import copy
import gc
import io
import pickle
import weakref

import pytest
import torch
from contract_table import (
    INFOS,
    assert_same,
    info_ids,
    params,
    set_grads,
    snapshot,
    train,
)


def _named(ps):
    return [(f"layer.{i}", p) for i, p in enumerate(ps)]


def _resume(info, state_dict, named=False):
    """A fresh optimizer (fresh parameters holding the saved values) with ``state_dict``."""
    ps = params()
    opt = info.make(_named(ps) if named else ps)
    opt.load_state_dict(state_dict)
    return opt, ps


def _continue_equal(info, opt, ps, resumed, resumed_ps):
    with torch.no_grad():
        for p, q in zip(ps, resumed_ps, strict=True):
            q.copy_(p)
    assert_same(snapshot(opt), snapshot(resumed))
    train(opt, ps, 2, start=3)
    train(resumed, resumed_ps, 2, start=3)
    assert_same(snapshot(opt), snapshot(resumed))


@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
@pytest.mark.parametrize("named", [False, True], ids=["plain", "named"])
def test_state_dict_round_trip(info, named):
    ps = params()
    opt = info.make(_named(ps) if named else ps)
    train(opt, ps, 3)
    sd = opt.state_dict()
    if named:
        assert sd["param_groups"][0]["param_names"] == ["layer.0", "layer.1"]
    resumed, resumed_ps = _resume(info, sd, named)
    _continue_equal(info, opt, ps, resumed, resumed_ps)


@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_state_dict_through_torch_save_weights_only(info):
    ps = params()
    opt = info.make([{"params": ps[:1]}, {"params": ps[1:], "lr": info.lr / 2}])
    train(opt, ps, 3)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    sd = torch.load(buffer, weights_only=True)
    resumed_ps = params()
    resumed = info.make([{"params": resumed_ps[:1]}, {"params": resumed_ps[1:]}])
    resumed.load_state_dict(sd)
    assert resumed.param_groups[1]["lr"] == info.lr / 2
    _continue_equal(info, opt, ps, resumed, resumed_ps)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_state_dict_to_another_device(info):
    """Saved on the CPU, loaded for CUDA parameters: slots follow the parameters' device."""
    ps = params()
    opt = info.make(ps)
    train(opt, ps, 3)
    cuda_ps = [torch.nn.Parameter(p.detach().cuda()) for p in ps]
    resumed = info.make(cuda_ps)
    resumed.load_state_dict(opt.state_dict())
    for p in cuda_ps:
        assert all(s.device == p.device for s in resumed.state[p].values())
    for step in range(3, 5):
        set_grads(ps, step)
        for p, q in zip(ps, cuda_ps, strict=True):
            q.grad = p.grad.cuda()
        opt.step()
        resumed.step()
    for p, q in zip(ps, cuda_ps, strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_deepcopy_and_pickle(info):
    for make_copy in (copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))):
        ps = params()
        opt = info.make(ps)
        train(opt, ps, 2)
        copied = make_copy(opt)
        copied_ps = [p for g in copied.param_groups for p in g["params"]]
        assert all(c is not p for c, p in zip(copied_ps, ps, strict=True))
        assert_same(snapshot(opt), snapshot(copied))
        held = snapshot(opt)
        train(copied, copied_ps, 2, start=2)  # the copy trains on its own
        assert_same(held, snapshot(opt))
        train(opt, ps, 2, start=2)
        assert_same(snapshot(opt), snapshot(copied))


@pytest.mark.parametrize("info", INFOS, ids=info_ids(INFOS))
def test_no_reference_kept_after_del(info):
    ps = params()
    opt = info.make(ps)
    opt.register_step_post_hook(lambda *_: None)
    train(opt, ps, 2)
    opt.state_dict()
    refs = [weakref.ref(opt), *(weakref.ref(p) for p in ps)]
    slot_refs = [weakref.ref(s) for state in opt.state.values() for s in state.values()]
    del opt, ps
    gc.collect()
    assert all(ref() is None for ref in refs + slot_refs)
