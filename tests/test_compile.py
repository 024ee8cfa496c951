"""``torch.compile`` of a whole training step (forward, backward, ``opt.step()``,
``zero_grad``) with a trainop optimizer, and with a ``GradientPipeline``: 5 compiled steps give
the eager numbers (float32 tolerance). Dynamo breaks the graph inside the step (see
docs/dropin.md); the test pins that it runs and computes the same thing, not the break count."""

from __future__ import annotations

import pytest
import torch

import trainop
from trainop.processing import ClipByGlobalNorm, GradientPipeline, SkipNonFinite

STEPS = 5


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def _batches():
    gen = torch.Generator().manual_seed(7)
    return [(torch.randn(5, 3, generator=gen), torch.randn(5, 2, generator=gen))
            for _ in range(STEPS)]


def _optimizer_step(model, opt):
    def step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return step


def _pipeline_step(model, pipe):
    def step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        result = pipe.step()
        pipe.zero_grad()
        return loss, result.global_norm
    return step


def _run(make_step, build, compiled: bool):
    torch._dynamo.reset()
    model = _model()
    step = make_step(model, build(model))
    if compiled:
        step = torch.compile(step)
    outputs = [step(x, y) for x, y in _batches()]
    return model, outputs


CASES = {
    "adam": (_optimizer_step, lambda m: trainop.AdamOptimizer(m.parameters(), lr=0.05)),
    "momentum-pipeline": (_pipeline_step, lambda m: GradientPipeline(
        trainop.MomentumOptimizer(m.parameters(), lr=0.1, momentum=0.9),
        [ClipByGlobalNorm(0.5), SkipNonFinite()])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_training_step_equals_eager(case):
    make_step, build = CASES[case]
    eager_model, eager_out = _run(make_step, build, compiled=False)
    compiled_model, compiled_out = _run(make_step, build, compiled=True)
    for a, b in zip(compiled_model.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compiled_out, eager_out, rtol=1e-5, atol=1e-6)
    # It trained: the parameters moved and the loss went down over the 5 steps.
    assert not torch.equal(next(eager_model.parameters()), next(_model().parameters()))
    losses = [out[0] if isinstance(out, tuple) else out for out in eager_out]
    assert losses[-1] < losses[0]
    if case == "momentum-pipeline":  # the clip was active, so the pipeline's path ran
        assert any(float(norm) > 0.5 for _, norm in eager_out)
