"""Every fast path against the per-tensor reference: params and every slot over 20 steps.

The foreach path runs the same update rule over ``TensorList``s, so it must be bit-identical
(also when tensors are cut into pieces). The fused paths run torch's kernels with TF's math
mapped onto them (different arithmetic): within 1e-6 relative in float32 and 1e-13 in float64
(relative to max(1, the largest magnitude of the tensor), since a value near zero is the sum of
larger updates).
Sparse gradients always take the sparse rule; the native path finds the distinct rows by a hash
(first-occurrence order) and runs LazyAdam's and Adam's sparse rules in C: within the same bounds.
"""

from __future__ import annotations

import pytest
import torch
from optimizer_kwargs import kwargs_for

import trainop
from trainop.kernels import chunking
from trainop.registry import OPTIMIZER_CLASSES

STEPS = 20
SHAPES = [(300,), (3, 4), (2000,), (1,), (17, 5)]
EXTRAS = {  # regularisation on, so that every branch of the rules runs
    "AdagradDAOptimizer": {"l1_regularization_strength": 0.01, "l2_regularization_strength": 0.01},
    "FtrlOptimizer": {"learning_rate": 0.1, "l1_regularization_strength": 0.01,
                      "l2_regularization_strength": 0.01},
    "ProximalAdagradOptimizer": {"learning_rate": 0.1, "l1_regularization_strength": 0.01},
    "ProximalGradientDescentOptimizer": {"learning_rate": 0.1,
                                         "l1_regularization_strength": 0.01},
    "RMSPropOptimizer": {"momentum": 0.5, "centered": True},
    "NovoGrad": {"weight_decay": 0.001},
}
FAST = [(name, impl) for name, cls in OPTIMIZER_CLASSES.items()
        for impl in cls.IMPLEMENTATIONS if impl != "reference"]


def run(cls, implementation, dtype, sparse=False):
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(s, dtype=dtype, generator=gen).requires_grad_() for s in SHAPES]
    opt = cls(params=params, implementation=implementation,
              **kwargs_for(cls.__name__, EXTRAS))
    for _ in range(STEPS):
        for p in params:
            g = torch.randn(p.shape, dtype=dtype, generator=gen)
            if sparse and p.dim() == 2:
                rows = torch.tensor([0, 2, 0])
                g = torch.sparse_coo_tensor(rows[None], g[:3], p.shape)
            p.grad = g
        opt.step()
    return params, [opt.state[p] for p in params]


def assert_close(ours, ref, rtol):
    params, states = ours
    ref_params, ref_states = ref
    for p, q in zip(params, ref_params, strict=True):
        torch.testing.assert_close(p, q, rtol=rtol, atol=rtol * max(1.0, float(q.abs().max())))
    for s, r in zip(states, ref_states, strict=True):
        assert s.keys() == r.keys()
        for k in r:
            torch.testing.assert_close(s[k], r[k], rtol=rtol,
                                       atol=rtol * max(1.0, float(r[k].abs().max())), msg=k)


def tolerance(name, implementation, dtype) -> float:
    """foreach: bit-identical; other fast paths: 1e-6 (float32) / 1e-13 (float64) relative.
    NovoGrad's per-tensor norm is float32 by definition (upstream) in every dtype and the C
    kernel sums it in another order than torch, so its float64 agrees to float32's rounding."""
    if implementation == "foreach":
        return 0.0
    if name == "NovoGrad" and implementation == "native" or dtype == torch.float32:
        return 1e-6
    return 1e-13


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(("name", "implementation"), FAST, ids=lambda x: str(x))
def test_fast_path_equals_reference(name, implementation, dtype, monkeypatch):
    # Small pieces so that the foreach path really cuts and groups tensors.
    monkeypatch.setattr(chunking, "CHUNK", 256)
    monkeypatch.setattr(chunking, "CHUNK_ABOVE", 512)
    cls = OPTIMIZER_CLASSES[name]
    ref = run(cls, "reference", dtype)
    ours = run(cls, implementation, dtype)
    assert_close(ours, ref, rtol=tolerance(name, implementation, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize(("name", "implementation"), FAST, ids=lambda x: str(x))
def test_sparse_gradients_take_the_sparse_rule(name, implementation, dtype):
    cls = OPTIMIZER_CLASSES[name]
    ref = run(cls, "reference", dtype, sparse=True)
    ours = run(cls, implementation, dtype, sparse=True)
    assert_close(ours, ref, rtol=tolerance(name, implementation, dtype))


@pytest.mark.native
def test_automatic_choice_by_device_and_hyperparameters():
    p = torch.zeros(3, requires_grad=True)
    opt = trainop.AdamOptimizer(params=[p])
    hp = opt._prepare(opt.param_groups[0], torch.zeros((), dtype=torch.int64)).for_tensor(p)
    cuda = torch.device("cuda")
    assert opt._choose_implementation(p.dtype, p.device, hp) == "native"  # CPU: trainop's C
    assert opt._choose_implementation(p.dtype, cuda, hp) == "fused"  # CUDA: torch's kernel
    assert opt._choose_implementation(torch.float16, p.device, hp) == "foreach"
    lr = torch.tensor(0.1)
    opt_t = trainop.AdamOptimizer(params=[p], learning_rate=lr)
    hp_t = opt_t._prepare(opt_t.param_groups[0], torch.zeros((), dtype=torch.int64)).for_tensor(p)
    # A tensor hyperparameter rules out torch's fused kernels (host reads); the C kernels read
    # CPU scalars at no cost.
    assert opt_t._choose_implementation(p.dtype, p.device, hp_t) == "native"
    assert opt_t._choose_implementation(p.dtype, cuda, hp_t) == "foreach"
    ref = trainop.AdamOptimizer(params=[p], implementation="reference")
    assert ref._choose_implementation(p.dtype, p.device, hp) == "reference"


def test_momentum_zero_runs_foreach_even_if_fused_requested():
    p = torch.ones(3, requires_grad=True)
    opt = trainop.MomentumOptimizer(0.5, 0.0, params=[p], implementation="fused")
    p.grad = torch.ones(3)
    opt.step()
    assert torch.equal(opt.get_slot(p, "momentum"), torch.ones(3))  # TF still writes the slot
    assert torch.equal(p.detach(), torch.full((3,), 0.5))


def test_same_variable_twice_is_two_sequential_updates_on_every_path():
    for implementation in ("reference", "foreach", "fused"):
        v = torch.tensor([1.0, 2.0], requires_grad=True)
        opt = trainop.MomentumOptimizer(1.0, 0.5, implementation=implementation)
        g = torch.tensor([1.0, 1.0])
        opt.apply_gradients([(g, v), (g, v)])
        # accum: 1 then 1.5; var: 1 - 1 - 1.5 = -1.5
        assert torch.equal(v.detach(), torch.tensor([-1.5, -0.5])), implementation
