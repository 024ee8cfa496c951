"""TF1's V2 checkpoint ("tensor bundle"): ``PREFIX.index`` and ``PREFIX.data-NNNNN-of-MMMMM``.

The ``.index`` file is a table (see ``sstable``) whose empty key holds a ``BundleHeaderProto``
(1: num_shards, 2: endianness, 0 = little, 3: version ``{1: producer, 2: min_consumer}``) and
whose other keys are variable names, each holding a ``BundleEntryProto``::

    1: dtype (DataType enum)   2: shape (TensorShapeProto: repeated 2: dim {1: size})
    3: shard_id   4: offset   5: size   6: crc32c (fixed32, masked)   7: slices (partitioned)

The tensor's bytes (little-endian, row-major) are ``size`` bytes at ``offset`` in shard
``shard_id``. Keys starting with a zero byte are the slices of a partitioned variable.

``read_bundle`` checks what is checkable (table CRCs, each tensor's CRC, offsets inside the
shard, byte counts against the shape) and raises ``CorruptCheckpoint`` (a ``ValueError``)
naming the file and the variable. Entries it does not read (strings, partitioned variables,
resources) are listed in ``TFCheckpoint.unsupported`` with the reason, not guessed.
``write_bundle`` writes one shard as TF's ``BundleWriter`` does (``tf.compat.v1.train.Saver``
restores it).
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from trainop.interfaces.checkpoints.crc32c import crc32c, mask, unmask
from trainop.interfaces.checkpoints.dtypes import TF_TO_TORCH, TORCH_TO_TF, tf_dtype_name
from trainop.interfaces.checkpoints.sstable import read_table, write_table
from trainop.interfaces.checkpoints.wire import CorruptCheckpoint, encode, parse, signed64

__all__ = ["TFCheckpoint", "read_bundle", "write_bundle"]

_PRODUCER = 1  # kTensorBundleVersion


class TFCheckpoint(dict):
    """``{variable name: tensor}``, plus ``unsupported``: ``{name: why it was not read}``."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], unsupported: Mapping[str, str]):
        super().__init__(tensors)
        self.unsupported = dict(unsupported)


def _shard_name(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def _first(fields: dict, number: int, default=0):
    values = fields.get(number)
    return values[-1] if values else default


def _shape(data: bytes, what: str) -> tuple[int, ...]:
    fields = parse(data, what)
    if _first(fields, 3):
        raise CorruptCheckpoint(f"{what}: the shape has unknown rank")
    shape = tuple(signed64(_first(parse(dim, what), 1)) for dim in fields.get(2, []))
    if any(n < 0 for n in shape):  # two negative sizes would pass the byte-count check
        raise CorruptCheckpoint(f"{what}: the shape {shape} has a negative size")
    return shape


def _header(value: bytes, index: str) -> int:
    fields = parse(value, f"{index} header")
    if _first(fields, 2) != 0:
        raise CorruptCheckpoint(f"{index}: a big-endian checkpoint; only little-endian ones are "
                                f"supported")
    version = parse(_first(fields, 3, b""), f"{index} header version")
    if _first(version, 2) > _PRODUCER:
        raise CorruptCheckpoint(f"{index}: needs a reader of version >= {_first(version, 2)}; "
                                f"this one reads version {_PRODUCER}")
    return _first(fields, 1, 1)


def _index_entries(prefix: str) -> tuple[int, list[tuple[str, dict]]]:
    index = f"{prefix}.index"
    try:
        data = Path(index).read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"No TF checkpoint at {prefix!r}: {index!r} does not exist "
                                f"(pass the prefix Saver.save returned, without "
                                f"'.index')") from None
    table = read_table(data, index)
    if not table or table[0][0] != b"":
        raise CorruptCheckpoint(f"{index}: no bundle header (the entry with the empty key)")
    num_shards = _header(table[0][1], index)
    entries = []
    for key, value in table[1:]:
        if key.startswith(b"\x00"):
            continue  # a slice of a partitioned variable: reported under the variable's name
        name = key.decode("utf-8", errors="replace")
        entries.append((name, parse(value, f"{index} entry {name!r}")))
    return num_shards, entries


