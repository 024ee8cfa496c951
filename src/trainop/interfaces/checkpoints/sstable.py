"""TF's table file (LevelDB's SSTable), as the ``.index`` file of a checkpoint uses it.

Layout: data blocks, a meta-index block, an index block, then a 48-byte footer (the meta-index
and index block handles as varint pairs ``(offset, size)``, zero padding to 40 bytes, and the
magic number ``0xdb4775248b80fb57`` as little-endian fixed64). Every block is followed by a
5-byte trailer: its compression type (0: none, as TF writes checkpoints; 1: snappy, not
supported here) and the masked CRC-32C of the block plus that type byte.

A block holds entries ``(shared key bytes varint, unshared varint, value length varint,
unshared key bytes, value)`` with the key stored as a suffix of the previous one, then the
restart offsets (fixed32 each) and their count (fixed32). The index block maps a key at or
after each data block's last key to that block's handle.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from trainop.interfaces.checkpoints.crc32c import crc32c, mask, unmask
from trainop.interfaces.checkpoints.wire import CorruptCheckpoint, decode_varint, encode_varint

__all__ = ["read_table", "write_table"]

MAGIC = 0xDB4775248B80FB57
FOOTER = 48
_RESTART_INTERVAL = 16


def _handle(data: bytes, pos: int, what: str) -> tuple[tuple[int, int], int]:
    offset, pos = decode_varint(data, pos, what)
    size, pos = decode_varint(data, pos, what)
    return (offset, size), pos


def _block(data: bytes, handle: tuple[int, int], what: str) -> bytes:
    offset, size = handle
    if offset + size + 5 > len(data):
        raise CorruptCheckpoint(f"{what}: block at {offset} (+{size} bytes) runs past the end "
                                f"of the file ({len(data)} bytes): truncated")
    contents = data[offset:offset + size]
    kind = data[offset + size]
    stored = unmask(struct.unpack_from("<I", data, offset + size + 1)[0])
    if crc32c(data[offset:offset + size + 1]) != stored:
        raise CorruptCheckpoint(f"{what}: block at {offset} fails its CRC-32C check: damaged")
    if kind != 0:
        raise CorruptCheckpoint(f"{what}: block at {offset} is compressed (type {kind}); only "
                                f"uncompressed tables, as TF writes checkpoints, are supported")
    return contents


def _entries(block: bytes, what: str) -> Iterator[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise CorruptCheckpoint(f"{what}: a block of {len(block)} bytes is too short")
    restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end = len(block) - 4 - 4 * restarts
    if end < 0:
        raise CorruptCheckpoint(f"{what}: a block claims {restarts} restart points")
    pos, key, key_bytes = 0, b"", 0
    while pos < end:
        shared, pos = decode_varint(block, pos, what)
        unshared, pos = decode_varint(block, pos, what)
        size, pos = decode_varint(block, pos, what)
        if shared > len(key) or pos + unshared + size > end:
            raise CorruptCheckpoint(f"{what}: a block entry runs past its block")
        key = key[:shared] + block[pos:pos + unshared]
        # TF stores a key whole at least every _RESTART_INTERVAL entries, so a block's keys
        # unpack to at most that many times its length; more is a hostile chain of shared
        # prefixes (memory quadratic in the block)
        key_bytes += len(key)
        if key_bytes > _RESTART_INTERVAL * len(block):
            raise CorruptCheckpoint(f"{what}: a block of {len(block)} bytes unpacks to more "
                                    f"than {_RESTART_INTERVAL} times as many key bytes: "
                                    f"damaged")
        pos += unshared
        yield key, block[pos:pos + size]
        pos += size


def read_table(data: bytes, what: str) -> list[tuple[bytes, bytes]]:
    """Every ``(key, value)`` of the table in ``data`` (the bytes of the whole file), in key
    order."""
    if len(data) < FOOTER:
        raise CorruptCheckpoint(f"{what}: {len(data)} bytes, shorter than a table footer "
                                f"({FOOTER}): truncated")
    footer = data[-FOOTER:]
    if struct.unpack_from("<Q", footer, 40)[0] != MAGIC:
        raise CorruptCheckpoint(f"{what}: no table magic number at the end: truncated or not "
                                f"a TF checkpoint index")
    _, pos = _handle(footer, 0, what)
    index_handle, _ = _handle(footer, pos, what)
    out, end = [], 0
    for _, value in _entries(_block(data, index_handle, what), what):
        handle, _ = _handle(value, 0, what)
        # data blocks lie in file order, each once: a hostile index naming one block many
        # times would otherwise cost a CRC pass and a copy of its entries per mention
        if handle[0] < end:
            raise CorruptCheckpoint(f"{what}: data block at {handle[0]} overlaps or precedes "
                                    f"the previous one (which ends at {end}): damaged")
        out.extend(_entries(_block(data, handle, what), what))
        end = handle[0] + handle[1] + 5
    keys = [k for k, _ in out]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        raise CorruptCheckpoint(f"{what}: keys out of order: damaged")
    return out


def _build_block(entries: list[tuple[bytes, bytes]]) -> bytes:
    out, restarts, previous = bytearray(), [], b""
    for i, (key, value) in enumerate(entries):
        shared = 0
        if i % _RESTART_INTERVAL == 0:
            restarts.append(len(out))
        else:
            limit = min(len(previous), len(key))
            while shared < limit and previous[shared] == key[shared]:
                shared += 1
        out += (encode_varint(shared) + encode_varint(len(key) - shared)
                + encode_varint(len(value)) + key[shared:] + value)
        previous = key
    restarts = restarts or [0]
    out += b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))
    return bytes(out)


def _append_block(out: bytearray, contents: bytes) -> bytes:
    """Append a block and its trailer; returns its encoded handle."""
    handle = encode_varint(len(out)) + encode_varint(len(contents))
    trailer = contents + b"\x00"
    out += trailer + struct.pack("<I", mask(crc32c(trailer)))
    return handle


def write_table(entries: list[tuple[bytes, bytes]], block_size: int = 4096) -> bytes:
    """The bytes of a table holding ``entries`` (sorted, distinct keys)."""
    out = bytearray()
    index = []
    start = 0
    while start < len(entries) or not index:
        stop, size = start, 0
        while stop < len(entries) and (stop == start or size < block_size):
            size += len(entries[stop][0]) + len(entries[stop][1]) + 8
            stop += 1
        chunk = entries[start:stop]
        handle = _append_block(out, _build_block(chunk))
        # the last key of the block is a valid separator (>= every key in it, < the next)
        index.append((chunk[-1][0] if chunk else b"", handle))
        start = stop
        if start >= len(entries):
            break
    meta = _append_block(out, _build_block([]))
    index_handle = _append_block(out, _build_block(index))
    footer = meta + index_handle
    out += footer + b"\x00" * (40 - len(footer)) + struct.pack("<Q", MAGIC)
    return bytes(out)
