"""#16: a slot replaced by hand (``opt.state[p][name] = t``) after the step plan is cached, with
the right shape but the wrong dtype, layout or memory (an expanded tensor, a view of its own
parameter, of another parameter or of another slot), is rejected with a ``ValueError`` before
anything moves, even when it sits in the second of two buckets (the first bucket is not
updated either), on every implementation. A slot with the right shape that is only
non-contiguous is fine: the step equals the reference's."""

from __future__ import annotations

import pytest
import torch
from optimizer_kwargs import kwargs_for

from trainop.registry import OPTIMIZER_CLASSES

CASES = [(name, impl) for name, cls in OPTIMIZER_CLASSES.items()
         for impl in cls.IMPLEMENTATIONS
         if name not in ("GradientDescentOptimizer", "ProximalGradientDescentOptimizer")]

BAD = {
    "float64": (lambda opt, ps, slot: slot.double(), r"to have dtype torch\.float32, got "
                                                     r"torch\.float64"),
    "sparse": (lambda opt, ps, slot: slot.to_sparse(), r"to be a dense \(strided\) tensor"),
    "expanded": (lambda opt, ps, slot: slot[:1].expand(slot.shape),
                 r"to have elements of its own, got stride \(0, 1\)"),
    "own parameter": (lambda opt, ps, slot: ps[1].detach(),
                      r"got parameter 1 \(shape \(4, 3\)\) and the slot '\w+' of parameter 1"),
    "other parameter": (lambda opt, ps, slot: ps[0].detach(),
                        r"got parameter 0 \(shape \(4, 3\)\) and the slot '\w+' of parameter 1"),
    "other slot": (lambda opt, ps, slot: next(iter(opt.state[ps[0]].values())),
                   r"the slot '\w+' of parameter 0 and the slot '\w+' of parameter 1"),
}


def _two_buckets(name, impl):
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(4, 3))]
    opt = OPTIMIZER_CLASSES[name](params=[{"params": ps[:1]}, {"params": ps[1:]}],
                                  implementation=impl, **kwargs_for(name))
    for _ in range(2):  # the second step runs (and caches) the step plan
        for p in ps:
            p.grad = torch.full_like(p, 0.5)
        opt.step()
    for p in ps:
        p.grad = torch.full_like(p, 0.25)
    return opt, ps


def _dense_state(opt, ps):
    out = [p.detach().clone() for p in ps]
    for p in ps:
        out += [s.clone() for _, s in sorted(opt.state[p].items()) if s.layout == torch.strided]
    for group in opt.param_groups:
        out += [t.clone() for _, t in sorted(group["non_slot"].items())]
    return out


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize(("name", "impl"), CASES)
def test_a_bad_slot_in_a_later_bucket_changes_nothing(name, impl, bad):
    opt, ps = _two_buckets(name, impl)
    key = next(k for k, s in opt.state[ps[1]].items() if s.dim() > 0)
    make, match = BAD[bad]
    opt.state[ps[1]][key] = make(opt, ps, opt.state[ps[1]][key])
    before = _dense_state(opt, ps)
    with pytest.raises(ValueError, match=match):
        opt.step()
    after = _dense_state(opt, ps)
    assert len(before) == len(after)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.parametrize(("name", "impl"), CASES)
def test_a_non_contiguous_slot_steps_as_the_reference(name, impl):
    results = []
    for which in (impl, "reference"):
        opt, ps = _two_buckets(name, which)
        key = next(k for k, s in opt.state[ps[1]].items() if s.dim() > 0)
        slot = opt.state[ps[1]][key]
        opt.state[ps[1]][key] = slot.t().contiguous().t()  # same values, column-major
        assert not opt.state[ps[1]][key].is_contiguous()
        opt.step()
        results.append(_dense_state(opt, ps))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
