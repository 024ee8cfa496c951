"""The protocol-buffer wire format, by hand: the few messages of a TF checkpoint index.

A message is a sequence of fields ``(key varint, value)``, the key being
``field_number << 3 | wire_type``; wire types used here: 0 varint, 1 fixed 64-bit,
2 length-delimited (bytes, nested messages, packed repeated fields), 5 fixed 32-bit.
``parse`` returns ``{field_number: [values]}`` (ints for varint/fixed, bytes for
length-delimited), ``encode`` writes fields back in the order given.

Damaged input raises ``CorruptCheckpoint`` (a ``ValueError``) naming what was being read.
"""

from __future__ import annotations

import struct

__all__ = ["CorruptCheckpoint", "decode_varint", "encode", "encode_varint", "parse",
           "signed64"]


class CorruptCheckpoint(ValueError):
    """A TF checkpoint file that cannot be read as TF wrote it (truncated, damaged)."""


def decode_varint(data: bytes | memoryview, pos: int, what: str) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    result, shift = 0, 0
    while True:
        if pos >= len(data):
            raise CorruptCheckpoint(f"{what}: a varint runs past the end of its data")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CorruptCheckpoint(f"{what}: a varint is longer than 10 bytes")


def encode_varint(value: int) -> bytes:
    if value < 0:
        value &= (1 << 64) - 1  # int64 negatives: two's complement, 10 bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def signed64(value: int) -> int:
    """A varint read as int64 (negative numbers are 10-byte two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def parse(data: bytes | memoryview, what: str) -> dict[int, list[int | bytes]]:
    """The fields of one message."""
    fields: dict[int, list[int | bytes]] = {}
    pos, end = 0, len(data)
    while pos < end:
        key, pos = decode_varint(data, pos, what)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = decode_varint(data, pos, what)
        elif wire_type in (1, 5):
            size = 8 if wire_type == 1 else 4
            if pos + size > end:
                raise CorruptCheckpoint(f"{what}: field {number} runs past the end")
            value = int.from_bytes(bytes(data[pos:pos + size]), "little")
            pos += size
        elif wire_type == 2:
            size, pos = decode_varint(data, pos, what)
            if pos + size > end:
                raise CorruptCheckpoint(f"{what}: field {number} ({size} bytes) runs past the "
                                        f"end")
            value = bytes(data[pos:pos + size])
            pos += size
        else:
            raise CorruptCheckpoint(f"{what}: field {number} has the unknown wire type "
                                    f"{wire_type}")
        fields.setdefault(number, []).append(value)
    return fields


def encode(fields: list[tuple[int, int | bytes]], fixed32: frozenset[int] = frozenset()) -> bytes:
    """A message from ``(field_number, value)`` pairs: ints as varints (or fixed 32-bit for the
    numbers in ``fixed32``), bytes as length-delimited."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, bytes):
            out += encode_varint(number << 3 | 2) + encode_varint(len(value)) + value
        elif number in fixed32:
            out += encode_varint(number << 3 | 5) + struct.pack("<I", value)
        else:
            out += encode_varint(number << 3) + encode_varint(value)
    return bytes(out)
