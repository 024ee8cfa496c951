"""A cached-plan step reads each parameter and gradient once: the plan's gradient pass hands
the C boundary their data pointers and sizes (``StepPlan.read_for``). These tests pin what
makes that safe: the reads equal the boundary's own, and nothing the user's code does between
the pass and the kernels (a callable hyperparameter that replaces a gradient or a parameter)
reaches C unseen."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fresh_process import run_fresh

import trainop
from trainop.kernels.native import boundary, build, metadata

needs_reader = pytest.mark.skipif(metadata.load() is None,
                                  reason=str(metadata.unavailable_reason()))


def _params(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(3 + i, 2, generator=g)) for i in range(n)]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g)
    return ps


def _snapshot(opt, ps):
    return ([p.detach().clone() for p in ps],
            [{k: v.clone() for k, v in opt.state[p].items()} for p in ps])


def _assert_unchanged(opt, ps, before):
    for p, want in zip(ps, before[0], strict=True):
        assert torch.equal(p.detach(), want)
    for p, slots in zip(ps, before[1], strict=True):
        assert all(torch.equal(opt.state[p][k], v) for k, v in slots.items())


@needs_reader
def test_the_gradient_pass_reads_what_the_boundary_reads_itself():
    """Two groups (two buckets, each its slice of the pass): the pointers and sizes handed
    over equal those the boundary's own pass reads, list for list."""
    ps = _params()
    opt = trainop.AdamOptimizer(0.01, params=[{"params": ps[:2]},
                                              {"params": ps[2:], "learning_rate": 0.02}])
    opt.step()
    opt.step()
    plan = opt._step_plan
    grads = plan.gradients()
    assert len(plan.buckets) == 2
    for bucket in plan.buckets:
        read = plan.read_for(bucket)
        lists = [bucket.params, grads[bucket.start:bucket.stop], bucket.slots["m"],
                 bucket.slots["v"]]
        own = boundary.checked(lists, dtype=torch.float32)
        given = boundary.checked(lists, dtype=torch.float32, read=read)
        assert np.array_equal(own[0], given[0]) and np.array_equal(own[1], given[1])
        assert own[0].tolist()[:2 * len(bucket.params)] == [
            t.data_ptr() for t in [*bucket.params, *lists[1]]]


@needs_reader
def test_nothing_is_read_for_c_when_a_gradient_is_not_contiguous():
    ps = _params()
    opt = trainop.MomentumOptimizer(0.01, 0.9, params=ps)
    opt.step()
    ps[4].grad = torch.randn(2, 7).t()  # right shape, not one block
    ref_p = [p.detach().clone() for p in ps]
    ref = trainop.MomentumOptimizer(0.01, 0.9, params=[torch.nn.Parameter(p) for p in ref_p],
                                    implementation="reference")
    for q, p in zip(ref.param_groups[0]["params"], ps, strict=True):
        q.grad = p.grad.contiguous()
        ref.state[q].update({k: v.clone() for k, v in opt.state[p].items()})
    assert opt._current_plan().gradients() is not None
    assert opt._step_plan.read_for(opt._step_plan.buckets[0]) is None
    opt.step()  # the boundary reads the lists itself and sends the bucket to foreach
    ref.step()
    for p, q in zip(ps, ref.param_groups[0]["params"], strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-7)


_EDITS = """
import torch, trainop

def attempt(edit):
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(3000 + i, 20, generator=g)) for i in range(4)]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g)
    target, armed = ps[2], []

    def learning_rate():
        if armed:
            if edit == "gradient-data":
                target.grad.data = torch.zeros(2)
            elif edit == "gradient-resized":
                target.grad.resize_(1)
            else:
                target.data = torch.zeros(2)
        return 0.01

    opt = trainop.AdamOptimizer(learning_rate, params=ps)
    opt.step()
    opt.step()  # the plan is cached and used
    others = [p for p in ps if p is not target]
    before = [p.detach().clone() for p in others]
    slots = [{k: v.clone() for k, v in opt.state[p].items()} for p in ps]
    armed.append(True)
    try:
        opt.step()
        outcome = "stepped"
    except (ValueError, TypeError) as e:
        outcome = type(e).__name__ + (":shape" if "shape" in str(e) else "")
    same = (all(torch.equal(p.detach(), q) for p, q in zip(others, before))
            and all(torch.equal(opt.state[p][k], v) for p, d in zip(ps, slots)
                    for k, v in d.items())
            and int(opt.param_groups[0]["non_slot"]["step"]) == 2)
    print(edit, outcome, same)

for edit in ("gradient-data", "gradient-resized", "parameter-data"):
    attempt(edit)
"""


def test_a_callable_learning_rate_that_edits_tensors_is_seen_before_c():
    """The learning rate is a callable (user code, run after the gradient pass of a plain
    step would have been made): the pass is made again after it, so a gradient or parameter
    it replaced with smaller memory is found (the general path names it) and nothing moves;
    with the pointers of the first pass C would write past the new memory (this crashed the
    process when the second pass was left out: hence a subprocess)."""
    lines = run_fresh(_EDITS, build.cache_dir(), OMP_NUM_THREADS="2")  # the built libraries
    assert lines == ["gradient-data ValueError:shape True",
                     "gradient-resized ValueError:shape True",
                     "parameter-data ValueError:shape True"]


def test_a_callable_learning_rate_is_called_once_per_step_on_every_path():
    """The plan evaluates the hyperparameters before its gradient pass; when the plan cannot
    take the step (a missing gradient) the general path reuses them (a callable with side
    effects is called once per step, as TF evaluates it once per run)."""
    calls = []

    def learning_rate():
        calls.append(1)
        return 0.01

    ps = _params(3)
    opt = trainop.GradientDescentOptimizer(learning_rate, params=ps)
    opt.step()
    opt.step()  # the plan
    ps[1].grad = None
    opt.step()  # the plan declines: the general path, with the same evaluation
    assert len(calls) == 3


def test_sparse_steps_of_an_optimizer_without_slots_keep_the_state_and_the_plan():
    """GradientDescent keeps an empty state entry per parameter; a sparse step used to make it
    anew every step, which counted as a state change and rebuilt the plan each time."""
    table = torch.nn.Parameter(torch.randn(50, 4))
    dense = torch.nn.Parameter(torch.randn(3))
    opt = trainop.GradientDescentOptimizer(0.1, params=[table, dense])
    grad = torch.sparse_coo_tensor(torch.tensor([[1, 7, 1]]), torch.ones(3, 4), (50, 4))
    dense.grad = torch.ones(3)
    table.grad = grad
    opt.step()
    table.grad = grad
    opt.step()  # the plan is built (and declines the sparse gradient)
    version, plan = opt.state.version, opt._step_plan
    assert plan is not None
    want = table.detach().clone()
    for _ in range(3):
        table.grad = grad
        opt.step()
    assert opt.state.version == version and opt._step_plan is plan
    want[1] -= 0.1 * 2 * 3
    want[7] -= 0.1 * 3
    torch.testing.assert_close(table.detach(), want, rtol=0, atol=1e-6)
