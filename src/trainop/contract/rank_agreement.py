"""Counters that must agree across ranks, checked when a distributed load brings them.

Under FSDP2 and ``ZeroRedundancyOptimizer`` every rank holds its own copy of each group's
counters (``non_slot``: the step, Adam's beta powers, ...). Each rank updates its share of the
parameters with its own copy, so copies that disagree (ranks that loaded different
checkpoints, or a file edited for one rank) would make a model whose shards took different
steps, silently. A load therefore compares them over the process group, in one ``all_gather``
of a fixed-size int64 vector per rank: a flag (this rank's own checks passed) and every group's
counters, bit for bit (each as its kind and value: an integer as it is, a float by its float64
bits, or missing: ``-0.0`` and ``0.0`` differ, a NaN agrees with itself). Every rank raises
the same ``ValueError`` when a counter differs or another rank refused its checkpoint, before
anything changes; a rank that refused raises its own error.

Where: ``load_state_dict`` of an optimizer of DTensor parameters (FSDP2, the load of
``set_optimizer_state_dict``, on every rank, over the parameters' mesh), and the first update
after a load that went around ``load_state_dict`` (ZeRO's, ``contract/outside_load.py``: every
rank steps, over the default group). Only where torch.distributed is initialised with more
than one rank: every rank of the group must take part in that load or update.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from trainop.kernels.shards import is_sharded

__all__ = ["agree_across_ranks", "counter_names", "sharded_group"]

# each counter is two int64s: its kind and its value (an integer as it is, a float by its
# float64 bits); a kind of its own marks a counter that is missing or not one real number
_MISSING, _INTEGER, _FLOAT = 0, 1, 2

def _dist() -> Any:
    """``torch.distributed`` when imported, available and initialised, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def counter_names(opt: Any) -> list[list[str]]:
    """Each group's counters by name: ``step`` and the algorithm's non-slot variables."""
    return [["step", *opt._non_slot_names] for _ in opt.param_groups]


def sharded_group(params: Sequence[torch.Tensor]) -> Any:
    """The process group of the first DTensor parameter's mesh, or None (no DTensor)."""
    for p in params:
        if is_sharded(p):
            mesh = p.device_mesh
            return mesh.get_group() if mesh.ndim == 1 else None
    return None


def _code(value: Any) -> tuple[int, int]:
    """One counter as (kind, int64 value)."""
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or value.is_complex():
        return _MISSING, 0
    if value.is_floating_point():
        return _FLOAT, int(value.detach().to(torch.float64).view(torch.int64))
    return _INTEGER, int(value)


def _vector(names: Sequence[Sequence[str]], counters: Sequence[Any] | None) -> list[int]:
    """A flag (this rank's checks passed) and each counter's kind and value, by ``names``."""
    if counters is None:
        return [0] * (1 + 2 * sum(len(n) for n in names))
    out = [1]
    for group_names, non_slot in zip(names, counters, strict=True):
        for name in group_names:
            found = isinstance(non_slot, Mapping) and name in non_slot
            out.extend(_code(non_slot[name]) if found else (_MISSING, 0))
    return out


def agree_across_ranks(names: Sequence[Sequence[str]], counters: Sequence[Any] | None,
                       error: BaseException | None, *, group: Any = None,
                       device: torch.device | None = None) -> None:
    """Raise on every rank if ``counters`` (each group's ``non_slot`` mapping, by ``names``)
    differ across the ranks of ``group`` (None: the default group) or a rank's own checks
    failed (``error``: this rank's, raised as it is; ``counters`` None then). Nothing is
    compared outside torch.distributed or with one rank; then ``error`` is raised if given."""
    dist = _dist()
    if dist is None or dist.get_world_size(group) < 2:
        if error is not None:
            raise error
        return
    backend = dist.get_backend(group)
    if backend == "nccl" and (device is None or device.type != "cuda"):
        device = torch.device("cuda", torch.cuda.current_device())
    elif device is None or backend == "gloo":
        device = torch.device("cpu")
    mine = torch.tensor(_vector(names, None if error is not None else counters),
                        dtype=torch.int64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(everyone, mine, group=group)
    if error is not None:
        raise error
    rows = [t.cpu().tolist() for t in everyone]
    flat = [(g, name) for g, group_names in enumerate(names) for name in group_names]
    refused = [r for r, row in enumerate(rows) if row[0] != 1]
    if refused:
        raise ValueError(f"Invalid optimizer checkpoint: rank(s) {refused} refused the state "
                         f"they were given (their error says why), so every rank refuses it")
    for k, (g, name) in enumerate(flat):
        values = [(row[1 + 2 * k], row[2 + 2 * k]) for row in rows]
        if len(set(values)) > 1:
            raise ValueError(
                f"Invalid optimizer checkpoint, group {g}: Expected `{name}` to be the same on "
                f"every rank (each rank updates its part of the parameters with its own copy), "
                f"got {_shown(values)}")


def _shown(values: list[tuple[int, int]]) -> str:
    """The ranks' values of one counter, readable (integers as they are, floats decoded)."""
    shown = [repr(torch.tensor(v).view(torch.float64).item())
             if kind == _FLOAT else str(v) if kind == _INTEGER else "missing"
             for kind, v in values]
    return ", ".join(f"rank {r}: {s}" for r, s in enumerate(shown))
