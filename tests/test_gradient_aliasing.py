"""A gradient that shares memory with a variable of the same step is read as it was before the
step, on every implementation: ``p0.grad = p1.detach()``, a gradient that is a view into
another parameter, a parameter's own storage, a parameter of another param group, and TF's
``apply_gradients([(v1, v0), ...])`` where the gradient is another variable.

TensorFlow computes every gradient before any apply op writes a variable (contrib's
``DecoupledWeightDecayExtension`` decays the variable, then applies the base update with that
gradient). The expected numbers are those formulas in float64 (TF's Adam with epsilon hat,
TF's Momentum, contrib's decay not scaled by the learning rate), every gradient taken from the
variables before the step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import trainop
from trainop.kernels import native
from trainop.kernels import triton as tk

LR, MOMENTUM, WD = 0.1, 0.9, 0.1
BETA1, BETA2, EPSILON = 0.9, 0.999, 1e-8
STEPS = 3  # the first step makes the slots (general path); the next ones take the step plan
CONST = [0.3, -0.2, 0.1, 0.4, 0.5, -0.6]


def _momentum(var, grad, slots, t):
    accum = slots["accum"] = MOMENTUM * slots.get("accum", 0.0) + grad
    return var - LR * accum


def _adam(var, grad, slots, t):
    m = slots["m"] = BETA1 * slots.get("m", 0.0) + (1 - BETA1) * grad
    v = slots["v"] = BETA2 * slots.get("v", 0.0) + (1 - BETA2) * grad * grad
    lr_t = LR * math.sqrt(1 - BETA2 ** t) / (1 - BETA1 ** t)
    return var - lr_t * m / (np.sqrt(v) + EPSILON)


def _decayed(rule):
    return lambda var, grad, slots, t: rule(var - WD * var, grad, slots, t)


# name -> (TF-style constructor, the rule in float64, implementations offered)
OPTIMIZERS = {
    "AdamW": (lambda **kw: trainop.AdamWOptimizer(WD, learning_rate=LR, beta1=BETA1,
                                                   beta2=BETA2, epsilon=EPSILON,
                                                   decay_scaled_by_lr=False, **kw),
              _decayed(_adam), trainop.AdamWOptimizer.IMPLEMENTATIONS),
    "MomentumW": (lambda **kw: trainop.MomentumWOptimizer(WD, learning_rate=LR,
                                                           momentum=MOMENTUM,
                                                           decay_scaled_by_lr=False, **kw),
                  _decayed(_momentum), trainop.MomentumWOptimizer.IMPLEMENTATIONS),
    "Adam": (lambda **kw: trainop.AdamOptimizer(learning_rate=LR, beta1=BETA1, beta2=BETA2,
                                                epsilon=EPSILON, **kw),
             _adam, trainop.AdamOptimizer.IMPLEMENTATIONS),
    "Momentum": (lambda **kw: trainop.MomentumOptimizer(learning_rate=LR, momentum=MOMENTUM,
                                                        **kw),
                 _momentum, trainop.MomentumOptimizer.IMPLEMENTATIONS),
}


def _const(shape):
    return torch.tensor(CONST[:math.prod(shape)]).reshape(shape)


# name -> (the parameters' initial values, whether each is its own param group, the gradients
# as a function of the parameters: what the test assigns before each step)
SCENARIOS = {
    # p0's gradient is p1 (p1 comes after p0: a list path that decays p1 first reads it late)
    "later": ([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], False,
              lambda p: [p[1].detach(), _const((3,))]),
    # p1's gradient is p0, which every path writes before it reads p1's gradient
    "earlier": ([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], False,
                lambda p: [_const((3,)), p[0].detach()]),
    # a view into another parameter's storage (its second row)
    "view": ([[1.0, 2.0, 3.0], [[0.5, -1.0, 4.0], [2.0, -3.0, 0.25]]], False,
             lambda p: [p[1].detach()[1], _const((2, 3))]),
    # a parameter's own storage
    "own": ([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], False,
            lambda p: [p[0].detach(), _const((3,))]),
    # a parameter of the group updated before (another bucket)
    "groups": ([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], True,
               lambda p: [_const((3,)), p[0].detach()]),
    # #47 A1: a storage of its own over another parameter's memory (numpy, DLPack), so the
    # storage is held once and nothing requires grad
    "numpy-later": ([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], False,
                    lambda p: [torch.from_numpy(p[1].detach().numpy()), _const((3,))]),
    "numpy-earlier": ([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], False,
                      lambda p: [_const((3,)), torch.from_numpy(p[0].detach().numpy())]),
    "numpy-own": ([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], False,
                  lambda p: [torch.from_numpy(p[0].detach().numpy()), _const((3,))]),
    "dlpack-later": ([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], True,
                     lambda p: [torch.from_dlpack(p[1].detach()), _const((3,))]),
    "numpy-view": ([[1.0, 2.0, 3.0], [[0.5, -1.0, 4.0], [2.0, -3.0, 0.25]]], False,
                   lambda p: [torch.from_numpy(p[1].detach().numpy()[1]), _const((2, 3))]),
}


def expected(rule, inits, grads_of):
    """The variables after ``STEPS`` steps of ``rule`` in float64, every gradient read from the
    variables before the step."""
    variables = [np.asarray(x, dtype=np.float64) for x in inits]
    slots = [{} for _ in variables]
    for t in range(1, STEPS + 1):
        grads = [np.asarray(g, dtype=np.float64) for g in grads_of(variables)]
        variables = [rule(v, g, s, t) for v, g, s in zip(variables, grads, slots, strict=True)]
    return variables


def _numpy_grads(grads_of):
    """``grads_of`` (written for parameters) over float64 arrays."""
    def of(variables):
        tensors = [torch.from_numpy(v.copy()) for v in variables]
        return [g.double().numpy() if g.dtype != torch.float64 else g.numpy()
                for g in grads_of(tensors)]
    return of


def _implementation(impl, monkeypatch):
    if impl == "native" and not native.available():
        pytest.skip("the native kernels are not built here")
    if impl == "triton":
        if not tk.available():
            pytest.skip("Triton is not installed")
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # the Triton kernels on CPU tensors


def _close(actual, wanted):
    np.testing.assert_allclose(actual.detach().double().numpy(), wanted, rtol=2e-6, atol=2e-6)


def _steps_match(opt, params, rule, inits, grads_of):
    """``STEPS`` steps of ``opt``, the gradients assigned from ``grads_of`` before each, end
    where ``rule`` takes the variables in float64."""
    for _ in range(STEPS):
        for p, g in zip(params, grads_of(params), strict=True):
            p.grad = g
        opt.step()
    for p, wanted in zip(params, expected(rule, inits, _numpy_grads(grads_of)), strict=True):
        _close(p, wanted)


CASES = [(name, impl) for name, (_, _, offered) in OPTIMIZERS.items()
         for impl in (*offered, "triton")]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's masked lanes
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize(("name", "impl"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_step_reads_every_gradient_before_writing(name, impl, scenario, monkeypatch):
    _implementation(impl, monkeypatch)
    make, rule, _ = OPTIMIZERS[name]
    inits, own_groups, grads_of = SCENARIOS[scenario]
    params = [torch.nn.Parameter(torch.tensor(x)) for x in inits]
    groups = [{"params": [p]} for p in params] if own_groups else params
    opt = make(params=groups, implementation=impl)
    _steps_match(opt, params, rule, inits, grads_of)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("later", [True, False], ids=["later", "earlier"])
@pytest.mark.parametrize(("name", "impl"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_apply_gradients_with_another_variable_as_gradient(name, impl, later, monkeypatch):
    """TF style: ``apply_gradients([(v1, v0), (g, v1)])`` (the gradient the other variable
    itself, updated after v0) or ``[(g, v0), (v0, v1)]`` (updated before)."""
    _implementation(impl, monkeypatch)
    make, rule, _ = OPTIMIZERS[name]
    inits = [[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]]
    v0, v1 = (torch.tensor(x, requires_grad=True) for x in inits)
    opt = make(implementation=impl)
    for _ in range(STEPS):
        opt.apply_gradients([(v1, v0), (_const((3,)), v1)] if later
                            else [(_const((3,)), v0), (v0, v1)])
    const = _const((3,)).double().numpy()
    wanted = expected(rule, inits, (lambda vs: [vs[1], const]) if later
                      else (lambda vs: [const, vs[0]]))
    _close(v0, wanted[0])
    _close(v1, wanted[1])


def test_the_gradient_itself_is_not_written():
    """The copy is trainop's: the aliasing gradient's memory (the other parameter) moves only
    by its own update, and ``p0.grad`` is still the tensor the user assigned."""
    p0 = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    p1 = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    opt = trainop.MomentumWOptimizer(WD, learning_rate=LR, momentum=MOMENTUM, params=[p0, p1],
                                     decay_scaled_by_lr=False)
    grad = p1.detach()
    p0.grad, p1.grad = grad, torch.zeros(2)
    opt.step()
    assert p0.grad is grad
    np.testing.assert_allclose(p1.detach().numpy(), [3.0 * (1 - WD), 4.0 * (1 - WD)], rtol=1e-6)
    np.testing.assert_allclose(p0.detach().numpy(),
                               [1.0 * (1 - WD) - LR * 3.0, 2.0 * (1 - WD) - LR * 4.0],
                               rtol=1e-6)


@pytest.mark.parametrize("exclude", [False, True], ids=["flat", "loose"])
def test_flat_buffers(exclude):
    """After ``trainop.flatten``: a gradient copied into its buffer is read first already; one
    left outside the buffers (``exclude``) may be a view into the flat parameter buffer."""
    make, rule, _ = OPTIMIZERS["MomentumW"]
    inits, _, grads_of = SCENARIOS["later"]
    params = [torch.nn.Parameter(torch.tensor(x)) for x in inits]
    opt = make(params=params)
    trainop.flatten(opt, exclude=params[:1] if exclude else ())
    _steps_match(opt, params, rule, inits, grads_of)


@pytest.mark.skipif(native.metadata.load() is None, reason="the metadata reader is not built")
def test_gradients_autograd_made_are_not_compared(monkeypatch):
    """The common case costs no comparison and no copy: gradients in storages of their own
    (what backward makes) pass the reader's filter, on the step plan and in
    ``apply_gradients``."""
    def refuse(*args):
        raise AssertionError("the byte ranges were compared")

    monkeypatch.setattr("trainop.contract.read_first.byte_extents", refuse)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    opt = trainop.AdamWOptimizer(WD, learning_rate=LR, params=model.parameters())
    for _ in range(STEPS):  # the general path first (slots made), then the plan
        opt.zero_grad()
        model(torch.ones(2, 3)).sum().backward()
        opt.step()
    tf_opt = trainop.AdamWOptimizer(WD, learning_rate=LR)
    opt.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    tf_opt.apply_gradients([(p.grad, p) for p in model.parameters()])


MOMENTUM_CASES = [("Momentum", impl) for impl in
                  (*trainop.MomentumOptimizer.IMPLEMENTATIONS, "triton")]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(("name", "impl"), MOMENTUM_CASES,
                         ids=[f"{n}-{i}" for n, i in MOMENTUM_CASES])
def test_a_gradient_that_is_a_slot_of_an_earlier_variable(name, impl, monkeypatch):
    """``p1.grad`` a view of ``p0``'s momentum accumulator (a slot the step writes before it
    reaches p1): the gradient is the accumulator as it was before the step, as TF reads every
    gradient before any apply op. TF's Momentum in float64: accum = m * accum + g; var -= lr
    * accum; the first step (constant gradients) makes the slots."""
    _implementation(impl, monkeypatch)
    p0 = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
    p1 = torch.nn.Parameter(torch.tensor([0.5, -1.0, 4.0]))
    opt = trainop.MomentumOptimizer(learning_rate=LR, momentum=MOMENTUM, params=[p0, p1],
                                    implementation=impl)
    c0, c1 = _const((3,)), -2.0 * _const((3,))
    v0, v1 = p0.detach().double().numpy().copy(), p1.detach().double().numpy().copy()
    a0, a1 = np.zeros(3), np.zeros(3)
    for step in range(STEPS):
        g0 = c0.double().numpy()
        if step == 0:
            p0.grad, p1.grad = c0.clone(), c1.clone()
            g1 = c1.double().numpy()
        else:
            p0.grad = c0.clone()
            p1.grad = opt.state[p0]["momentum"][:]  # a view of the slot
            g1 = a0.copy()
        opt.step()
        a0, a1 = MOMENTUM * a0 + g0, MOMENTUM * a1 + g1
        v0, v1 = v0 - LR * a0, v1 - LR * a1
    _close(p0, v0)
    _close(p1, v1)
