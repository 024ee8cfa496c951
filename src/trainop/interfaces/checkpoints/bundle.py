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
import os
from collections.abc import Mapping

import torch

from trainop.configs.reading import open_regular, read_regular
from trainop.interfaces.checkpoints.crc32c import crc32c, mask, unmask
from trainop.interfaces.checkpoints.dtypes import TF_TO_TORCH, TORCH_TO_TF, tf_dtype_name
from trainop.interfaces.checkpoints.sstable import read_table, write_table
from trainop.interfaces.checkpoints.state_file import resolve_prefix, write_state
from trainop.interfaces.checkpoints.switch import shard_name, write_switched
from trainop.interfaces.checkpoints.wire import CorruptCheckpoint, encode, parse, signed64

__all__ = ["TFCheckpoint", "read_bundle", "write_bundle"]

_PRODUCER = 1  # kTensorBundleVersion
#: The largest ``.index`` read (an entry is its name plus ~30 bytes: millions of variables);
#: a larger one, ``/dev/zero`` or a FIFO is refused before a byte is read.
MAX_INDEX_BYTES = 256 << 20
#: TF's most dimensions of a tensor (``TensorShape::MaxDimensions``).
MAX_RANK = 254


class TFCheckpoint(dict):
    """``{variable name: tensor}``, plus ``unsupported``: ``{name: why it was not read}``."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], unsupported: Mapping[str, str]):
        super().__init__(tensors)
        self.unsupported = dict(unsupported)


def _first(fields: dict, number: int, what: str, default: int | bytes = 0):
    """The field's last value, which must have the default's wire type (an int or bytes): a
    hostile index's mistyped field is a ``CorruptCheckpoint`` naming ``what``."""
    values = fields.get(number)
    if not values:
        return default
    if any(type(v) is not type(default) for v in values):
        raise CorruptCheckpoint(f"{what}: field {number} holds "
                                f"{'bytes' if type(default) is int else 'a number'}, not "
                                f"{'a number' if type(default) is int else 'bytes'}: damaged")
    return values[-1]


def _shape(data: bytes, what: str) -> tuple[int, ...]:
    fields = parse(data, what)
    if _first(fields, 3, what):
        raise CorruptCheckpoint(f"{what}: the shape has unknown rank")
    _first(fields, 2, what, b"")  # every dim a message
    if len(fields.get(2, [])) > MAX_RANK:  # also keeps the element count below cheap
        raise CorruptCheckpoint(f"{what}: the shape has {len(fields[2]):,} dimensions, more "
                                f"than TF's {MAX_RANK}: damaged")
    shape = tuple(signed64(_first(parse(dim, what), 1, what)) for dim in fields.get(2, []))
    if any(n < 0 for n in shape):  # two negative sizes would pass the byte-count check
        raise CorruptCheckpoint(f"{what}: the shape {shape} has a negative size")
    if math.prod(shape) >= 1 << 63:
        raise CorruptCheckpoint(f"{what}: the shape {shape} has more than 2**63 - 1 elements "
                                f"(TF's limit): damaged")
    return shape


def _header(value: bytes, index: str) -> int:
    fields = parse(value, f"{index} header")
    what = f"{index} header"
    if _first(fields, 2, what) != 0:
        raise CorruptCheckpoint(f"{index}: a big-endian checkpoint; only little-endian ones are "
                                f"supported")
    version = parse(_first(fields, 3, what, b""), f"{what} version")
    if _first(version, 2, what) > _PRODUCER:
        raise CorruptCheckpoint(f"{index}: needs a reader of version >= "
                                f"{_first(version, 2, what)}; "
                                f"this one reads version {_PRODUCER}")
    return _first(fields, 1, what, 1)


def _index_entries(prefix: str) -> tuple[int, list[tuple[str, dict]]]:
    index = f"{prefix}.index"

    def missing(_: str) -> Exception:
        return FileNotFoundError(f"No TF checkpoint at {prefix!r}: {index!r} does not exist "
                                 f"(pass the prefix Saver.save returned, without '.index')")

    data = read_regular(index, MAX_INDEX_BYTES, lambda message: CorruptCheckpoint(
        f"{index}: {message}"), noun="a TF checkpoint index", missing=missing)
    table = read_table(data, index)
    if not table or table[0][0] != b"":
        raise CorruptCheckpoint(f"{index}: no bundle header (the entry with the empty key)")
    num_shards = _header(table[0][1], index)
    entries = []
    for key, value in table[1:]:
        if key.startswith(b"\x00"):
            continue  # a slice of a partitioned variable: reported under the variable's name
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            # TF's names are UTF-8; two invalid keys would collapse into one name if replaced
            raise CorruptCheckpoint(f"{index}: the variable name {key!r} is not UTF-8: "
                                    f"damaged") from None
        entries.append((name, parse(value, f"{index} entry {name!r}")))
    return num_shards, entries


