"""Properties (hypothesis, issue #34): ``save_tf`` -> ``read_tf`` -> ``load_tf`` is the identity
on the parameter and every slot and non-slot variable, for each optimizer and layout; and
``from_torch_optim`` -> ``to_torch_optim`` gives torch.optim's state back. Profiles: ``ci``
(default, a few seconds each) and ``long`` (``TRAINOP_HYPOTHESIS_PROFILE=long``)."""
from __future__ import annotations

import os
import tempfile

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trainop
import trainop.checkpoints as ckpt

settings.register_profile("rt-ci", max_examples=12, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("rt-long", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = settings.get_profile(
    "rt-long" if os.environ.get("TRAINOP_HYPOTHESIS_PROFILE") == "long" else "rt-ci")

OPTIMIZERS = {
    "sgd": lambda ps: trainop.GradientDescentOptimizer(ps, learning_rate=0.1),
    "momentum": lambda ps: trainop.MomentumOptimizer(ps, learning_rate=0.1, momentum=0.9),
    "adam": lambda ps: trainop.AdamOptimizer(ps, learning_rate=0.1),
    "adagrad": lambda ps: trainop.AdagradOptimizer(ps, learning_rate=0.1),
    "rmsprop": lambda ps: trainop.RMSPropOptimizer(ps, learning_rate=0.1, momentum=0.5),
}
LAYOUTS = {  # name -> (layout, torch shape)
    "identity": (ckpt.identity, (2, 3)),
    "transpose": (ckpt.transpose, (2, 3)),
    "conv1d": (ckpt.conv1d, (2, 3, 4)),
    "conv2d": (ckpt.conv2d, (2, 3, 2, 2)),
    "lstm_bias": (ckpt.lstm_bias, (8,)),
    "lstm_bias_forget": (ckpt.lstm_bias_forget(1.0), (8,)),
}


def _model(shape):
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.zeros(shape))
    return model


@PROFILE
@given(st.sampled_from(sorted(OPTIMIZERS)), st.sampled_from(sorted(LAYOUTS)),
       st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_save_read_load_is_the_identity(opt_name, layout_name, steps, seed):
    layout, shape = LAYOUTS[layout_name]
    gen = torch.Generator().manual_seed(seed)
    model = _model(shape)
    with torch.no_grad():
        model.w.copy_(torch.randn(shape, generator=gen))
    opt = OPTIMIZERS[opt_name](model.parameters())
    for _ in range(steps):
        model.w.grad = torch.randn(shape, generator=gen)
        opt.step()
    names = {"w": ("scope/w", layout)}
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "ck")
        ckpt.save_tf(prefix, model, opt, names=names)
        read = ckpt.read_tf(prefix)
        assert "scope/w" in read and int(read["global_step"]) == steps
        fresh = _model(shape)
        fresh_opt = OPTIMIZERS[opt_name](fresh.parameters())
        ckpt.load_tf(prefix, fresh, fresh_opt, names=names)
    assert torch.equal(fresh.w.detach(), model.w.detach())
    before, after = opt.state_dict(), fresh_opt.state_dict()
    for key, value in before["state"][0].items():
        assert torch.equal(after["state"][0][key], value), key
    for key, value in before["param_groups"][0]["non_slot"].items():
        got = after["param_groups"][0]["non_slot"][key]
        assert got.dtype == value.dtype and torch.equal(got, value), key


TORCH = {
    "adam": (lambda ps: torch.optim.Adam(ps, lr=0.1, betas=(0.9, 0.999), eps=1e-8),
             lambda ps: trainop.AdamOptimizer(ps, learning_rate=0.1, epsilon=1e-8)),
    "sgd": (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
            lambda ps: trainop.MomentumOptimizer(ps, learning_rate=0.1, momentum=0.9)),
    "adagrad": (lambda ps: torch.optim.Adagrad(ps, lr=0.1, initial_accumulator_value=0.1,
                                               eps=1e-10),
                lambda ps: trainop.AdagradOptimizer(ps, learning_rate=0.1)),
}


@PROFILE
@given(st.sampled_from(sorted(TORCH)), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_torch_optim_round_trip(name, steps, seed):
    make_torch, make_ours = TORCH[name]
    gen = torch.Generator().manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(3, 2, generator=gen))
    torch_opt = make_torch([p])
    for _ in range(steps):
        p.grad = torch.randn(3, 2, generator=gen)
        torch_opt.step()
    ours = make_ours([p])
    ckpt.from_torch_optim(torch_opt, ours)
    back = make_torch([p])
    ckpt.to_torch_optim(ours, back)
    want, got = torch_opt.state_dict()["state"][0], back.state_dict()["state"][0]
    assert set(got) == set(want)
    for key, value in want.items():
        assert torch.allclose(got[key].to(value.dtype), value, rtol=1e-6, atol=0), key
