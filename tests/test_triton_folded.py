"""The folded post-backward step (``processing.folded``, ``kernels/triton/gate.py``) and the
optimizer's counters in one launch (``kernels/triton/counters.py``), under Triton's
interpreter: the same numbers as the general path, step after step (normal, clipped, below the
clip, all-zero, overflowing, the scale growing back), and as the rules written out here in
float64 and by hand (TF's global norm, OpenSeq2Seq's BackoffScaler, TF's beta powers)."""

from __future__ import annotations

import math
import os

import pytest
import torch
from interpreter_shortcuts import nested_calls_unpatched
from triton_table import ulps

import trainop
from trainop.kernels import triton as tk
from trainop.processing import (
    BackoffLossScaler,
    ClipByGlobalNorm,
    GradientPipeline,
    LossScale,
    StaticLossScaler,
)
from trainop.processing import pipeline as pipeline_module

pytestmark = [pytest.mark.skipif(not tk.available(), reason="Triton is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]

SIZES = [1, 7, 1025, 33]


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    """The interpreter, with its shortcuts that change no number (``interpreter_shortcuts``)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with nested_calls_unpatched():
        yield


def _gradients(step, gen):
    """Per step: normal, clipped hard, below the clip, all zero, NaN, normal, normal."""
    scale = [3.0, 40.0, 1e-3, 0.0, 3.0, 3.0, 3.0][step]
    grads = [torch.randn(n, generator=gen) * scale for n in SIZES]
    if step == 4:
        grads[2][5] = float("nan")
    return grads


def _train(processors, *, folded, steps=7, groups=1):
    gen = torch.Generator().manual_seed(3)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in SIZES]
    opt = trainop.AdamOptimizer(0.01, params=[{"params": params[g::groups]}
                                              for g in range(groups)], implementation="triton")
    pipe = GradientPipeline(opt, processors())
    ran = []
    real = pipeline_module.run_folded
    results = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline_module, "run_folded",
                   lambda *a: ran.append(1) or real(*a))
        if not folded:
            mp.setattr(pipeline_module, "foldable", lambda *a: False)
        for step in range(steps):
            scale = pipe.loss_scaler.loss_scale.clone() if pipe.loss_scaler else 1.0
            for p, g in zip(params, _gradients(step, gen), strict=True):
                p.grad = g * scale
            results.append(pipe.step())
    assert bool(ran) == folded
    return params, opt, pipe, results


def _fields(result):
    out = {k: getattr(result, k) for k in ("applied", "skip_reason", "global_norm",
                                            "clipped_global_norm", "loss_scale",
                                            "next_loss_scale", "num_zero_filtered",
                                            "skipped_steps", "consecutive_skips")}
    return out, result.stats


CHAINS = {
    "backoff+clip": lambda: [LossScale(BackoffLossScaler(scale_max=2.0 ** 10, step_window=2)),
                             ClipByGlobalNorm(1.0)],
    "backoff": lambda: [LossScale(BackoffLossScaler(step_factor=3.0, step_window=3))],
    "static+clip": lambda: [LossScale(StaticLossScaler(512.0)), ClipByGlobalNorm(2.5)],
    "clip": lambda: [ClipByGlobalNorm(torch.tensor(0.7))],
}


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_folded_step_is_the_general_path(chain):
    steps = 7 if "backoff" in chain else 4  # (without a skip a NaN would reach the params)
    ours = _train(CHAINS[chain], folded=True, steps=steps)
    theirs = _train(CHAINS[chain], folded=False, steps=steps)
    for a, b in zip(ours[3], theirs[3], strict=True):
        fa, sa = _fields(a)
        fb, sb = _fields(b)
        assert set(sa) == set(sb)
        for key, value in fa.items():
            other = fb[key]
            assert (value is None) == (other is None), key
            if value is None:
                continue
            assert value.dtype == other.dtype and value.shape == other.shape, key
            if key in ("global_norm", "clipped_global_norm"):
                assert ulps(value, other) <= 1, key  # float64 sum vs torch's float32 order
            else:
                assert torch.equal(value, other) or (value.isnan() & other.isnan()).all(), key
    for a, b in zip(ours[0], theirs[0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    scaler_a, scaler_b = ours[2].loss_scaler, theirs[2].loss_scaler
    if scaler_a is not None:
        for k, v in scaler_a.state_dict().items():
            assert torch.equal(v, scaler_b.state_dict()[k]), k
    assert ours[2].state_dict()["skipped_steps"] == theirs[2].state_dict()["skipped_steps"]
    assert torch.equal(ours[1].param_groups[0]["non_slot"]["beta1_power"],
                       theirs[1].param_groups[0]["non_slot"]["beta1_power"])


def test_folded_step_against_the_rules_written_out():
    """TF's global norm of the unscaled gradients (float64 here), OpenSeq2Seq's BackoffScaler
    by hand (factor 2, window 2, max 2^10), the skip on the NaN step, the counters."""
    gen = torch.Generator().manual_seed(3)
    params, _, pipe, results = _train(CHAINS["backoff+clip"], folded=True)
    gen = torch.Generator().manual_seed(3)
    [torch.randn(n, generator=gen) for n in SIZES]  # the parameters' draws
    scale, last = 2.0 ** 10, -1
    skipped = consecutive = 0
    for step, result in enumerate(results):
        grads = _gradients(step, gen)
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
        if math.isfinite(norm):
            assert math.isclose(float(result.global_norm), norm, rel_tol=2e-7, abs_tol=1e-30)
            expect_clip = norm * min(1.0, 1.0 / norm) if norm else 0.0
            assert math.isclose(float(result.clipped_global_norm), expect_clip, rel_tol=1e-6)
        assert float(result.loss_scale) == scale
        overflow = not math.isfinite(norm)
        if overflow:
            scale, last = max(scale / 2, 1.0), step
        elif (step - last) % 2 == 0:
            scale = min(scale * 2, 2.0 ** 10)
        skipped += overflow
        consecutive = consecutive + 1 if overflow else 0
        assert float(result.next_loss_scale) == scale
        assert bool(result.applied) == (not overflow)
        assert int(result.skip_reason) == (1 if overflow else 0)
        assert (int(result.skipped_steps), int(result.consecutive_skips)) == (skipped,
                                                                               consecutive)
    assert int(pipe.skipped_steps) == 1 and int(pipe.loss_scaler.iteration) == 7


@pytest.mark.parametrize("groups", [1, 3])
def test_counters_in_one_launch_are_tfs(groups):
    """Each group's beta powers are beta^(applied steps) as TF's float32 products, and its
    step counts the applied steps (the NaN step is skipped), in one ``_advance`` launch."""
    launches = []
    from triton.runtime.interpreter import InterpretedFunction

    real = InterpretedFunction.run
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InterpretedFunction, "run",
                   lambda self, *a, **k: launches.append(self.fn.__name__) or real(self, *a, **k))
        _, opt, _, _ = _train(CHAINS["backoff+clip"], folded=True, groups=groups)
    assert launches.count("_advance") == 7  # one per step, whatever the groups
    b1, b2 = torch.tensor(0.9), torch.tensor(0.999)
    p1, p2 = b1.clone(), b2.clone()
    for _ in range(6):  # 7 steps, one skipped
        p1, p2 = p1 * b1, p2 * b2
    for group in opt.param_groups:
        non_slot = group["non_slot"]
        assert int(non_slot["step"]) == 6
        assert torch.equal(non_slot["beta1_power"], p1)
        assert torch.equal(non_slot["beta2_power"], p2)


def test_tensor_betas_keep_the_torch_operations():
    """A tensor beta is not a Python number: ``_finish`` runs as before (no launch)."""
    w = torch.nn.Parameter(torch.ones(3))
    opt = trainop.AdamOptimizer(0.1, beta1=torch.tensor(0.5), params=[w],
                                implementation="triton")
    for _ in range(2):
        w.grad = torch.ones(3)
        opt.step()
    ns = opt.param_groups[0]["non_slot"]
    assert float(ns["beta1_power"]) == 0.125 and int(ns["step"]) == 2


def test_without_the_interpreter_nothing_is_folded(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    assert os.environ.get("TRITON_INTERPRET") is None
    _train(CHAINS["backoff+clip"], folded=False, steps=2)