class _Shard:
    """One data file, open for positioned reads (no memory map: a file truncated while read
    is a ``CorruptCheckpoint``, never a SIGBUS)."""

    def __init__(self, file: str, what: str):
        self.file = file
        self.fd, self.size = open_regular(
            file, 1 << 62, lambda message: CorruptCheckpoint(f"{what}: the data file {file!r} "
                                                             f"{message}"),
            noun="a TF checkpoint shard",
            missing=lambda _: CorruptCheckpoint(f"{what}: the data file {file!r} is missing"))
        self.handle = os.fdopen(self.fd, "rb", buffering=0)  # reads straight into the tensor

    def check_within(self, offset: int, size: int, what: str) -> None:
        if offset + size > self.size:
            raise CorruptCheckpoint(f"{what}: bytes {offset}..{offset + size} lie past the end "
                                    f"of {self.file!r} ({self.size} bytes): truncated")

    def read(self, offset: int, size: int, what: str) -> bytearray:
        self.check_within(offset, size, what)
        try:
            out = bytearray(size)
        except MemoryError:
            raise MemoryError(f"{what}: {size:,} bytes of {self.file!r} do not fit in "
                              f"memory") from None
        view, done = memoryview(out), 0
        while done < size:
            try:
                self.handle.seek(offset + done)
                got = self.handle.readinto(view[done:])
            except OSError as exc:
                raise CorruptCheckpoint(f"{what}: {self.file!r} cannot be read: "
                                        f"{exc.strerror or exc}") from None
            if not got:
                raise CorruptCheckpoint(f"{what}: {self.file!r} ended at byte {offset + done} "
                                        f"while read (bytes {offset}..{offset + size} "
                                        f"expected): truncated")
            done += got
        return out

    def close(self) -> None:
        self.handle.close()


def _locate(name: str, fields: dict, prefix: str,
            num_shards: int) -> tuple[torch.dtype, tuple, int, int, int, int] | str:
    """Where entry ``name``'s bytes lie: ``(dtype, shape, shard, offset, size, crc)``, or why
    it is not read (a string)."""
    where = f"{prefix}.index entry {name!r}"
    number = _first(fields, 1, where)
    if fields.get(7):
        return "a partitioned variable (saved in slices)"
    if number not in TF_TO_TORCH:
        return f"a {tf_dtype_name(number)} tensor"
    dtype = TF_TO_TORCH[number]
    shape = _shape(_first(fields, 2, where, b""), where)
    shard, offset, size = (_first(fields, n, where) for n in (3, 4, 5))
    expected = math.prod(shape) * dtype.itemsize
    if size != expected:
        raise CorruptCheckpoint(f"TF checkpoint {prefix!r}, variable {name!r}: {size} bytes "
                                f"stored for shape {shape} of {tf_dtype_name(number)} "
                                f"({expected} expected)")
    if not 0 <= shard < num_shards:
        raise CorruptCheckpoint(f"TF checkpoint {prefix!r}, variable {name!r}: shard {shard} "
                                f"of {num_shards}")
    return dtype, shape, shard, offset, size, _first(fields, 6, where)


def _open_within_sizes(located: list, shards: dict, prefix: str, num_shards: int) -> None:
    """Open the data files the entries name and refuse, before a byte is read, an index whose
    entries name more bytes of a data file than it holds: TF's writer never lets entries
    overlap, so only a damaged or hostile index does (forty entries over one 256 MiB region
    made trainop read and hold 10 GiB). TF's own reader reads such entries one by one."""
    totals: dict[int, int] = {}
    for name, place in located:
        if not isinstance(place, str):
            what = f"TF checkpoint {prefix!r}, variable {name!r}"
            shard, offset, size = place[2:5]
            if shard not in shards:
                shards[shard] = _Shard(shard_name(prefix, shard, num_shards), what)
            shards[shard].check_within(offset, size, what)
            totals[shard] = totals.get(shard, 0) + size
    for shard, total in totals.items():
        if total > shards[shard].size:
            raise CorruptCheckpoint(
                f"TF checkpoint {prefix!r}: its index names {total:,} bytes of "
                f"{shards[shard].file!r}, which holds {shards[shard].size:,}: entries overlap "
                f"(TF's writer never writes them): damaged")


