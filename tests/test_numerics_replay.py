"""check_numerics on models a replay cannot reproduce, and what the replay must leave alone.

The phase, module and step come from the probes and stand whatever the replay shows: a module
that counts its calls (curriculum, scheduled sampling, warm-up) or reads a global makes a value
the replay does not reproduce; then the error still names phase, module and step, with
``op=None`` and the reason. Where the replay can reproduce it (dropout: the RNG state is
replayed), the op is named. The replay changes no module state (attributes, BatchNorm buffers)
and no RNG state; ``replay=False`` never runs the model again. A probe sum that overflowed
although every element is finite is confirmed on the tensor and never reported.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import trainop
from trainop import NumericsError
from trainop.training.numerics.checker import NOT_REPRODUCED


class Counting(nn.Module):
    """Counts its calls in a Python attribute; on call ``on`` (1-based) its forward takes
    ``log(-1)`` (NaN) or, for ``fault="backward"``, adds ``sqrt(x * 0)`` (finite forward,
    non-finite gradient)."""

    def __init__(self, on: int, fault: str) -> None:
        super().__init__()
        self.on, self.fault, self.calls = on, fault, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls != self.on:
            return x
        if self.fault == "forward":
            return x + torch.log(-torch.ones_like(x))
        return x + torch.sqrt(x * 0.0)


def deep_model(fault: str, on: int) -> nn.Sequential:
    """The counting module 8 modules deep: index 7 of the Sequential."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(3):
        layers += [nn.Linear(6, 6), nn.Tanh()]
    layers += [nn.Linear(6, 6), Counting(on, fault), nn.Linear(6, 1)]
    return nn.Sequential(*layers)


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def _run(model, opt, stepper, steps, x):
    """Train with ``opt`` (zeroed each step) and ``stepper`` (``opt`` itself, or a pipeline)."""
    with trainop.check_numerics(model, optimizer=stepper):
        for _ in range(steps):
            opt.zero_grad()
            _loss(model(x)).backward()
            stepper.step()


def _run_optimizer(model, make, steps, x):
    opt = make(model.parameters())
    _run(model, opt, opt, steps, x)


def _run_pipeline(model, steps, x):
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-3)
    _run(model, opt, trainop.GradientPipeline(opt, [trainop.processing.ClipByGlobalNorm(1.0)]),
         steps, x)


def _run_optimize_loss(model, steps, x):
    train_op = trainop.optimize_loss(lambda x: _loss(model(x)), "Adam", {}, 1e-3, model=model)
    with trainop.check_numerics(model, optimizer=train_op.optimizer):
        for _ in range(steps):
            train_op(x)


DRIVERS = {
    "trainop.Adam": lambda m, n, x: _run_optimizer(
        m, lambda ps: trainop.AdamOptimizer(params=ps, learning_rate=1e-3), n, x),
    "torch.SGD": lambda m, n, x: _run_optimizer(
        m, lambda ps: torch.optim.SGD(ps, lr=1e-3), n, x),
    "GradientPipeline": _run_pipeline,
    "optimize_loss": _run_optimize_loss,
}


@pytest.mark.parametrize("driver", list(DRIVERS))
@pytest.mark.parametrize(("fault", "on", "phase"), [("forward", 4, "forward"),
                                                    ("backward", 3, "backward")])
def test_call_counting_module_names_phase_module_and_step(driver, fault, on, phase):
    model = deep_model(fault, on)
    with pytest.raises(NumericsError) as info:
        DRIVERS[driver](model, 6, torch.randn(5, 6))
    e = info.value
    assert (e.phase, e.module, e.step, e.op) == (phase, "7", on - 1, None)
    assert NOT_REPRODUCED in str(e)
    assert e.tensor_stats is not None
    if fault == "forward":
        assert e.tensor_stats.nan == 30  # the module's whole output: x + NaN
    else:  # the gradient leaving the module: inf * 0
        assert e.tensor_stats.nan + e.tensor_stats.posinf + e.tensor_stats.neginf > 0
    assert model[7].calls == on  # the replay left the counter alone


SHIFT = 0.0


