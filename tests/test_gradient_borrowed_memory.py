"""A gradient in a storage of its own over memory the step writes (``torch.from_numpy`` or
``torch.from_dlpack`` of a parameter, or of a slot) is read before anything is written, on
every class and implementation (#47 A1: the may-share filter keyed on "requires grad, or a
storage held twice" and missed it; the reference path of every class, AdamW and MomentumW on
every path, and a slot's memory on every path went off TF's order).

TF reads every gradient before any apply op writes, so the step with the aliasing gradient
must equal the step given a copy of that gradient taken just before it (each class's step on
plain gradients is TF's, tests/test_tf_parity.py); float64 formulas for Adam, Momentum and the
decoupled-decay classes are in tests/test_gradient_aliasing.py. The shapes, which tensor
borrows which memory, the source and the step count vary."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from optimizer_kwargs import kwargs_for

from trainop import OPTIMIZER_CLASSES
from trainop.kernels import native

CASES = [(name, impl) for name in sorted(OPTIMIZER_CLASSES)
         for impl in OPTIMIZER_CLASSES[name].IMPLEMENTATIONS]


def _borrow(t: torch.Tensor, source: str) -> torch.Tensor:
    t = t.detach()
    return torch.from_numpy(t.numpy()) if source == "numpy" else torch.from_dlpack(t)


def _run(name, impl, shapes, steps, target, source, borrowed, reader=0):
    """``steps`` steps of two parameters; from the second step on, parameter ``reader``'s
    gradient is ``target``'s memory (``"param"``: the other parameter; else that slot of the
    other parameter) borrowed through ``source``, or (``borrowed`` False) a copy of it made
    before the step."""
    gen = torch.Generator().manual_seed(7)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen, dtype=torch.float64))
              for s in shapes]
    kwargs = kwargs_for(name)
    opt = OPTIMIZER_CLASSES[name](params=params, implementation=impl, **kwargs)
    for step in range(steps):
        grads = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
        if step:
            other = params[1 - reader]
            memory = other if target == "param" else opt.state[other][target]
            grads[reader] = _borrow(memory, source) if borrowed else memory.detach().clone()
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        opt.step()
    return [t.clone() for p in params for t in (p.detach(), *(
        v for _, v in sorted(opt.state[p].items()) if isinstance(v, torch.Tensor)))]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(("name", "impl"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_borrowed_memory_is_read_before_any_write(name, impl, data):
    if impl == "native" and not native.available():
        pytest.skip("the native kernels are not built here")
    size = data.draw(st.integers(1, 7), label="size")
    shapes = [(size,), (size,)] if data.draw(st.booleans(), label="vectors") \
        else [(2, size), (2, size)]
    probe = OPTIMIZER_CLASSES[name](params=[torch.nn.Parameter(torch.zeros(1))],
                                    **kwargs_for(name))
    slots = [s.name for s in probe._slot_specs(probe.param_groups[0]) if not s.scalar]
    target = data.draw(st.sampled_from(["param", *slots]), label="memory of")
    source = data.draw(st.sampled_from(["numpy", "dlpack"]), label="through")
    steps = data.draw(st.integers(2, 3), label="steps")
    reader = data.draw(st.sampled_from([0, 1]), label="whose gradient borrows")
    got = _run(name, impl, shapes, steps, target, source, True, reader)
    wanted = _run(name, impl, shapes, steps, target, source, False, reader)
    for a, b in zip(got, wanted, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
