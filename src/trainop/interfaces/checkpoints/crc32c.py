"""CRC-32C (Castagnoli), the checksum of TF's checkpoint files, without TensorFlow.

TF checks two of them when it restores: each table block of the ``.index`` file carries the
masked CRC of its bytes, and each tensor entry the masked CRC of the tensor's bytes in the
``.data-*`` shard. ``crc32c(data)`` is the standard CRC-32C (reflected polynomial 0x82F63B78,
initial value and final XOR 0xFFFFFFFF; ``crc32c(b"123456789") == 0xE3069283``); ``mask`` is
LevelDB's rotation plus constant that TF stores.

Long inputs are cut into lanes whose CRCs numpy computes side by side (one table look-up per
byte position for all lanes at once); the lanes' CRCs are then joined with the CRC's linearity:
``crc(A + B) = shift(crc(A), len(B)) ^ crc(B)`` for register values started at zero, where
``shift`` (feeding zero bytes) is a 32x32 matrix over GF(2).
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["crc32c", "mask", "unmask"]

_POLY = 0x82F63B78
_LANE_MIN = 4096  # below this many bytes per lane, the plain loop is as fast


def _make_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (_POLY if crc & 1 else 0)
        table.append(crc)
    return table


_TABLE = _make_table()
_NP_TABLE = np.array(_TABLE, dtype=np.uint32)


def _raw(register: int, data: bytes | memoryview) -> int:
    """The register after feeding ``data`` (no initial value, no final XOR)."""
    table = _TABLE
    for byte in bytes(data):
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


def _apply(matrix: tuple[int, ...], vector: int) -> int:
    out, bit = 0, 0
    while vector:
        if vector & 1:
            out ^= matrix[bit]
        vector >>= 1
        bit += 1
    return out


def _square(matrix: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_apply(matrix, column) for column in matrix)


@functools.cache
def _shift(nbytes: int) -> tuple[int, ...]:
    """The matrix (as 32 columns) that feeds ``nbytes`` zero bytes to a register."""
    one_bit = [_POLY] + [1 << (i - 1) for i in range(1, 32)]  # one zero bit
    power = tuple(one_bit)
    for _ in range(3):  # eight zero bits: one zero byte
        power = _square(power)
    result = tuple(1 << i for i in range(32))
    while nbytes:
        if nbytes & 1:
            result = tuple(_apply(power, column) for column in result)
        nbytes >>= 1
        if nbytes:
            power = _square(power)
    return result


def _raw_lanes(data: memoryview) -> int:
    """``_raw(0, data)`` for long inputs: numpy lanes, joined by shifting."""
    n = len(data)
    lanes = min(4096, n // _LANE_MIN)
    width = n // lanes
    block = np.frombuffer(data[:lanes * width], dtype=np.uint8).reshape(lanes, width)
    columns = np.ascontiguousarray(block.T)
    register = np.zeros(lanes, dtype=np.uint32)
    for column in columns:
        register = _NP_TABLE[(register ^ column) & 0xFF] ^ (register >> 8)
    shift = _shift(width)
    joined = 0
    for value in register.tolist():
        joined = _apply(shift, joined) ^ value
    return _raw(joined, data[lanes * width:])


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32C of ``data``."""
    view = memoryview(data).cast("B")
    n = len(view)
    if n < 2 * _LANE_MIN:
        return _raw(0xFFFFFFFF, view) ^ 0xFFFFFFFF
    # crc = raw(init = ~0) ^ ~0 = shift(~0, n) ^ raw(init = 0) ^ ~0
    return _apply(_shift(n), 0xFFFFFFFF) ^ _raw_lanes(view) ^ 0xFFFFFFFF


_MASK_DELTA = 0xA282EAD8


def mask(crc: int) -> int:
    """LevelDB's masked CRC, as TF stores it."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
