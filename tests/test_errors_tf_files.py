"""Hostile TF checkpoint files (#34): special files, huge or shrinking files, mistyped index
fields, entries without a CRC, names that are not UTF-8, steps past int64; and ``save_tf``
failing half-way. Each is a ``CorruptCheckpoint``/``ValueError`` naming the file, fast, with
nothing changed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

import trainop
import trainop.checkpoints as ckpt
from trainop.interfaces.checkpoints import bundle, switch
from trainop.interfaces.checkpoints.crc32c import crc32c, mask
from trainop.interfaces.checkpoints.sstable import write_table
from trainop.interfaces.checkpoints.wire import encode

DATA = ".data-00000-of-00001"
HEADER = encode([(1, 1), (3, encode([(1, 1)]))])


def _write(tmp_path, entries: list[tuple[bytes, bytes]], data: bytes = b"") -> str:
    prefix = str(tmp_path / "ck")
    Path(prefix + ".index").write_bytes(write_table([(b"", HEADER), *sorted(entries)]))
    Path(prefix + DATA).write_bytes(data)
    return prefix


def _float_entry(raw: bytes, *, crc: bool = True) -> bytes:
    dims = encode([(2, encode([(1, len(raw) // 4)]))])
    fields = [(1, 1), (2, dims), (4, 0), (5, len(raw))]
    return encode(fields + ([(6, mask(crc32c(raw)))] if crc else []), fixed32=frozenset({6}))


@pytest.mark.parametrize("suffix", [".index", DATA])
def test_a_fifo_is_refused_without_waiting(tmp_path, suffix):
    prefix = str(tmp_path / "ck")
    ckpt.write_tf(prefix, {"a": torch.ones(2)})
    os.unlink(prefix + suffix)
    os.mkfifo(prefix + suffix)
    start = time.monotonic()
    with pytest.raises(ValueError, match=rf"ck{suffix}'?:? is not a regular file \(a FIFO\)"):
        ckpt.read_tf(prefix)
    assert time.monotonic() - start < 30  # a backstop only (#39)


def test_an_index_linked_to_dev_zero_is_refused(tmp_path):
    prefix = str(tmp_path / "ck")
    os.symlink("/dev/zero", prefix + ".index")
    with pytest.raises(ValueError, match=r"ck.index: is not a regular file \(a character "
                                         r"device\); a TF checkpoint index is read from a "
                                         r"regular file"):
        ckpt.read_tf(prefix)


def test_a_huge_sparse_index_is_refused_before_reading(tmp_path):
    prefix = str(tmp_path / "ck")
    with open(prefix + ".index", "wb") as handle:
        handle.truncate(2 << 30)  # 2 GiB, sparse: no disk used
    with pytest.raises(ValueError, match=r"ck.index: is 2,147,483,648 bytes, more than the "
                                         r"268,435,456 a TF checkpoint index may have"):
        ckpt.read_tf(prefix)


def test_a_data_file_truncated_while_read(tmp_path, monkeypatch):
    """The data file shrinks after it was opened and measured (another process rewriting it):
    a memory map would die with SIGBUS; positioned reads see the short file."""
    prefix = str(tmp_path / "ck")
    ckpt.write_tf(prefix, {"a": torch.ones(64), "b": torch.ones(64)})
    opened = bundle.open_regular

    def open_then_truncate(path, *args, **kwargs):
        out = opened(path, *args, **kwargs)
        if path.endswith(DATA):
            os.truncate(path, 100)
        return out

    monkeypatch.setattr(bundle, "open_regular", open_then_truncate)
    with pytest.raises(ValueError, match=rf"variable 'a': '{prefix}{DATA}' ended at byte 100 "
                                         rf"while read \(bytes 0..256 expected\): truncated"):
        ckpt.read_tf(prefix)


def test_a_data_file_shorter_than_its_index_claims(tmp_path):
    prefix = _write(tmp_path, [(b"a", _float_entry(b"\0" * 16))], data=b"\0" * 8)
    with pytest.raises(ValueError, match=r"variable 'a': bytes 0..16 lie past the end of "
                                         r".*\(8 bytes\): truncated"):
        ckpt.read_tf(prefix)


def test_an_entry_without_a_crc_is_refused_as_tf_does(tmp_path):
    raw = torch.ones(2).numpy().tobytes()
    prefix = _write(tmp_path, [(b"a", _float_entry(raw, crc=False))], data=raw)
    with pytest.raises(ValueError, match=r"variable 'a': the data fail their CRC-32C check"):
        ckpt.read_tf(prefix)
    assert torch.equal(ckpt.read_tf(prefix, verify_checksums=False)["a"], torch.ones(2))


@pytest.mark.parametrize("field, value", [(1, b"x"), (5, b"x"), (2, 7), (6, b"x")])
def test_a_mistyped_entry_field_names_the_file(tmp_path, field, value):
    raw = torch.ones(2).numpy().tobytes()
    fields = {1: 1, 2: encode([(2, encode([(1, 2)]))]), 4: 0, 5: 8, 6: mask(crc32c(raw))}
    fields[field] = value
    entry = encode(sorted(fields.items()), fixed32=frozenset({6}) if field != 6 else frozenset())
    prefix = _write(tmp_path, [(b"a", entry)], data=raw)
    with pytest.raises(ValueError, match=rf"ck.index entry 'a': field {field} holds "
                                         rf"(bytes, not a number|a number, not bytes): damaged"):
        ckpt.read_tf(prefix)


def test_a_mistyped_header_field_names_the_file(tmp_path):
    prefix = str(tmp_path / "ck")
    Path(prefix + ".index").write_bytes(write_table([(b"", encode([(1, b"x")]))]))
    with pytest.raises(ValueError, match=r"ck.index header: field 1 holds bytes, not a number"):
        ckpt.read_tf(prefix)


def test_names_that_are_not_utf8_are_refused_not_merged(tmp_path):
    raw = torch.ones(1).numpy().tobytes()
    entry = _float_entry(raw)
    prefix = _write(tmp_path, [(b"a\xff", entry), (b"a\xfe", entry)], data=raw)
    with pytest.raises(ValueError, match=r"ck.index: the variable name b'a\\xfe' is not UTF-8"):
        ckpt.read_tf(prefix)


def _model_opt():
    model = torch.nn.Linear(2, 1)
    return model, trainop.GradientDescentOptimizer(0.1, params=model.parameters())


NAMES = {"weight": ("w", ckpt.transpose), "bias": "b"}


def test_a_uint64_global_step_past_int64_is_a_value_error(tmp_path):
    model, opt = _model_opt()
    prefix = str(tmp_path / "ck")
    ckpt.save_tf(prefix, model, opt, names=NAMES)
    tensors = dict(ckpt.read_tf(prefix))
    tensors["global_step"] = torch.tensor([-1], dtype=torch.int64).view(torch.uint64)[0]
    ckpt.write_tf(prefix, tensors)
    before = opt.state_dict()["param_groups"][0]["non_slot"]["step"].clone()
    with pytest.raises(ValueError, match=r"Expected the global step 'global_step' in "
                                         r"\[0, 2\*\*62\].*got 18446744073709551615"):
        ckpt.load_tf(prefix, model, opt, names=NAMES)
    assert torch.equal(opt.param_groups[0]["non_slot"]["step"], before)


@pytest.mark.parametrize("step", [2**63, 2**62 + 1])
def test_save_tf_refuses_a_step_past_the_limit(tmp_path, step):
    model, opt = _model_opt()
    with pytest.raises(ValueError, match=rf"Expected `global_step` to be an integer in "
                                         rf"\[0, 2\*\*62\].*got {step}"):
        ckpt.save_tf(tmp_path / "ck", model, opt, names=NAMES, global_step=step)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("prefix", ["", "run/", "."])
def test_a_prefix_naming_no_file_is_refused(tmp_path, monkeypatch, prefix):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"Expected the checkpoint prefix to name a file"):
        ckpt.write_tf(prefix, {"a": torch.ones(1)})
    assert not list(tmp_path.iterdir())


def test_a_save_failing_half_way_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    prefix = str(tmp_path / "ck")
    ckpt.write_tf(prefix, {"a": torch.ones(3)})
    written = switch._write_synced

    def fail_on_index(file, content):
        if ".index" in file:
            raise OSError(28, "No space left on device")
        written(file, content)

    monkeypatch.setattr(switch, "_write_synced", fail_on_index)
    with pytest.raises(OSError, match="No space left"):
        ckpt.write_tf(prefix, {"a": torch.zeros(5)})
    assert torch.equal(ckpt.read_tf(prefix)["a"], torch.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "ck" + DATA, "ck.index"]


@pytest.mark.parametrize("dims,message", [
    # TF's TensorShape::MaxDimensions is 254; 40,000 dims of 2**62 made the element count a
    # 2.5-million-bit product (seconds per entry, quadratic in the dims)
    ([2] * 255, r"the shape has 255 dimensions, more than TF's 254: damaged"),
    ([1 << 62] * 40_000, r"the shape has 40,000 dimensions, more than TF's 254: damaged"),
    ([1 << 62] * 3, r"the shape \(4611686018427387904, 4611686018427387904, "
                    r"4611686018427387904\) has more than 2\*\*63 - 1 elements "
                    r"\(TF's limit\): damaged"),
])
def test_a_shape_beyond_tf_rank_or_element_limits_is_refused_fast(tmp_path, dims, message):
    shape = b"".join(encode([(2, encode([(1, n)]))]) for n in dims)
    prefix = _write(tmp_path, [(b"a", encode([(1, 1), (2, shape), (4, 0), (5, 4)]))], b"\0" * 4)
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"ck.index entry 'a': " + message):
        ckpt.read_tf(prefix)
    assert time.monotonic() - start < 30  # a backstop only (#39)
