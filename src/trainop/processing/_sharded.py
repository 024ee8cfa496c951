"""Per-tensor statistics of sharded tensors (DTensors, e.g. FSDP2's ``fully_shard``) over the
whole tensor: each rank reduces its local shards, then one ``all_reduce`` over the mesh's
process group combines them (a sum of squares for L2 norms, a max for ``max |g|``), on the
device, without a host read. A ``GradientPipeline`` asks for every statistic its stages need at
once (``whole_tensor_statistics``): one ``all_reduce`` per step. A replicated tensor counts once
(its rank-0 copy). Supported: DTensors on one 1-D mesh with ``Shard`` or ``Replicate``
placements; anything else is a ``ValueError`` naming the placements.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from trainop.kernels.shards import is_sharded

__all__ = ["sharded", "whole_tensor_statistic", "whole_tensor_statistics"]


def sharded(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether the tensors are DTensors (checked on the first; they come from one model)."""
    return bool(tensors) and is_sharded(tensors[0])


def _mesh_and_counts(tensors: Sequence[torch.Tensor]) -> tuple[object, list[bool]]:
    """The tensors' 1-D mesh, and per tensor whether this rank's local part counts (a shard
    always; a replicated tensor on its mesh-rank-0 copy only)."""
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
    return mesh, counts


def _local_values(tensors: Sequence[torch.Tensor],
                  local: Callable[[list[torch.Tensor]], torch.Tensor],
                  counts: list[bool]) -> torch.Tensor:
    values = local([t._local_tensor for t in tensors]).to(torch.float32)
    if not all(counts):
        keep = torch.tensor(counts, device=values.device)
        values = torch.where(keep, values, torch.zeros((), device=values.device))
    return values


def whole_tensor_statistic(tensors: Sequence[torch.Tensor],
                           local: Callable[[list[torch.Tensor]], torch.Tensor], *,
                           op: str) -> torch.Tensor:
    """Per DTensor, a statistic of the whole tensor: ``local(local shards)`` gives a 1-D
    float32 tensor per rank (``op="sum"``: additive parts, e.g. squared norms; ``op="max"``),
    combined by one ``all_reduce`` (``whole_tensor_statistics`` with one request)."""
    return whole_tensor_statistics([(tensors, local, op)])[0]


def whole_tensor_statistics(requests: Sequence[tuple[Sequence[torch.Tensor],
                                                     Callable[[list[torch.Tensor]], torch.Tensor],
                                                     str]]) -> list[torch.Tensor]:
    """Several ``whole_tensor_statistic`` requests ``(tensors, local, op)`` (DTensors on one
    mesh) combined by ONE ``all_reduce`` (a sum): the additive parts are summed as they are;
    each rank writes its ``op="max"`` parts (non-negative or NaN) into its own row of a
    ``world x n`` block (zeros elsewhere, so the sum is exact and carries NaN and inf), and the
    maximum over the rows is taken after the reduction. The results, in the order of
    ``requests``."""
    import torch.distributed as dist

    mesh = None
    parts: list[tuple[torch.Tensor, str]] = []
    for tensors, local, op in requests:
        mesh_i, counts = _mesh_and_counts(tensors)
        if mesh is None:
            mesh = mesh_i
        elif mesh_i != mesh:
            raise ValueError("Expected every tensor of the step to be a DTensor on one mesh, "
                             "got statistics on two meshes")
        parts.append((_local_values(tensors, local, counts), op))
    world, rank = mesh.size(), mesh.get_local_rank()
    packed = []
    for values, op in parts:
        if op == "sum":
            packed.append(values)
        else:
            block = values.new_zeros(world, values.numel())
            block[rank] = values
            packed.append(block.flatten())
    flat = torch.cat(packed)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=mesh.get_group())
    out, start = [], 0
    for values, op in parts:
        n = values.numel()
        if op == "sum":
            out.append(flat[start:start + n])
            start += n
        else:
            out.append(flat[start:start + world * n].view(world, n).amax(0))
            start += world * n
    return out
