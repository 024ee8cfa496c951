"""Sharded parameters (``DTensor``, e.g. under FSDP2's ``fully_shard``): an elementwise update
runs on the local shards.

An elementwise rule (every optimizer but NovoGrad, whose moments are per-tensor norms) updates
each element from the same element of the gradient and the slots, so when a variable, its
gradient and its slots are DTensors with the same mesh, placements and shape, the update of the
local shards is the update of the whole tensor. The local tensors are plain dense tensors: they
go through the same dispatch (the native kernels included, one call over a bucket's local
shards). Anything else (another layout, a replicated scalar slot, mixed placements) stays on the
DTensor path, where torch's sharding rules apply.

A rule that reads a per-tensor norm of the gradient (NovoGrad) runs on the local shards too
where every tensor is sharded (``Shard`` on one 1-D mesh, ``shard_group``): each rank sums the
squares of its gradient shards, one ``all_reduce`` (``summed_over_shards``) gives the whole
tensors' sums, and the rule reads those; its 0-dim per-tensor slots are plain tensors, the same
on every rank (``local_shards(..., scalars=True)`` passes them as they are).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch

__all__ = ["is_sharded", "local_shards", "shard_group", "summed_over_shards"]


def _dtensor_class() -> type | None:
    """``DTensor`` once ``torch.distributed.tensor`` is imported (no DTensor exists before;
    importing it here would cost ``import trainop`` ~0.6 s), else ``None``."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)


def is_sharded(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a DTensor."""
    cls = _dtensor_class()
    return cls is not None and isinstance(tensor, cls)


def local_shards(vs: Sequence[torch.Tensor], gs: Sequence[torch.Tensor],
                 slot_lists: dict[str, list[torch.Tensor]], *, scalars: bool = False
                 ) -> tuple[list, list, dict[str, list]] | None:
    """The local shards of ``vs``, ``gs`` and every slot list, or ``None`` where the bucket is
    not made of DTensors sharded alike (see the module doc). ``scalars``: a slot that is a
    plain 0-dim tensor (a per-tensor value) is passed as it is."""
    DTensor = _dtensor_class()  # noqa: N806 - the class
    if DTensor is None or not isinstance(vs[0], DTensor):
        return None
    lists = [vs, gs, *slot_lists.values()]
    for i, v in enumerate(vs):
        spec = (v.device_mesh, v.placements, v.shape)
        for k, tensors in enumerate(lists[1:]):
            t = tensors[i]
            if scalars and k and not isinstance(t, DTensor) and t.dim() == 0:
                continue
            if not isinstance(t, DTensor) or (t.device_mesh, t.placements, t.shape) != spec:
                return None
        if not isinstance(v, DTensor) or (v.device_mesh, v.placements) != spec[:2]:
            return None

    def local(tensors):
        return [getattr(t, "_local_tensor", t) for t in tensors]

    return local(vs), local(gs), {name: local(s) for name, s in slot_lists.items()}


def shard_group(tensors: Sequence[torch.Tensor]) -> object | None:
    """The process group over which ``tensors`` are split, where every one is a DTensor on
    one 1-D mesh with a ``Shard`` placement (each element on exactly one rank), else
    ``None``."""
    DTensor = _dtensor_class()  # noqa: N806 - the class
    if DTensor is None or not tensors or not isinstance(tensors[0], DTensor):
        return None
    from torch.distributed.tensor import Shard

    mesh = tensors[0].device_mesh
    if mesh.ndim != 1 or not all(
            isinstance(t, DTensor) and t.device_mesh == mesh
            and isinstance(t.placements[0], Shard) for t in tensors):
        return None
    return mesh.get_group()


def summed_over_shards(values: torch.Tensor, group: object) -> torch.Tensor:
    """``values`` (each rank's parts) summed over the ranks of ``group`` in place, by ONE
    ``all_reduce`` on the device (no host read); returned."""
    import torch.distributed as dist

    dist.all_reduce(values, op=dist.ReduceOp.SUM, group=group)
    return values
