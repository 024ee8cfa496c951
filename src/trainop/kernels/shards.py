"""Sharded parameters (``DTensor``, e.g. under FSDP2's ``fully_shard``): an elementwise update
runs on the local shards.

An elementwise rule (every optimizer but NovoGrad, whose moments are per-tensor norms) updates
each element from the same element of the gradient and the slots, so when a variable, its
gradient and its slots are DTensors with the same mesh, placements and shape, the update of the
local shards is the update of the whole tensor. The local tensors are plain dense tensors: they
go through the same dispatch (the native kernels included, one call over a bucket's local
shards). Anything else (another layout, a replicated scalar slot, mixed placements) stays on the
DTensor path, where torch's sharding rules apply.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch

__all__ = ["is_sharded", "local_shards"]


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
                 slot_lists: dict[str, list[torch.Tensor]]
                 ) -> tuple[list, list, dict[str, list]] | None:
    """The local shards of ``vs``, ``gs`` and every slot list, or ``None`` where the bucket is
    not made of DTensors sharded alike (see the module doc)."""
    DTensor = _dtensor_class()  # noqa: N806 - the class
    if DTensor is None or not isinstance(vs[0], DTensor):
        return None
    lists = [vs, gs, *slot_lists.values()]
    for i, v in enumerate(vs):
        spec = (v.device_mesh, v.placements, v.shape)
        for tensors in lists[1:]:
            t = tensors[i]
            if not isinstance(t, DTensor) or (t.device_mesh, t.placements, t.shape) != spec:
                return None
        if not isinstance(v, DTensor) or (v.device_mesh, v.placements) != spec[:2]:
            return None

    def local(tensors):
        return [t._local_tensor for t in tensors]

    return local(vs), local(gs), {name: local(s) for name, s in slot_lists.items()}
