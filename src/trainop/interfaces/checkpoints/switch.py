"""Writing a checkpoint's files so that the index is the one switch from old to new.

A V2 checkpoint is an index (``prefix.index``) and data files whose names the index derives
from its shard count (``prefix.data-00000-of-00001``). Renaming a new data file over the old
one and then a new index over the old index leaves, between the two renames (or when the
second fails), new data beside the old index: the old checkpoint fails its CRCs and the new
one is not there yet. So the new data goes under names the current index does not use: one
shard where the current index has two, two (the second empty) where it has one or none is
readable. Only then is the index replaced (one ``os.replace``, atomic): until that moment the
old checkpoint is whole, from it on the new one is. The old layout's data files are removed
after; temporaries, and new data files never switched to, are removed on any failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["shard_name", "write_switched"]


def shard_name(prefix: str, shard: int, num_shards: int) -> str:
    """TF's name of data file ``shard`` of ``num_shards``."""
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def _write_synced(file: str, content: bytes) -> None:
    with open(file, "wb") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())


def _unlink(files: list[str]) -> None:
    for file in files:
        Path(file).unlink(missing_ok=True)


def write_switched(prefix: str, data: bytes, index_for: Callable[[int], bytes],
                   current_shards: int | None) -> None:
    """Write ``data`` as shard 0 and the index ``index_for(num_shards)`` at ``prefix``, the
    index last (see the module docstring). ``current_shards``: the shard count of the index
    there now (``None``: none, or unreadable)."""
    num_shards = 2 if current_shards == 1 else 1
    index = f"{prefix}.index"
    shards = [shard_name(prefix, i, num_shards) for i in range(num_shards)]
    contents = [data] + [b""] * (num_shards - 1)
    files = [*zip(shards, contents, strict=True), (index, index_for(num_shards))]
    partials = [f"{file}.tmp{os.getpid()}" for file, _ in files]
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    try:
        for partial, (_, content) in zip(partials, files, strict=True):
            _write_synced(partial, content)
        for partial, shard in zip(partials, shards, strict=False):
            os.replace(partial, shard)  # names the current index does not use
        os.replace(partials[-1], index)  # the switch
    except BaseException:
        _unlink(partials)
        _unlink(shards)
        raise
    if current_shards is not None and current_shards != num_shards:
        _unlink([shard_name(prefix, i, current_shards) for i in range(current_shards)])
