"""#16: a 0-dim tensor hyperparameter holding NaN (or -1, inf: outside its range) is caught at
step time without a host read: the step is skipped on the device, exactly as a nonzero
``found_inf`` skips it (params, slots, counters unchanged), ``invalid_hyperparameters`` says
so, and a GradientPipeline reports it in ``StepResult.skip_reason``. With the native kernels a
CPU value is read on the host (they read CPU scalars anyway); elsewhere the check runs on the
value's device and joins the gate on the ``fused`` kernels, or on ``foreach``/``reference`` when
a ``found_inf`` is given (those paths read it anyway; without one the check would be a host
read, so it is not made)."""

from __future__ import annotations

import pytest
import torch
from host_reads import ALL_READS, no_host_reads
from optimizer_kwargs import kwargs_for

import trainop
from trainop.processing import SKIP_REASONS, ClipByGlobalNorm, GradientPipeline
from trainop.processing._base import SKIP_HYPERPARAMETER
from trainop.registry import OPTIMIZER_CLASSES

CASES = [(name, impl) for name, cls in OPTIMIZER_CLASSES.items()
         for impl in cls.IMPLEMENTATIONS if impl != "fused" or name in ("AdamOptimizer",)]


def _make(name: str, impl: str, lr: torch.Tensor):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(6)), torch.nn.Parameter(torch.randn(2, 3))]
    kwargs = kwargs_for(name)
    kwargs["learning_rate"] = lr
    opt = OPTIMIZER_CLASSES[name](params=params, implementation=impl, **kwargs)
    return params, opt


def _grads(params, k: int) -> None:
    g = torch.Generator().manual_seed(k)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)


def _everything(opt, params) -> list[torch.Tensor]:
    out = [p.detach().clone() for p in params]
    for p in params:
        out += [t.clone() for t in opt.state[p].values() if isinstance(t, torch.Tensor)]
    for group in opt.param_groups:
        out += [t.clone() for t in group["non_slot"].values()]
    return out


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
@pytest.mark.parametrize(("name", "impl"), CASES)
def test_a_bad_tensor_learning_rate_skips_the_step_and_training_goes_on(name, impl, bad):
    lr = torch.tensor(0.05)
    params, opt = _make(name, impl, lr)
    ref_lr = torch.tensor(0.05)
    ref_params, ref = _make(name, impl, ref_lr)
    _grads(params, 1)
    opt.step()
    _grads(ref_params, 1)
    ref.step()
    assert opt.invalid_hyperparameters is None
    before = _everything(opt, params)
    lr.fill_(bad)
    _grads(params, 2)
    hp = opt._step_hyper(opt.param_groups[0]).for_tensor(params[0])
    on_kernels = opt._choose_implementation(torch.float32, params[0].device, hp) in (
        "native", "fused")  # "fused" with a tensor rate on the CPU runs foreach
    opt.step(found_inf=None if on_kernels else torch.zeros(()))
    assert bool(opt.invalid_hyperparameters)
    after = _everything(opt, params)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    # Back in range: the same training as a run that never saw the bad step.
    lr.fill_(0.05)
    for k in (3, 4):
        _grads(params, k)
        opt.step()
        _grads(ref_params, k)
        ref.step()
    assert opt.invalid_hyperparameters is None
    for a, b in zip(_everything(opt, params), _everything(ref, ref_params), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.native
def test_native_checks_a_valid_cpu_value_on_the_host_and_adds_nothing():
    var = torch.nn.Parameter(torch.ones(3))
    opt = trainop.RMSPropOptimizer(learning_rate=torch.tensor(0.1), params=[var],
                                   implementation="native")
    var.grad = torch.ones(3)
    with no_host_reads():  # float() of a CPU scalar only, as the native kernels read it
        opt.step()
    assert opt.invalid_hyperparameters is None
    assert not torch.equal(var.detach(), torch.ones(3))


def test_foreach_without_found_inf_does_not_check():
    var = torch.nn.Parameter(torch.ones(3))
    lr = torch.tensor(0.1)
    opt = trainop.RMSPropOptimizer(learning_rate=lr, params=[var], implementation="foreach")
    lr.fill_(float("nan"))
    var.grad = torch.ones(3)
    with no_host_reads(ALL_READS):
        opt.step()
    assert opt.invalid_hyperparameters is None


@pytest.mark.native
def test_tf_style_apply_gradients_skips_and_keeps_global_step():
    var = torch.nn.Parameter(torch.ones(3))
    lr = torch.tensor(0.1)
    opt = trainop.MomentumOptimizer(learning_rate=lr, momentum=0.9)
    lr.fill_(float("nan"))  # after construction, which checks the value it is given
    global_step = torch.zeros((), dtype=torch.int64)
    opt.apply_gradients([(torch.ones(3), var)], global_step=global_step)
    assert torch.equal(var.detach(), torch.ones(3))
    assert int(global_step) == 0
    assert torch.equal(opt.state[var]["momentum"], torch.zeros(3))
    lr.fill_(0.1)
    opt.apply_gradients([(torch.ones(3), var)], global_step=global_step)
    assert int(global_step) == 1
    torch.testing.assert_close(var.detach(), torch.full((3,), 0.9))


@pytest.mark.native
def test_a_callable_returning_a_nan_tensor_skips_too():
    var = torch.nn.Parameter(torch.ones(3))
    opt = trainop.GradientDescentOptimizer(learning_rate=lambda: torch.tensor(float("nan")),
                                           params=[var])
    var.grad = torch.ones(3)
    opt.step()
    assert torch.equal(var.detach(), torch.ones(3))
    assert bool(opt.invalid_hyperparameters)


def test_plain_hyperparameters_leave_no_flag():
    var = torch.nn.Parameter(torch.ones(3))
    opt = trainop.AdamOptimizer(learning_rate=0.1, params=[var])
    var.grad = torch.ones(3)
    opt.step()
    assert opt.invalid_hyperparameters is None


@pytest.mark.native
def test_the_pipeline_reports_the_reason_and_counts_the_skip():
    var = torch.nn.Parameter(torch.ones(4))
    lr = torch.tensor(0.1)
    pipe = GradientPipeline(trainop.AdamOptimizer(learning_rate=lr, params=[var]),
                            [ClipByGlobalNorm(1.0)])
    lr.fill_(-1.0)
    var.grad = torch.ones(4)
    result = pipe.step()
    assert not bool(result.applied)
    assert int(result.skip_reason) == SKIP_HYPERPARAMETER
    assert "tensor hyperparameter" in result.why()
    assert SKIP_HYPERPARAMETER in SKIP_REASONS
    assert int(result.skipped_steps) == 1
    assert torch.equal(var.detach(), torch.ones(4))
    lr.fill_(0.1)
    result = pipe.step()
    assert bool(result.applied) and int(result.skip_reason) == 0


@pytest.mark.native
def test_the_check_reads_nothing_on_the_host():
    var = torch.nn.Parameter(torch.ones(4))
    lr = torch.tensor(0.1)
    opt = trainop.AdamOptimizer(learning_rate=lr, params=[var], implementation="native")
    var.grad = torch.ones(4)
    opt.step()
    lr.fill_(float("nan"))
    with no_host_reads():  # (the native kernels take CPU scalars as floats: no device sync)
        opt.step()
    assert opt.invalid_hyperparameters is not None
    assert torch.equal(opt.param_groups[0]["non_slot"]["step"], torch.tensor(1))
