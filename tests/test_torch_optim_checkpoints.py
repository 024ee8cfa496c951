"""``from_torch_optim`` / ``to_torch_optim``: a torch.optim run switched to trainop mid-run
(and back) continues with the state it had.

Each case runs torch.optim for ``BEFORE`` steps, moves the state into the trainop optimizer,
which runs ``AFTER`` steps; the result must equal TF's update rule applied (in float64) to the
torch state as it was. Then the state goes back into a fresh torch.optim optimizer, which runs
``AFTER`` steps more, checked against torch's rule applied to trainop's state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest
import torch

import trainop
import trainop.checkpoints as ckpt

BEFORE, AFTER = 3, 2
LR = 0.05


def _adam_tf(p, g, s, t, hp, decoupled=0.0):
    b1, b2, eps = hp["beta1"], hp["beta2"], hp["epsilon"]
    p = p - decoupled * p
    m = b1 * s["m"] + (1 - b1) * g
    v = b2 * s["v"] + (1 - b2) * g * g
    alpha = LR * math.sqrt(1 - b2 ** (t + 1)) / (1 - b1 ** (t + 1))
    return p - alpha * m / (v.sqrt() + eps), {"m": m, "v": v}


def _adam_torch(p, g, s, t, hp, decoupled=0.0):
    b1, b2 = hp["betas"]
    p = p * (1 - LR * decoupled)
    m = b1 * s["m"] + (1 - b1) * g
    v = b2 * s["v"] + (1 - b2) * g * g
    denom = v.sqrt() / math.sqrt(1 - b2 ** (t + 1)) + hp["eps"]
    return p - LR / (1 - b1 ** (t + 1)) * m / denom, {"m": m, "v": v}


def _momentum(p, g, s, t, hp):  # the same rule in TF and torch (dampening 0)
    mu = hp.get("momentum", 0.9)
    buf = mu * s["momentum"] + g
    step = g + mu * buf if hp.get("nesterov") or hp.get("use_nesterov") else buf
    return p - LR * step, {"momentum": buf}


def _rms_tf(p, g, s, t, hp):
    rho, mu, eps = hp["decay"], hp["momentum"], hp["epsilon"]
    ms = rho * s["rms"] + (1 - rho) * g * g
    mg = rho * s.get("mg", torch.zeros_like(g)) + (1 - rho) * g
    centre = mg * mg if hp.get("centered") else 0
    mom = mu * s["momentum"] + LR * g / (ms - centre + eps).sqrt()
    out = {"rms": ms, "momentum": mom} | ({"mg": mg} if hp.get("centered") else {})
    return p - mom, out


def _rms_torch(p, g, s, t, hp):
    rho, mu, eps = hp["alpha"], hp["momentum"], hp["eps"]
    sq = rho * s["rms"] + (1 - rho) * g * g
    ga = rho * s.get("mg", torch.zeros_like(g)) + (1 - rho) * g
    avg = ((sq - ga * ga) if hp.get("centered") else sq).sqrt() + eps
    buf = mu * s["momentum"] / LR + g / avg  # torch's buffer is TF's / lr
    out = {"rms": sq, "momentum": buf * LR} | ({"mg": ga} if hp.get("centered") else {})
    return p - LR * buf, out


def _adagrad_tf(p, g, s, t, hp):
    acc = s["accumulator"] + g * g
    return p - LR * g / acc.sqrt(), {"accumulator": acc}


def _adagrad_torch(p, g, s, t, hp):
    acc = s["accumulator"] + g * g
    return p - LR * g / (acc.sqrt() + hp["eps"]), {"accumulator": acc}


@dataclass(frozen=True)
class Case:
    id: str
    torch_cls: type
    torch_kwargs: dict
    trainop_make: Any  # params -> trainop optimizer
    tf_rule: Any
    torch_rule: Any
    slots: dict  # trainop slot -> torch state key (scaled by lr for RMSprop momentum)


CASES = [
    Case("adam", torch.optim.Adam, {"betas": (0.8, 0.9), "eps": 1e-3},
         lambda ps: trainop.AdamOptimizer(LR, 0.8, 0.9, 1e-3, params=ps),
         _adam_tf, _adam_torch, {"m": "exp_avg", "v": "exp_avg_sq"}),
    Case("adamw", torch.optim.AdamW, {"betas": (0.8, 0.9), "eps": 1e-3, "weight_decay": 0.1},
         lambda ps: trainop.AdamWOptimizer(LR * 0.1, LR, 0.8, 0.9, 1e-3, params=ps),
         lambda *a: _adam_tf(*a, decoupled=LR * 0.1),
         lambda *a: _adam_torch(*a, decoupled=0.1), {"m": "exp_avg", "v": "exp_avg_sq"}),
    Case("sgd_momentum", torch.optim.SGD, {"momentum": 0.9},
         lambda ps: trainop.MomentumOptimizer(LR, 0.9, params=ps), _momentum, _momentum,
         {"momentum": "momentum_buffer"}),
    Case("sgd_nesterov", torch.optim.SGD, {"momentum": 0.9, "nesterov": True},
         lambda ps: trainop.MomentumOptimizer(LR, 0.9, use_nesterov=True, params=ps),
         _momentum, _momentum, {"momentum": "momentum_buffer"}),
    Case("rmsprop", torch.optim.RMSprop, {"alpha": 0.9, "momentum": 0.5, "eps": 1e-3},
         lambda ps: trainop.RMSPropOptimizer(LR, 0.9, 0.5, 1e-3, params=ps),
         _rms_tf, _rms_torch, {"rms": "square_avg"}),
    Case("rmsprop_centered", torch.optim.RMSprop,
         {"alpha": 0.9, "momentum": 0.5, "eps": 1e-3, "centered": True},
         lambda ps: trainop.RMSPropOptimizer(LR, 0.9, 0.5, 1e-3, centered=True, params=ps),
         _rms_tf, _rms_torch, {"rms": "square_avg", "mg": "grad_avg"}),
    Case("adagrad", torch.optim.Adagrad, {"eps": 1e-3},
         lambda ps: trainop.AdagradOptimizer(LR, params=ps), _adagrad_tf, _adagrad_torch,
         {"accumulator": "sum"}),
]


def _grads(n):
    gen = torch.Generator().manual_seed(3)
    return [[torch.randn(4, 3, generator=gen), torch.randn(3, generator=gen)] for _ in range(n)]


def _run_torch(opt, params, grads):
    for gs in grads:
        for p, g in zip(params, gs, strict=True):
            p.grad = g.clone()
        opt.step()


def _hp(opt):
    group = opt.param_groups[0]
    return {k: v for k, v in group.items() if k != "params"}


def _expected(rule, params, slots, step, hp, grads):
    """``rule`` applied in float64 from ``params``/``slots`` at ``step`` over ``grads``."""
    ps = [p.detach().double() for p in params]
    ss = [{k: v.double() for k, v in s.items()} for s in slots]
    for t, gs in enumerate(grads, start=step):
        for i, g in enumerate(gs):
            ps[i], ss[i] = rule(ps[i], g.double(), ss[i], t, hp)
    return ps, ss


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_switch_torch_to_trainop_and_back(case):
    grads = _grads(BEFORE + 2 * AFTER)
    params = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(3))]
    torch_opt = case.torch_cls(params, lr=LR, **case.torch_kwargs)
    _run_torch(torch_opt, params, grads[:BEFORE])

    ours = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt = case.trainop_make(ours)
    notes = ckpt.from_torch_optim(torch_opt, opt)
    assert isinstance(notes, list)
    lr_scale = {"momentum": LR} if case.torch_cls is torch.optim.RMSprop else {}
    start = []
    for p, q in zip(params, ours, strict=True):
        state = torch_opt.state[p]
        for slot, key in case.slots.items():
            assert torch.equal(opt.state[q][slot], state[key]), (case.id, slot)
        if lr_scale:
            torch.testing.assert_close(opt.state[q]["momentum"],
                                       state["momentum_buffer"] * LR, rtol=0, atol=0)
        start.append({k: v.clone() for k, v in opt.state[q].items()})
    # torch's SGD counts no steps; the others carry theirs over
    counted = case.torch_cls is not torch.optim.SGD
    assert int(opt.param_groups[0]["non_slot"]["step"]) == (BEFORE if counted else 0)

    hp = {**_hp(opt), **case.torch_kwargs}
    want, _ = _expected(case.tf_rule, ours, start, BEFORE, hp, grads[BEFORE:BEFORE + AFTER])
    for gs in grads[BEFORE:BEFORE + AFTER]:
        opt.apply_gradients(list(zip(gs, ours, strict=True)))
    for q, w in zip(ours, want, strict=True):
        torch.testing.assert_close(q.detach().double(), w, rtol=1e-5, atol=1e-6)

    # and back to torch.optim
    back = [torch.nn.Parameter(q.detach().clone()) for q in ours]
    torch_back = case.torch_cls(back, lr=LR, **case.torch_kwargs)
    ckpt.to_torch_optim(opt, torch_back)
    if counted:
        assert int(torch_back.state[back[0]]["step"]) == BEFORE + AFTER
    else:
        assert "step" not in torch_back.state[back[0]]
    start = [{k: v.clone() for k, v in opt.state[q].items()} for q in ours]
    hp = {**_hp(torch_back), **_hp(opt)}
    want, _ = _expected(case.torch_rule, back, start, BEFORE + AFTER, hp,
                        grads[BEFORE + AFTER:])
    _run_torch(torch_back, back, grads[BEFORE + AFTER:])
    for q, w in zip(back, want, strict=True):
        torch.testing.assert_close(q.detach().double(), w, rtol=1e-5, atol=1e-6)


def test_beta_powers_are_what_trainop_itself_would_hold():
    """After a switch at step 3 the beta powers equal those of a trainop Adam that ran 3
    steps itself (float32, one multiplication per step)."""
    w = torch.nn.Parameter(torch.ones(2))
    own = trainop.AdamOptimizer(0.1, 0.85, 0.93, params=[w])
    for _ in range(3):
        own.apply_gradients([(torch.ones(2), w)])
    p = torch.nn.Parameter(torch.ones(2))
    torch_opt = torch.optim.Adam([p], lr=0.1, betas=(0.85, 0.93))
    _run_torch(torch_opt, [p], [[torch.ones(2)]] * 3)
    q = torch.nn.Parameter(torch.ones(2))
    opt = trainop.AdamOptimizer(0.1, 0.85, 0.93, params=[q])
    ckpt.from_torch_optim(torch_opt.state_dict(), opt)
    for name in ("beta1_power", "beta2_power"):
        assert torch.equal(opt.param_groups[0]["non_slot"][name],
                           own.param_groups[0]["non_slot"][name])
