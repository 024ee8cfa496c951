"""What a TF checkpoint's index may make trainop read is bounded by its data files' real sizes
(issue #40). Sparse data files (``truncate``) stand for large ones without using the disk."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import trainop
import trainop.checkpoints as ckpt
from trainop.interfaces.checkpoints.crc32c import crc32c, mask
from trainop.interfaces.checkpoints.sstable import write_table
from trainop.interfaces.checkpoints.wire import encode

DATA = ".data-00000-of-00001"
FLOAT = 1  # TF's DT_FLOAT


def _index(prefix, entries):
    """An index whose entries are ``(name, element count, offset, crc)`` of float32 vectors."""
    header = encode([(1, 1), (3, encode([(1, 1)]))])
    rows = [(name.encode(), encode([(1, FLOAT), (2, encode([(2, encode([(1, n)]))])),
                                    (4, offset), (5, 4 * n), (6, crc)], fixed32=frozenset({6})))
            for name, n, offset, crc in entries]
    with open(f"{prefix}.index", "wb") as f:
        f.write(write_table([(b"", header), *rows]))


def test_entries_over_one_region_are_refused_before_a_byte_is_read(tmp_path):
    """Forty entries naming the same region of the data file (a 1.3 KB index over 256 MiB
    made trainop read, check and hold 40 copies: 10 GiB); here 4 MiB, with valid CRCs, so
    that without the bound every entry was read."""
    prefix = str(tmp_path / "ck")
    n = 1 << 20
    with open(prefix + DATA, "wb") as f:
        f.truncate(4 * n)  # sparse zeros
    crc = mask(crc32c(bytes(4 * n)))
    _index(prefix, [(f"v{i:02d}", n, 0, crc) for i in range(40)])
    with pytest.raises(ValueError, match=r"its index names 167,772,160 bytes of '.*ck\.data-"
                                         r"00000-of-00001', which holds 4,194,304: entries "
                                         r"overlap \(TF's writer never writes them\): damaged"):
        ckpt.read_tf(prefix)
    model = torch.nn.Linear(1, 1)
    with pytest.raises(ValueError, match=r"entries overlap"):
        ckpt.load_tf(prefix, model, names={"weight": "v00", "bias": "v01"})


SCRIPT = textwrap.dedent("""
    import resource, sys
    import trainop.checkpoints as ckpt
    limit = 3 << 30  # the address space: trainop and torch fit, the shard does not
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        ckpt.read_tf(sys.argv[1])
    except MemoryError as error:
        print("MemoryError:", error)
""")


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and sparse files: Linux")
@pytest.mark.parametrize("gib", [12, 64])
def test_a_shard_too_large_for_memory_is_named(tmp_path, gib):
    """A sparse data shard of 12 or 64 GiB whose one entry matches its size: a bare
    MemoryError before; now the error names the variable, the file and the size."""
    prefix = str(tmp_path / "ck")
    n = (gib << 30) // 4
    with open(prefix + DATA, "wb") as f:
        f.truncate(4 * n)
    _index(prefix, [("big", n, 0, 0)])
    src = os.path.abspath(os.path.join(os.path.dirname(trainop.__file__), os.pardir))
    done = subprocess.run([sys.executable, "-c", SCRIPT, prefix], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": src})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == (
        f"MemoryError: TF checkpoint {prefix!r}, variable 'big': {4 * n:,} bytes of "
        f"{prefix + DATA!r} do not fit in memory")