class ReadsGlobal(nn.Module):
    def forward(self, x):
        return torch.log(x.abs() + 1.0 + SHIFT)  # NaN while SHIFT < -1 - |x|


@pytest.mark.parametrize("restored", [True, False], ids=["changed-back", "still-changed"])
def test_forward_depending_on_a_global(restored):
    global SHIFT
    model = nn.Sequential(nn.Linear(4, 4), ReadsGlobal(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 4)
    try:
        with pytest.raises(NumericsError) as info, trainop.check_numerics(model, optimizer=opt):
            for step in range(4):
                SHIFT = -1e6 if step == 2 else 0.0
                opt.zero_grad()
                _loss(model(x)).backward()
                if restored:
                    SHIFT = 0.0
                opt.step()
    finally:
        SHIFT = 0.0
    e = info.value
    assert (e.phase, e.module, e.step) == ("forward", "1", 2)
    if restored:  # the replay runs with the global as it is now: nothing to reproduce
        assert e.op is None and NOT_REPRODUCED in str(e)
    else:
        assert e.op == "aten.log" and NOT_REPRODUCED not in str(e)
    assert e.tensor_stats.nan == 32


class DropLog(nn.Module):
    """log of a dropout of positive values: -Inf exactly where the dropout zeroed."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def forward(self, x):
        y = nn.functional.dropout(x.abs() + 1.0, p=0.5, training=self.training)
        return torch.log(y) if self.armed else y


def test_dropout_is_replayed_with_the_same_mask_and_rng_left_alone():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 16), DropLog(), nn.Linear(16, 1))
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-3)
    x = torch.randn(8, 4)
    seen = {}
    model[1].register_forward_hook(
        lambda m, a, out: seen.update(neginf=int(torch.isneginf(out).sum())))
    with pytest.raises(NumericsError) as info, trainop.check_numerics(model, optimizer=opt):
        for step in range(4):
            model[1].armed = step == 2
            opt.zero_grad()
            _loss(model(x)).backward()
            seen["rng"] = torch.get_rng_state()
            opt.step()
    e = info.value
    assert (e.phase, e.module, e.step, e.op) == ("forward", "1", 2, "aten.log")
    assert 0 < seen["neginf"] < 8 * 16
    assert e.tensor_stats.neginf == seen["neginf"]
    assert torch.equal(torch.get_rng_state(), seen["rng"])  # the replay restored the RNG


class LogAfter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fault = None

    def forward(self, x):
        if self.fault == "forward":
            return torch.log(x - 100.0)
        if self.fault == "backward":
            return x + torch.sqrt(x * 0.0)
        return x


@pytest.mark.parametrize("fault", ["forward", "backward"])
def test_batchnorm_buffers_unchanged_by_the_replay(fault):
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), LogAfter(), nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x = torch.randn(8, 4)
    buffers = {}
    with pytest.raises(NumericsError) as info, trainop.check_numerics(model, optimizer=opt):
        for step in range(4):
            model[2].fault = fault if step == 2 else None
            opt.zero_grad()
            _loss(model(x)).backward()
            buffers = {n: b.clone() for n, b in model.named_buffers()}
            opt.step()
    e = info.value
    expected = ("forward", "2", 2, "aten.log") if fault == "forward" else (
        "backward", "2", 2, "SqrtBackward0")
    assert (e.phase, e.module, e.step, e.op) == expected
    assert int(buffers["1.num_batches_tracked"]) == 3
    for n, b in model.named_buffers():
        assert torch.equal(b, buffers[n]), n


TRACE: list[int] = []


class Traced(nn.Module):
    """Appends to a module-level list on every call: state outside the module's attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.fault = False

    def forward(self, x):
        TRACE.append(1)
        return torch.log(x - 10.0) if self.fault else x


@pytest.mark.parametrize("replay", [False, True])
def test_detection_only_never_runs_the_model_again(replay):
    TRACE.clear()
    model = nn.Sequential(nn.Linear(4, 4), Traced(), nn.Linear(4, 1))
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-3)
    x = torch.randn(8, 4)
    with pytest.raises(NumericsError) as info, \
            trainop.check_numerics(model, optimizer=opt, replay=replay):
        for step in range(4):
            model[1].fault = step == 1
            opt.zero_grad()
            _loss(model(x)).backward()
            opt.step()
    e = info.value
    assert (e.phase, e.module, e.step) == ("forward", "1", 1)
    if replay:
        assert e.op == "aten.log" and len(TRACE) == 3  # the replay ran the forward once more
    else:
        assert e.op is None and len(TRACE) == 2
        assert "replay=False (detection only)" in str(e)
        assert e.tensor_stats.nan == 32


