"""Device operations of one post-backward step, trainop's Triton path beside torch's recipe,
counted in one run (``bench.op_count``): issue #44's bound (at most 24 operations besides the
Triton launches per step, at most 2 more per param group).

Workloads (the host benchmark's model, ``bench.host``: small float32 parameters of mixed
sizes, new gradient addresses every step):

- ``trainop``: ``GradientPipeline(AdamOptimizer(implementation="triton"),
  [LossScale(BackoffLossScaler()), ClipByGlobalNorm(1.0)]).step()``, on the CPU under Triton's
  interpreter (or on CUDA);
- ``torch``: ``GradScaler.unscale_`` -> ``clip_grad_norm_(foreach=True)`` ->
  ``GradScaler.step(Adam(fused=True))`` -> ``GradScaler.update`` (``bench.pipeline``), on the
  same device: torch dispatches the same ATen operations on the CPU as on CUDA.

The per-group cost: (operations at ``GROUPS`` groups - at 1 group) / (``GROUPS`` - 1), the
same tensors dealt out over the groups.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from trainop.bench.op_count import OpCount, count_step

__all__ = ["GROUPS", "PER_GROUP_TARGET", "STEP_TARGET", "TENSORS", "measure_step_ops",
           "render_step_ops", "torch_ops", "trainop_ops"]

TENSORS = 292
GROUPS = 9
#: issue #44: operations besides the Triton launches, per step and per added param group.
STEP_TARGET = 24
PER_GROUP_TARGET = 2


def trainop_ops(tensors: int = TENSORS, groups: int = 1, workload: str = "post_backward",
                device: torch.device | None = None) -> OpCount:
    """trainop's step (``bench.host``'s ``workload``) on the Triton path: on ``device`` when
    it is CUDA, else on the CPU under Triton's interpreter with no-op launches (counted; the
    operations around them do not depend on the values)."""
    from trainop.bench.host import counted_launches, stepper

    if device is not None and device.type == "cuda":
        prepare, step = stepper(workload, tensors, groups, device=device)
        return _counted(prepare, step)
    saved = os.environ.get("TRITON_INTERPRET")
    with counted_launches(run=False):  # no-op launches: what is left is the host's calls
        try:
            prepare, step = stepper(workload, tensors, groups)
            return _counted(prepare, step)
        finally:
            if saved is not None:
                os.environ["TRITON_INTERPRET"] = saved


def _counted(prepare, step) -> OpCount:
    k = iter(range(1 << 30))
    return count_step(step, prepare=lambda: prepare(next(k)), warmup=3)


def torch_ops(tensors: int = TENSORS, groups: int = 1,
              device: torch.device | None = None) -> OpCount:
    """torch's recipe (GradScaler, ``clip_grad_norm_``, fused Adam) over the same sizes."""
    from trainop.bench.host import SIZES
    from trainop.bench.pipeline import INIT_SCALE, make_tensors

    device = device or torch.device("cpu")
    params, saved = make_tensors([SIZES[i % len(SIZES)] for i in range(tensors)], 0, device)
    for p, g in zip(params, saved, strict=True):
        p.grad = g.clone()
    opt = torch.optim.Adam([{"params": params[g::groups]} for g in range(groups)], lr=1e-3,
                           fused=True)
    scaler = torch.amp.GradScaler(device.type, init_scale=INIT_SCALE)
    scaler.scale(torch.ones((), device=device))  # the scale tensor, as scaling a loss makes

    def step() -> None:
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        scaler.step(opt)
        scaler.update()

    return count_step(step, warmup=3)


def measure_step_ops(tensors: int = TENSORS, groups: int = GROUPS,
                     device: torch.device | None = None) -> dict[str, Any]:
    """Both sides' operations per step, at 1 and ``groups`` groups, in one run: a JSON-ready
    dict (``met``: trainop within ``STEP_TARGET`` and ``PER_GROUP_TARGET``)."""
    out: dict[str, Any] = {"tensors": tensors, "groups": groups,
                           "device": str(device or "cpu"), "step_target": STEP_TARGET,
                           "per_group_target": PER_GROUP_TARGET, "rows": []}
    per_group = {}
    for side, fn in (("trainop", trainop_ops), ("torch", torch_ops)):
        one = fn(tensors, 1, device=device)
        many = fn(tensors, groups, device=device)
        per_group[side] = (many.total - one.total) / (groups - 1)
        out["rows"].append({"side": side, "ops": one.total, "device_ops": one.device,
                            "triton_launches": one.triton,
                            "launches_per_group": (many.triton - one.triton) / (groups - 1),
                            "ops_per_group": per_group[side],
                            "most": dict(one.ops.most_common(8))})
    ours = out["rows"][0]
    out["met"] = ours["ops"] <= STEP_TARGET and ours["ops_per_group"] <= PER_GROUP_TARGET
    return out


def render_step_ops(result: dict[str, Any]) -> str:
    """The side-by-side table."""
    lines = [f"Operations of one post-backward step (loss scale, global clip 1.0, Adam), "
             f"{result['tensors']} tensors, on {result['device']}; per group: from 1 to "
             f"{result['groups']} groups (counted in one run)"]
    header = (f"{'side':<8} {'ops':>5} {'on device':>9} {'Triton':>7} {'ops/group':>10} "
              f"{'launches/group':>15}  most")
    lines += [header, "-" * len(header)]
    for row in result["rows"]:
        most = ", ".join(f"{k} x{n}" for k, n in row["most"].items())
        lines.append(f"{row['side']:<8} {row['ops']:>5} {row['device_ops']:>9} "
                     f"{row['triton_launches']:>7} {row['ops_per_group']:>10.1f} "
                     f"{row['launches_per_group']:>15.1f}  {most}")
    lines.append(f"ops: every ATen operation (views and profiler markers included; 'on "
                 f"device' leaves them out); targets for trainop: <= {result['step_target']} "
                 f"per step, <= {result['per_group_target']} per added group: "
                 f"{'met' if result['met'] else 'NOT met'}")
    return "\n".join(lines) + "\n"