def _open_shard(file: str, what: str):
    """The shard's bytes, memory-mapped (tensors are copied out one at a time)."""
    try:
        with open(file, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                return b""
            return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise CorruptCheckpoint(f"{what}: the data file {file!r} is missing") from None


def _read_entry(name: str, fields: dict, shards: dict, prefix: str,
                num_shards: int, verify: bool) -> torch.Tensor | str:
    number = _first(fields, 1)
    if fields.get(7):
        return "a partitioned variable (saved in slices)"
    if number not in TF_TO_TORCH:
        return f"a {tf_dtype_name(number)} tensor"
    dtype = TF_TO_TORCH[number]
    shape = _shape(_first(fields, 2, b""), f"{prefix}.index entry {name!r}")
    shard, offset, size = _first(fields, 3), _first(fields, 4), _first(fields, 5)
    expected = math.prod(shape) * dtype.itemsize
    what = f"TF checkpoint {prefix!r}, variable {name!r}"
    if size != expected:
        raise CorruptCheckpoint(f"{what}: {size} bytes stored for shape {shape} of "
                                f"{tf_dtype_name(number)} ({expected} expected)")
    if not 0 <= shard < num_shards:
        raise CorruptCheckpoint(f"{what}: shard {shard} of {num_shards}")
    if shard not in shards:
        shards[shard] = _open_shard(_shard_name(prefix, shard, num_shards), what)
    data = shards[shard]
    if offset + size > len(data):
        raise CorruptCheckpoint(f"{what}: bytes {offset}..{offset + size} lie past the end "
                                f"of {_shard_name(prefix, shard, num_shards)!r} ({len(data)} "
                                f"bytes): truncated")
    raw = bytearray(data[offset:offset + size])
    if verify and 6 in fields and crc32c(raw) != unmask(_first(fields, 6)):
        raise CorruptCheckpoint(f"{what}: the data fail their CRC-32C check: damaged")
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(raw, dtype=dtype).reshape(shape)


def read_bundle(prefix: str | os.PathLike, *, verify_checksums: bool = True) -> TFCheckpoint:
    """Every variable of the TF1 checkpoint at ``prefix`` as a CPU tensor (``trainop.checkpoints.
    read_tf``); no TensorFlow needed.

    Args:
        prefix: what ``tf.compat.v1.train.Saver.save`` returned (``run/model.ckpt-1000``): the
            files ``prefix.index`` and ``prefix.data-NNNNN-of-NNNNN``.
        verify_checksums: check the CRC-32C of every table block and tensor (TF's own
            checks; default True).

    Returns:
        a ``TFCheckpoint``: ``{variable name: tensor}`` with TF's dtypes and shapes (bfloat16,
        float16/32/64, the integer types, bool), and ``.unsupported``: ``{name: reason}`` for
        entries not read (string tensors, slices of partitioned variables), never guessed.

    Raises:
        CorruptCheckpoint (a ``ValueError``): a missing, truncated or damaged file, naming the
        file and what is wrong; nothing is returned in part.

    Example::

        tensors = trainop.checkpoints.read_tf("run/model.ckpt-1000")
        tensors["dense/kernel/Adam"].shape, float(tensors["beta1_power"])
    """
    prefix = os.fspath(prefix)
    num_shards, entries = _index_entries(prefix)
    shards: dict[int, bytes | mmap.mmap] = {}
    tensors, unsupported = {}, {}
    try:
        for name, fields in entries:
            value = _read_entry(name, fields, shards, prefix, num_shards, verify_checksums)
            if isinstance(value, str):
                unsupported[name] = value
            else:
                tensors[name] = value
    finally:
        for data in shards.values():
            if isinstance(data, mmap.mmap):
                data.close()
    return TFCheckpoint(tensors, unsupported)


def _entry(tensor: torch.Tensor, offset: int, data: bytes) -> bytes:
    dims = b"".join(encode([(2, encode([(1, int(n))]))]) for n in tensor.shape)
    return encode([(1, TORCH_TO_TF[tensor.dtype]), (2, dims), (4, offset), (5, len(data)),
                   (6, mask(crc32c(data)))], fixed32=frozenset({6}))


def _as_bytes(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def write_bundle(prefix: str | os.PathLike, tensors: Mapping[str, torch.Tensor]) -> None:
    """Write ``tensors`` as a one-shard V2 checkpoint at ``prefix`` (files replaced
    atomically: written beside, then renamed)."""
    prefix = os.fspath(prefix)
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not name or name.startswith("\x00"):
            raise ValueError(f"Expected TF variable names to be non-empty strings, got {name!r}")
        if not isinstance(tensor, torch.Tensor) or tensor.dtype not in TORCH_TO_TF:
            raise TypeError(f"Expected variable {name!r} to be a tensor of a dtype TF "
                            f"checkpoints hold, got "
                            f"{getattr(tensor, 'dtype', type(tensor).__name__)}")
    data = bytearray()
    entries = []
    for name in sorted(tensors, key=lambda n: n.encode("utf-8")):
        raw = _as_bytes(tensors[name])
        entries.append((name.encode("utf-8"), _entry(tensors[name], len(data), raw)))
        data += raw
    header = encode([(1, 1), (3, encode([(1, _PRODUCER)]))])
    index = write_table([(b"", header), *entries])
    parent = Path(prefix).parent
    parent.mkdir(parents=True, exist_ok=True)
    for file, content in ((_shard_name(prefix, 0, 1), bytes(data)),
                          (f"{prefix}.index", index)):
        partial = f"{file}.tmp{os.getpid()}"
        Path(partial).write_bytes(content)
        os.replace(partial, file)
