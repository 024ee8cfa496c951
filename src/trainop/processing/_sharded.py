"""Per-tensor statistics of sharded tensors (DTensors, e.g. FSDP2's ``fully_shard``) over the
whole tensor: each rank reduces its local shards, then one ``all_reduce`` over the mesh's
process group per statistic and step combines them (a sum of squares for L2 norms, a max for
``max |g|``), on the device, without a host read. A replicated tensor counts once (its rank-0
copy). Supported: DTensors on one 1-D mesh with ``Shard`` or ``Replicate`` placements; anything
else is a ``ValueError`` naming the placements.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from trainop.kernels.shards import is_sharded

__all__ = ["sharded", "whole_tensor_statistic"]


def sharded(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether the tensors are DTensors (checked on the first; they come from one model)."""
    return bool(tensors) and is_sharded(tensors[0])


def whole_tensor_statistic(tensors: Sequence[torch.Tensor],
                           local: Callable[[list[torch.Tensor]], torch.Tensor], *,
                           op: str) -> torch.Tensor:
    """Per DTensor, a statistic of the whole tensor: ``local(local shards)`` gives a 1-D
    float32 tensor per rank (``op="sum"``: additive parts, e.g. squared norms; ``op="max"``),
    combined by one ``all_reduce``."""
    import torch.distributed as dist
    from torch.distributed.tensor import Replicate, Shard

    mesh = tensors[0].device_mesh
    if mesh.ndim != 1:
        raise ValueError(f"Expected DTensors on a 1-D device mesh for the gradient statistics, "
                         f"got a mesh of {mesh.ndim} dimensions")
    counts = []
    for i, t in enumerate(tensors):
        if not is_sharded(t) or t.device_mesh != mesh:
            raise ValueError(f"Expected every tensor of the step to be a DTensor on one mesh, "
                             f"got tensor {i} of another kind or mesh")
        placement = t.placements[0]
        if isinstance(placement, Shard):
            counts.append(True)
        elif isinstance(placement, Replicate):
            counts.append(mesh.get_local_rank() == 0)
        else:
            raise ValueError(f"Expected Shard or Replicate placements for the gradient "
                             f"statistics, got {t.placements} for tensor {i}")
    values = local([t._local_tensor for t in tensors]).to(torch.float32)
    if not all(counts):
        keep = torch.tensor(counts, device=values.device)
        values = torch.where(keep, values, torch.zeros((), device=values.device))
    dist.all_reduce(values, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX,
                    group=mesh.get_group())
    return values
