"""CUDA paths (skipped without a GPU; CI has none): the same equalities as on the CPU.

Not yet run on a GPU (no device was lent to the session that wrote them): the first session
with one should run `pytest tests/test_cuda.py` and record the result in BENCHMARKS.md.
"""

from __future__ import annotations

import pytest
import torch
from optimizer_kwargs import kwargs_for

import trainop
from trainop.registry import OPTIMIZER_CLASSES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# ``native`` (trainop's C kernels) runs CPU tensors only; its CUDA rejection is in test_native.
CASES = [(name, impl) for name, cls in OPTIMIZER_CLASSES.items() for impl in cls.IMPLEMENTATIONS
         if impl != "native"]


def run(name, implementation, device, steps=10, found_inf_at=None):
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=gen).to(device).requires_grad_()
              for s in [(300,), (3, 4), (2000,)]]
    opt = OPTIMIZER_CLASSES[name](params=params, implementation=implementation,
                                  **kwargs_for(name))
    for step in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(device)
        found_inf = None
        if step == found_inf_at:
            found_inf = torch.ones((), device=device)
        opt.step(found_inf=found_inf)
    return [p.detach().cpu() for p in params]


@pytest.mark.parametrize(("name", "implementation"), CASES, ids=str)
def test_cuda_matches_cpu_reference(name, implementation):
    expected = run(name, "reference", "cpu", found_inf_at=4)
    got = run(name, implementation, "cuda", found_inf_at=4)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * max(1.0, float(b.abs().max())))


def test_flat_adam_on_cuda_equals_normal_layout():
    results = []
    for flat in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 1)).cuda()
        opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=0.01)
        if flat:
            trainop.flatten(opt)
        gen = torch.Generator(device="cuda").manual_seed(1)
        for _ in range(5):
            opt.zero_grad()
            model(torch.randn(4, 8, device="cuda", generator=gen)).pow(2).mean().backward()
            opt.step()
        results.append([p.detach().cpu() for p in model.parameters()])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)
