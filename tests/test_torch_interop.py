"""trainop optimizers inside torch's own training machinery: ``torch.amp.GradScaler`` and the
``torch.optim.Optimizer`` hooks (step pre/post, state_dict pre/post)."""

from __future__ import annotations

import pytest
import torch

import trainop


def twin_models(seed=0):
    torch.manual_seed(seed)
    a = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    b = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    b.load_state_dict(a.state_dict())
    return a, b


@pytest.mark.parametrize("name", ["AdamOptimizer", "MomentumOptimizer", "RMSPropOptimizer"])
def test_grad_scaler_steps_like_the_unscaled_run_and_skips_non_finite_steps(name):
    kwargs = {"momentum": 0.9} if name == "MomentumOptimizer" else {}
    scaled, plain = twin_models()
    opt = getattr(trainop, name)(0.01, params=scaled.parameters(), **kwargs)
    ref = getattr(trainop, name)(0.01, params=plain.parameters(), **kwargs)
    # A power of two scale: scaling and unscaling the gradients is exact.
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=1000)
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
    for _ in range(4):
        opt.zero_grad()
        ref.zero_grad()
        scaler.scale(scaled(x).pow(2).mean()).backward()
        scaler.step(opt)
        scaler.update()
        plain(x).pow(2).mean().backward()
        ref.step()
    for p, q in zip(scaled.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    before = [p.detach().clone() for p in scaled.parameters()]
    slots = {(id(p), k): t.clone() for p in scaled.parameters()
             for k, t in opt.state[p].items()}
    opt.zero_grad()
    scaler.scale(scaled(x * float("inf")).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert all(torch.equal(p, b) for p, b in zip(scaled.parameters(), before, strict=True))
    assert all(torch.equal(opt.state[p][k], slots[id(p), k]) for p in scaled.parameters()
               for k in opt.state[p])
    assert scaler.get_scale() == 2.0 ** 9


def test_step_and_state_dict_hooks_run():
    model, _ = twin_models()
    opt = trainop.AdamOptimizer(0.01, params=model.parameters())
    calls = []
    opt.register_step_pre_hook(lambda o, args, kwargs: calls.append(("pre", o is opt)))
    opt.register_step_post_hook(lambda o, args, kwargs: calls.append(("post", o is opt)))
    opt.register_state_dict_post_hook(lambda o, sd: sd.setdefault("extra", 1) and None)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    assert calls == [("pre", True), ("post", True)]
    assert opt.state_dict()["extra"] == 1
