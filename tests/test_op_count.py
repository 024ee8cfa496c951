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


def test_bench_host_prints_operations_and_the_fixed_cost_beside_the_per_tensor_cost():
    from trainop.bench.host import render_host
    from trainop.bench.step_ops import render_step_ops

    row = {"workload": "post_backward", "tensors": 292, "launches": 8, "launch_target": 16,
           "ops": 12, "step_ms": 0.5, "base_step_ms": 0.1, "fixed_us_per_step": 80.0,
           "marginal_us_per_tensor": 1.25, "met": True}
    ops = {"tensors": 292, "groups": 9, "device": "cpu", "step_target": 24,
           "per_group_target": 2, "met": True,
           "rows": [{"side": "trainop", "ops": 12, "device_ops": 8, "triton_launches": 8,
                     "ops_per_group": 2.0, "launches_per_group": 2.0, "most": {"empty": 3}},
                    {"side": "torch", "ops": 22, "device_ops": 20, "triton_launches": 0,
                     "ops_per_group": 3.0, "launches_per_group": 0.0, "most": {"add": 2}}]}
    text = render_host({"torch": "x", "threads": 2, "rounds": 5, "steps": 2, "warmup": 1,
                        "base_tensors": 8, "per_tensor_target_us": 3.0, "rows": [row],
                        "step_ops": ops})
    line = next(x for x in text.splitlines() if x.startswith("post_backward"))
    assert line.split()[5:9] == ["12", "0.50", "80.0", "1.25"]
    assert render_step_ops(ops).splitlines()[3].split()[:6] == ["trainop", "12", "8", "8",
                                                                "2.0", "2.0"]
    assert "torch" in text and "met" in text
