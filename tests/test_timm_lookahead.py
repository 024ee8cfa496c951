"""timm's ``Lookahead`` around trainop's optimizers: a resumed run equals the uninterrupted one
to the bit, and the wrapper's per-parameter state round-trips as torch round-trips it.

Lookahead keeps its slow weights in the base optimizer's per-parameter state
(``lookahead_slow_buff``) and its counters in the param groups; ``state_dict`` and
``load_state_dict`` are the base optimizer's. trainop keeps such keys beside its own slots,
which stay checked (``contract/checkpoint.py``).
"""

from __future__ import annotations

import io

import pytest
import torch
from optimizer_kwargs import kwargs_for
from timm_client import import_timm

from trainop.contract.slots import TRAINOP_SLOT_NAMES
from trainop.registry import OPTIMIZER_CLASSES

timm = import_timm()
Lookahead = timm.optim.Lookahead

STEPS, RESUME_AT, K = 8, 4, 3


def _model() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))


def _batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + i)
    return torch.randn(5, 3, generator=g), torch.randn(5, 1, generator=g)


def _wrapped(name: str, model: torch.nn.Module) -> Lookahead:
    base = OPTIMIZER_CLASSES[name](params=model.parameters(), **kwargs_for(name))
    return Lookahead(base, alpha=0.5, k=K)


def _train(model, opt, steps: range) -> None:
    for i in steps:
        x, y = _batch(i)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def _saved(obj) -> dict:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CLASSES))
def test_lookahead_resume_is_bit_exact(name):
    model = _model()
    opt = _wrapped(name, model)
    _train(model, opt, range(STEPS))

    first = _model()
    first_opt = _wrapped(name, first)
    _train(first, first_opt, range(RESUME_AT))
    saved_model, saved_opt = _saved(first.state_dict()), _saved(first_opt.state_dict())
    assert all("lookahead_slow_buff" in entry for entry in saved_opt["state"].values())

    resumed = _model()
    resumed.load_state_dict(saved_model)
    resumed_opt = _wrapped(name, resumed)
    resumed_opt.load_state_dict(saved_opt)
    _train(resumed, resumed_opt, range(RESUME_AT, STEPS))

    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        state_a, state_b = opt.state[a], resumed_opt.state[b]
        assert sorted(state_a) == sorted(state_b)
        for key in state_a:
            assert torch.equal(state_a[key], state_b[key]), key
    assert [g["lookahead_step"] for g in resumed_opt.param_groups] == [STEPS] * len(
        resumed_opt.param_groups)


def _torch_and_trainop_loads(value: torch.Tensor, param_dtype: torch.dtype):
    """The wrapper's entry ``value`` after torch's load and after trainop's, for a parameter of
    ``param_dtype``."""
    loaded = []
    for opt_cls in (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                    lambda p: OPTIMIZER_CLASSES["MomentumOptimizer"](p, lr=0.1, momentum=0.9)):
        w = torch.nn.Parameter(torch.ones(2, dtype=param_dtype))
        opt = opt_cls([w])
        w.grad = torch.ones_like(w)
        opt.step()
        sd = opt.state_dict()
        sd["state"][0]["wrapper_buffer"] = value
        sd["state"][0]["wrapper_list"] = [value, 3]
        sd["state"][0]["wrapper_note"] = "kept"
        opt.load_state_dict(sd)
        entry = opt.state[w]
        loaded.append((entry["wrapper_buffer"], entry["wrapper_list"], entry["wrapper_note"]))
    return loaded


@pytest.mark.parametrize("value, param_dtype", [
    (torch.tensor([1.5, -2.0], dtype=torch.float64), torch.float32),
    (torch.tensor([1, 2]), torch.float64),
])
def test_wrapper_state_is_cast_as_torch_casts_it(value, param_dtype):
    (t_buf, t_list, t_note), (o_buf, o_list, o_note) = _torch_and_trainop_loads(value,
                                                                               param_dtype)
    assert t_buf.dtype == o_buf.dtype == param_dtype
    assert torch.equal(t_buf, o_buf) and torch.equal(o_buf, value.to(param_dtype))
    assert o_list[1] == t_list[1] == 3 and o_list[0].dtype == param_dtype
    assert o_note == "kept"  # (torch turns a string into the text of a generator)


def test_a_slot_of_another_optimizer_is_still_refused():
    w = torch.nn.Parameter(torch.ones(2))
    opt = OPTIMIZER_CLASSES["MomentumOptimizer"]([w], lr=0.1, momentum=0.9)
    w.grad = torch.ones_like(w)
    opt.step()
    sd = opt.state_dict()
    sd["state"][0]["accumulator"] = torch.zeros(2)
    before = opt.state[w]["momentum"].clone()
    with pytest.raises(ValueError, match=r"unexpected \['accumulator'\]"):
        opt.load_state_dict(sd)
    assert torch.equal(opt.state[w]["momentum"], before)


def _slot_names_in_use() -> set[str]:
    names = set()
    for name, cls in OPTIMIZER_CLASSES.items():
        opt = cls(params=[torch.nn.Parameter(torch.ones(2))], **kwargs_for(name))
        for group in opt.param_groups:
            names |= {s.name for s in opt._slot_specs(group)}
            for flag in ("centered", "use_nesterov", "amsgrad"):
                if flag in group:
                    names |= {s.name for s in opt._slot_specs({**group, flag: not group[flag]})}
    return names


def test_slot_name_table_is_every_optimizers_slots():
    assert _slot_names_in_use() == set(TRAINOP_SLOT_NAMES)


@pytest.mark.parametrize("name", ["AdamOptimizer", "MomentumOptimizer", "AdagradOptimizer"])
def test_a_parameter_without_the_wrappers_key_steps_beside_one_with_it(name):
    """Lookahead adds its key only to the parameters that had a gradient at its k-th step;
    the others (and their sparse updates) step on with their slots alone, as do the keys of
    any wrapper, tensors or not."""
    used, unused = torch.nn.Parameter(torch.ones(4, 2)), torch.nn.Parameter(torch.ones(4, 2))
    opt = Lookahead(OPTIMIZER_CLASSES[name]([used, unused], lr=0.1, **{
        k: v for k, v in kwargs_for(name).items() if k != "learning_rate"}), k=1)
    used.grad = torch.ones(4, 2)
    opt.step()  # the k-th step: only `used` gets lookahead_slow_buff
    base = opt._base_optimizer
    assert "lookahead_slow_buff" in base.state[used] and "lookahead_slow_buff" not in \
        base.state[unused]
    base.state[used]["wrapper_count"] = 3
    for grad in (torch.ones(4, 2), torch.sparse_coo_tensor([[1, 3]], torch.ones(2, 2),
                                                              (4, 2))):
        used.grad, unused.grad = torch.ones(4, 2), grad
        opt.step()
    assert base.state[used]["wrapper_count"] == 3
    assert torch.isfinite(unused).all() and not torch.equal(unused, torch.ones(4, 2))
