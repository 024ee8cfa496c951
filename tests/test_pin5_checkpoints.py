"""Pins of the TF checkpoint reader's limits and fields (issue #40, round-5 audit): every limit
exactly at its bound and one past it, and each field of the index format where it may repeat.
Checkpoints come from TensorFlow's own ``SaveV2``; edited indexes are compared with
TensorFlow's own reader (``tf.train.load_checkpoint``): where TF reads a value, trainop reads
the same one, where TF refuses the file, trainop refuses it (a ``CorruptCheckpoint``)."""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest
import torch
from admitted import admitted

import trainop
import trainop.checkpoints as ckpt
from trainop.configs.reading import open_regular
from trainop.interfaces.checkpoints import bundle
from trainop.interfaces.checkpoints.crc32c import crc32c, mask
from trainop.interfaces.checkpoints.sstable import MAGIC, read_table, write_table
from trainop.interfaces.checkpoints.wire import CorruptCheckpoint, encode, encode_varint, parse

tf = pytest.importorskip("tensorflow")

_FIXED32 = frozenset({6})


def _tf_save(prefix, tensors: dict) -> str:
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tensors[n] if isinstance(tensors[n], tf.Tensor)
                               else tf.constant(tensors[n]) for n in names])
    return str(prefix)


def _tf_read(prefix: str) -> dict | None:
    """TensorFlow's own reading of every variable, or None where TF refuses the checkpoint."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}
    except (tf.errors.OpError, ValueError, RuntimeError):
        return None


def _ours(prefix: str) -> dict | None:
    try:
        return {n: t.numpy() for n, t in ckpt.read_tf(prefix).items()}
    except CorruptCheckpoint:
        return None


def _edit(prefix: str, name: str | None, fields: list[tuple[int, int | bytes]]) -> None:
    """Rewrite the index entry ``name`` (None: the header) as ``fields``, in this order."""
    index = f"{prefix}.index"
    with open(index, "rb") as handle:
        table = read_table(handle.read(), index)
    key = b"" if name is None else name.encode()
    table = [(k, encode(fields, _FIXED32) if k == key else v) for k, v in table]
    with open(index, "wb") as handle:
        handle.write(write_table(table))


def _fields(prefix: str, name: str) -> dict:
    index = f"{prefix}.index"
    with open(index, "rb") as handle:
        return parse(dict(read_table(handle.read(), index))[name.encode()], "entry")


def _entry_like(prefix, name, repeated=None):
    """The entry's fields in TF's order, each field in ``repeated`` written twice: first the
    decoy given, then the real value (protobuf: the last one wins)."""
    f = _fields(prefix, name)
    out = []
    for number in (1, 2, 3, 4, 5, 6):
        decoy = (repeated or {}).get(number)
        if decoy is not None:
            out.append((number, decoy))
        if number in f:
            out.append((number, f[number][-1]))
        elif decoy is not None and number == 3:
            out.append((3, 0))
    return out


def _agree(prefix: str) -> dict | None:
    theirs, ours = _tf_read(prefix), _ours(prefix)
    assert (theirs is None) == (ours is None), (theirs, ours)
    if theirs is not None:
        for n, value in theirs.items():
            np.testing.assert_array_equal(ours[n], value)
    return ours


@pytest.mark.parametrize("number, decoy", [(1, 3), (3, 7), (4, 5), (5, 3), (6, 12345)],
                         ids=["dtype", "shard_id", "offset", "size", "crc32c"])
def test_a_repeated_entry_field_is_read_as_tensorflow_reads_it(tmp_path, number, decoy):
    prefix = _tf_save(tmp_path / "ck", {"a": np.arange(3, dtype=np.float32),
                                        "b": np.float32(7.0)})
    _edit(prefix, "b", _entry_like(prefix, "b", {number: decoy}))
    ours = _agree(prefix)
    assert ours is not None and float(ours["b"]) == 7.0 and ours["b"].dtype == np.float32


def test_a_header_field_repeated_or_at_its_version_edge(tmp_path):
    prefix = _tf_save(tmp_path / "ck", {"a": np.float32(1.5)})
    version = encode([(1, 1), (2, 1)])  # min_consumer 1: this reader (version 1) reads it
    _edit(prefix, None, [(1, 5), (1, 1), (3, version)])  # num_shards 5, then 1
    assert float(_agree(prefix)["a"]) == 1.5
    _edit(prefix, None, [(1, 1), (3, encode([(1, 1), (2, 2)]))])  # needs version 2
    assert _agree(prefix) is None
    with pytest.raises(CorruptCheckpoint, match=r"version >= 2"):
        ckpt.read_tf(prefix)


def test_an_entry_without_its_crc_is_refused_as_tensorflow_refuses_it(tmp_path):
    prefix = _tf_save(tmp_path / "ck", {"a": np.arange(3, dtype=np.float32)})
    f = _fields(prefix, "a")
    _edit(prefix, "a", [(n, f[n][-1]) for n in (1, 2, 4, 5) if n in f])
    assert _agree(prefix) is None


def test_an_entry_storing_more_bytes_than_its_shape_is_refused(tmp_path):
    prefix = _tf_save(tmp_path / "ck", {"a": np.arange(2, dtype=np.float32),
                                        "b": np.arange(2, dtype=np.float32)})
    f = _fields(prefix, "a")
    _edit(prefix, "a", [(1, f[1][-1]), (2, f[2][-1]), (5, 12), (6, f[6][-1])])
    assert _agree(prefix) is None
    with pytest.raises(CorruptCheckpoint, match=r"12 bytes stored for shape \(2,\)"):
        ckpt.read_tf(prefix)


def test_shard_ids_at_and_past_the_number_of_shards(tmp_path):
    prefix = _tf_save(tmp_path / "ck", {"a": np.arange(3, dtype=np.float32)})
    entry = _entry_like(prefix, "a")
    _edit(prefix, "a", [(n, v) for n, v in entry if n != 3] + [(3, 1)])  # shard 1 of 1
    assert _tf_read(prefix) is None
    with pytest.raises(CorruptCheckpoint, match=r"shard 1 of 1$"):
        ckpt.read_tf(prefix)


def test_the_most_dimensions_tensorflow_writes_and_one_more(tmp_path):
    prefix = _tf_save(tmp_path / "ck", {"a": tf.zeros((1,) * 254)})
    assert admitted(ckpt.read_tf, prefix)["a"].shape == (1,) * 254  # TF's MaxDimensions
    f = _fields(prefix, "a")
    shape = encode([(2, encode([(1, 1)]))] * 255)
    _edit(prefix, "a", [(1, f[1][-1]), (2, shape), (5, f[5][-1]), (6, f[6][-1])])
    with pytest.raises(CorruptCheckpoint, match=r"255 dimensions, more than TF's 254"):
        ckpt.read_tf(prefix)


@pytest.mark.parametrize("dims, message", [
    ((1 << 62, 2), r"more than 2\*\*63 - 1 elements"),           # exactly 2**63
    (((1 << 63) - 1,), r"bytes stored for shape"),              # 2**63 - 1: the element limit
])
def test_the_element_count_at_and_past_int64(tmp_path, dims, message):
    prefix = _tf_save(tmp_path / "ck", {"a": np.arange(2, dtype=np.int8)})
    f = _fields(prefix, "a")
    shape = b"".join(encode([(2, encode([(1, n)]))]) for n in dims)
    _edit(prefix, "a", [(1, f[1][-1]), (2, shape), (5, f[5][-1]), (6, f[6][-1])])
    with pytest.raises(CorruptCheckpoint, match=message):
        ckpt.read_tf(prefix)


def test_varints_of_ten_bytes_and_of_eleven(tmp_path):
    prefix = _tf_save(tmp_path / "ck", {"a": np.arange(3, dtype=np.float32)})
    f = _fields(prefix, "a")
    index = f"{prefix}.index"

    def with_offset(raw: bytes) -> None:  # field 4 (the offset 0) spelled in ``raw`` bytes
        value = (encode([(1, f[1][-1]), (2, f[2][-1])]) + encode_varint(4 << 3) + raw
                 + encode([(5, f[5][-1]), (6, f[6][-1])], _FIXED32))
        with open(index, "rb") as handle:
            table = read_table(handle.read(), index)
        with open(index, "wb") as handle:
            handle.write(write_table([(k, value if k == b"a" else v) for k, v in table]))

    with_offset(b"\x80" * 9 + b"\x00")  # 0 in 10 bytes: the longest varint
    np.testing.assert_array_equal(_agree(prefix)["a"], np.arange(3, dtype=np.float32))
    with_offset(b"\x80" * 10 + b"\x00")  # 11 bytes
    with pytest.raises(CorruptCheckpoint, match="longer than 10 bytes"):
        ckpt.read_tf(prefix)


def test_an_index_of_many_blocks_reads_as_tensorflow_reads_it(tmp_path):
    tensors = {f"layer_{i:03d}/" + "kernel" * 8: np.float32(i) for i in range(150)}
    prefix = _tf_save(tmp_path / "ck", tensors)
    with open(f"{prefix}.index", "rb") as handle:
        assert len(handle.read()) > 2 * 4096  # several data blocks, back to back
    ours = _agree(prefix)
    assert {n: float(v) for n, v in ours.items()} == {n: float(v) for n, v in tensors.items()}


def _table(block_contents: bytes) -> bytes:
    """A table of one data block (as given), an empty meta-index and its index."""
    out = bytearray()

    def append(contents: bytes) -> bytes:
        handle = encode_varint(len(out)) + encode_varint(len(contents))
        out.extend(contents + b"\x00" + struct.pack("<I", mask(crc32c(contents + b"\x00"))))
        return handle

    empty = struct.pack("<II", 0, 1)
    data = append(block_contents)
    meta = append(empty)
    key = b"\xff"
    index = append(b"\x00" + encode_varint(len(key)) + encode_varint(len(data)) + key + data
                   + struct.pack("<II", 0, 1))
    footer = meta + index
    return bytes(out + footer + b"\x00" * (40 - len(footer)) + struct.pack("<Q", MAGIC))


def test_a_chain_of_shared_key_prefixes_is_refused(tmp_path):
    # keys "", "a", "aa", ... each stored as the previous key plus one byte: 4 bytes an entry,
    # 80,000 key bytes unpacked from a block of 1.6 KB
    header = encode([(1, 1), (3, encode([(1, 1)]))])
    entries = encode_varint(0) + encode_varint(0) + encode_varint(len(header)) + header
    entries += b"".join(encode_varint(n) + encode_varint(1) + encode_varint(0) + b"a"
                        for n in range(400))
    prefix = str(tmp_path / "ck")
    with open(f"{prefix}.index", "wb") as handle:
        handle.write(_table(entries + struct.pack("<II", 0, 1)))
    with pytest.raises(CorruptCheckpoint, match=r"times as many key bytes"):
        ckpt.read_tf(prefix)


def test_a_block_whose_trailer_runs_one_byte_past_the_end_is_truncated(tmp_path):
    prefix = _tf_save(tmp_path / "ck", {"a": np.float32(1.0)})
    index = f"{prefix}.index"
    with open(index, "rb") as handle:
        data = handle.read()
    # an index handle whose 5-byte trailer would end one byte past the file: (len - 4, 0)
    end = len(data)
    handles = encode_varint(0) + encode_varint(0) + encode_varint(end - 4) + encode_varint(0)
    new = data[:-48] + handles + b"\x00" * (40 - len(handles)) + data[-8:]
    with open(index, "wb") as handle:
        handle.write(new)
    with pytest.raises(CorruptCheckpoint, match=r"runs past the end of the file"):
        ckpt.read_tf(prefix)


def test_the_index_size_limit_at_and_one_below_the_file(tmp_path, monkeypatch):
    prefix = _tf_save(tmp_path / "ck", {"a": np.float32(2.0)})
    with open(f"{prefix}.index", "rb") as handle:
        size = len(handle.read())
    monkeypatch.setattr(bundle, "MAX_INDEX_BYTES", size)
    assert float(admitted(ckpt.read_tf, prefix)["a"]) == 2.0
    monkeypatch.setattr(bundle, "MAX_INDEX_BYTES", size - 1)
    with pytest.raises(CorruptCheckpoint):
        ckpt.read_tf(prefix)


def test_open_regular_admits_a_file_of_exactly_its_limit(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    fd, size = admitted(open_regular, str(path), 10, ValueError)
    os.close(fd)
    assert size == 10
    with pytest.raises(ValueError, match="more than|larger|bytes"):
        open_regular(str(path), 9, ValueError)


class _One(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.zeros(2))


@pytest.mark.parametrize("step, ok", [(2**62, True), (2**62 + 1, False)])
def test_the_global_step_limit_at_and_one_past(tmp_path, step, ok):
    prefix = _tf_save(tmp_path / "ck", {"a": np.full(2, 1.5, np.float32),
                                        "a/Momentum": np.full(2, 0.5, np.float32),
                                        "global_step": np.int64(step)})
    model = _One()
    opt = trainop.MomentumOptimizer(model.parameters(), learning_rate=0.1, momentum=0.9)
    if ok:
        report = admitted(ckpt.load_tf, prefix, model, opt, names={"a": "a"})
        assert report.global_step == step
        assert int(opt.param_groups[0]["non_slot"]["step"]) == step
    else:
        with pytest.raises(ValueError, match=r"in \[0, 2\*\*62\]"):
            ckpt.load_tf(prefix, model, opt, names={"a": "a"})