def _read_entry(name: str, place: tuple, shards: dict, prefix: str,
                verify: bool) -> torch.Tensor:
    dtype, shape, shard, offset, size, crc = place
    what = f"TF checkpoint {prefix!r}, variable {name!r}"
    raw = shards[shard].read(offset, size, what)
    # TF's reader compares every entry's CRC, an absent one reading as 0 (proto3's default)
    if verify and crc32c(raw) != unmask(crc):
        raise CorruptCheckpoint(f"{what}: the data fail their CRC-32C check: damaged")
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(raw, dtype=dtype).reshape(shape)


def read_bundle(prefix: str | os.PathLike, *, verify_checksums: bool = True) -> TFCheckpoint:
    """Every variable of the TF1 checkpoint at ``prefix`` as a CPU tensor (``trainop.checkpoints.
    read_tf``); no TensorFlow needed.

    Args:
        prefix: what ``tf.compat.v1.train.Saver.save`` returned (``run/model.ckpt-1000``): the
            files ``prefix.index`` and ``prefix.data-NNNNN-of-NNNNN``; or the folder TF saved
            into (``run``): its latest checkpoint, named by its ``checkpoint`` file, as
            ``tf.train.latest_checkpoint`` reads it (``state_file``).
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
    prefix = resolve_prefix(prefix)  # a folder: its latest checkpoint (TF's state file)
    num_shards, entries = _index_entries(prefix)
    shards: dict[int, _Shard] = {}
    tensors, unsupported = {}, {}
    located = [(name, _locate(name, fields, prefix, num_shards)) for name, fields in entries]
    try:
        _open_within_sizes(located, shards, prefix, num_shards)
        for name, place in located:
            if isinstance(place, str):
                unsupported[name] = place
            else:
                tensors[name] = _read_entry(name, place, shards, prefix, verify_checksums)
    finally:
        for shard in shards.values():
            shard.close()
    return TFCheckpoint(tensors, unsupported)


def _entry(tensor: torch.Tensor, offset: int, data: bytes) -> bytes:
    dims = b"".join(encode([(2, encode([(1, int(n))]))]) for n in tensor.shape)
    return encode([(1, TORCH_TO_TF[tensor.dtype]), (2, dims), (4, offset), (5, len(data)),
                   (6, mask(crc32c(data)))], fixed32=frozenset({6}))


def _as_bytes(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def write_bundle(prefix: str | os.PathLike, tensors: Mapping[str, torch.Tensor]) -> None:
    """Write ``tensors`` as a one-shard V2 checkpoint at ``prefix``, and the folder's
    ``checkpoint`` state file naming it the latest (``state_file.write_state``, as TF's
    ``Saver.save`` does, so ``tf.train.latest_checkpoint(folder)`` finds it).

    The data goes under a name the checkpoint there now does not use and the index is
    replaced last (``switch.write_switched``): the old checkpoint stays whole until the new
    one is, and a failure leaves no temporary file."""
    prefix = os.fspath(prefix)
    if not isinstance(prefix, str) or os.path.basename(prefix) in ("", ".", ".."):
        raise ValueError(f"Expected the checkpoint prefix to name a file (as "
                         f"'run/model.ckpt'), got {prefix!r}: its files would be hidden ones "
                         f"('.index', '.data-...') or lie in a directory's place")
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
    write_switched(prefix, bytes(data), lambda num_shards: write_table(
        [(b"", encode([(1, num_shards), (3, encode([(1, _PRODUCER)]))])), *entries]),
        _current_shards(prefix))
    write_state(prefix)  # the folder's `checkpoint` file names it the latest, as TF's Saver


def _current_shards(prefix: str) -> int | None:
    """The shard count of the checkpoint at ``prefix`` now; ``None`` where there is none (or
    its index is unreadable: nothing there to keep readable)."""
    try:
        return _index_entries(prefix)[0]
    except (OSError, ValueError):
        return None
