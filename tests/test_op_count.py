"""Device operations per step (issue #44): trainop's post-backward step on the Triton path
(dynamic loss scale, global-norm clip, Adam; 292 tensors) issues at most 24 ATen operations
besides its Triton launches, and at most 2 more per param group; torch's recipe (GradScaler,
``clip_grad_norm_``, fused Adam) counted by the same counter in the same run, for the record.
Counts, not times: the Triton launches are no-ops under the interpreter (what is counted is the
host's calls, which do not depend on the values)."""

from __future__ import annotations

import pytest
import torch

from trainop.bench.op_count import count_step, counting
from trainop.bench.step_ops import (
    PER_GROUP_TARGET,
    STEP_TARGET,
    TENSORS,
    torch_ops,
    trainop_ops,
)
from trainop.kernels import triton as tk

needs_triton = pytest.mark.skipif(not tk.available(), reason="Triton is not installed")


def test_the_counter_counts_every_aten_operation_and_views_apart():
    x = torch.ones(4)
    with counting() as found:
        y = x * 2  # mul
        y.add_(1)  # add_
        y.view(2, 2)  # a view: counted, not on the device
    assert found.ops == {"mul": 1, "add_": 1, "view": 1}
    assert (found.total, found.device, found.triton) == (3, 2, 0)
    assert count_step(lambda: x.mul_(1.0), warmup=1).ops == {"mul_": 1}


def test_torch_recipe_is_counted_alike():
    """torch's recipe on the CPU: the same ATen calls as on CUDA (its fused kernels)."""
    found = torch_ops(TENSORS)
    for name in ("_amp_foreach_non_finite_check_and_unscale_", "_foreach_norm", "_fused_adam_",
                 "_amp_update_scale_"):
        assert found.ops[name] == 1, found.summary()
    assert 16 <= found.total <= 30, found.summary()


@needs_triton
def test_post_backward_step_issues_at_most_24_operations():
    ours = trainop_ops(TENSORS)
    theirs = torch_ops(TENSORS)
    print(f"trainop: {ours.summary()}\ntorch:   {theirs.summary()}")
    assert ours.total <= STEP_TARGET, ours.summary()
    assert ours.total <= theirs.total, (ours.summary(), theirs.summary())
    assert ours.triton <= 16, ours.summary()  # issue #38's launch bound


@needs_triton
@pytest.mark.parametrize("workload", ["post_backward", "adam"])
def test_each_param_group_adds_at_most_2_operations(workload):
    one, nine = trainop_ops(64, 1, workload), trainop_ops(64, 9, workload)
    per_group = (nine.total - one.total) / 8
    assert per_group <= PER_GROUP_TARGET, (one.summary(), nine.summary())