class Big(nn.Module):
    """Every element finite with a float32/bfloat16 sum that overflows; ``inf_at`` puts a real
    -Inf into one element."""

    def __init__(self, dtype: torch.dtype, signs: str) -> None:
        super().__init__()
        self.dtype, self.signs, self.inf_at = dtype, signs, None

    def forward(self, x):
        big = torch.full((x.shape[0], 1024), 3e38, dtype=self.dtype)
        if self.signs == "mixed":  # +3e38 and -3e38: partial sums +inf and -inf, their sum NaN
            big[x.shape[0] // 2:] = -3e38
        out = (x.sum(-1, keepdim=True) * 0).to(self.dtype) + big
        if self.inf_at is not None:
            keep = torch.ones_like(out)
            keep[self.inf_at] = 0.0
            out = out + torch.log(keep)  # log(0): -Inf in one element
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("signs", ["positive", "mixed"])
def test_overflowed_sum_is_never_reported_a_real_inf_is(dtype, signs):
    model = nn.Sequential(nn.Linear(4, 4), Big(dtype, signs))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.randn(8, 4)
    probe = model(x).sum(dtype=torch.float32)  # the probe: a NaN or an Inf, no element is
    assert torch.isnan(probe) if signs == "mixed" else torch.isinf(probe)
    with pytest.raises(NumericsError) as info, trainop.check_numerics(model, optimizer=opt):
        for step in range(4):
            model[1].inf_at = (3, 5) if step == 2 else None
            opt.zero_grad()
            model(x).float().mean().backward()
            opt.step()
    e = info.value
    assert (e.phase, e.module, e.step, e.op) == ("forward", "1", 2, "aten.log")
    assert (e.tensor_stats.neginf, e.tensor_stats.posinf, e.tensor_stats.nan) == (1, 0, 0)


class HugeGradient(torch.autograd.Function):
    """Identity forward; backward hands on a gradient of finite values whose sum overflows."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return torch.full_like(g, 3e38)


class Huge(nn.Module):
    def forward(self, x):
        return HugeGradient.apply(x)


def test_overflowed_gradient_sum_is_never_reported():
    model = nn.Sequential(nn.Linear(4, 256, bias=False), Huge(), nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = 1e-3 * torch.randn(8, 4)  # the first layer's weight gradient stays finite (~1e36)
    with trainop.check_numerics(model, optimizer=opt) as checker:
        for _ in range(3):
            opt.zero_grad()
            model(x).sum().backward()
            assert not torch.isfinite(model[0].weight.grad.sum())  # its sum overflows
            assert torch.isfinite(model[0].weight.grad).all()
            opt.step()
    assert checker.step == 3


def test_call_without_gradients_is_read_at_once():
    """A validation call under no_grad is read when it returns (nothing follows it that could
    add probes), not at the next optimizer step: its outputs are not kept alive until then."""
    model = nn.Sequential(nn.Linear(4, 4), LogAfter(), nn.Linear(4, 1))
    opt = trainop.AdamOptimizer(params=model.parameters(), learning_rate=1e-3)
    x = torch.randn(8, 4)
    with trainop.check_numerics(model, optimizer=opt) as checker:
        opt.zero_grad()
        _loss(model(x)).backward()
        opt.step()
        with torch.no_grad():
            model(x)
            assert len(checker._log) == 0  # read already
            model[1].fault = "forward"
            with pytest.raises(NumericsError) as info:
                model(x)
    assert (info.value.phase, info.value.module, info.value.op, info.value.step) == (
        "forward", "1", "aten.log", 1)
