"""The protobuf wire format written by hand for the hot path: varints and Tensor payload framing.

protobuf's Python API adds repeated elements one by one; writing the bytes of
a whole Tensor and letting protobuf parse them in one call is far cheaper.
Memory-kind payloads (float, double, int8, uint8, bool) are the array's own
memory behind a cached header; varint payloads are encoded with vectorised numpy.

>>> varint(300)
b'\\xac\\x02'
"""
from __future__ import annotations

import numpy as np

from typing import Any, TypeVar

from dmrpc_gym.protocol.dtypes import CACHE_SIZE, MEMORY, DataTypeInfo

__all__ = ["varint", "varints", "MASK64", "ONE_BYTE", "array_field", "shape_bytes", "memory_head", "encode_tensor",
           "remember"]

_V = TypeVar("_V")

MASK64 = (1 << 64) - 1
ONE_BYTE = [bytes((i,)) for i in range(128)]


def varint(n: int) -> bytes:
    """One non-negative integer as a protobuf varint."""
    if n < 128:
        return ONE_BYTE[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Spreading the 7-bit groups of an unsigned word into its bytes: each step
# moves the upper half of every lane up by `shift` bits (28 -> 32, 14 -> 16, 7 -> 8).
# Narrower words use the last steps, with the masks cut to their width.
def _steps(word: type, steps: tuple[tuple[int, int, int], ...]) -> tuple:
    lanes = (1 << (8 * np.dtype(word).itemsize)) - 1
    return tuple((word(keep & lanes), word(move & lanes), word(shift)) for keep, move, shift in steps)


_STEPS64 = ((0x000000000FFFFFFF, 0x00FFFFFFF0000000, 4),
            (0x00003FFF00003FFF, 0x0FFFC0000FFFC000, 2),
            (0x007F007F007F007F, 0x3F803F803F803F80, 1))
# Fixed varint widths: (values below, word, little-endian word, steps, continuation bits).
_WIDTHS = (
    (1 << 14, np.uint16, "<u2", _steps(np.uint16, _STEPS64[2:]), np.uint16(0x0080)),
    (1 << 28, np.uint32, "<u4", _steps(np.uint32, _STEPS64[1:]), np.uint32(0x00808080)),
    (1 << 56, np.uint64, "<u8", _steps(np.uint64, _STEPS64), np.uint64(0x0080808080808080)),
)
_TEN_BYTES = np.dtype([("low", "<u8"), ("high", "<u2")])   # itemsize 10, packed
_SMALL = 16       # up to this many integers, Python beats numpy's per-call cost


def _spread(x: np.ndarray, steps: tuple) -> np.ndarray:
    """In place: the 7-bit groups of every element of ``x`` into its successive bytes."""
    moved = np.empty_like(x)
    for keep, move, shift in steps:
        np.bitwise_and(x, move, out=moved)
        np.left_shift(moved, shift, out=moved)
        np.bitwise_and(x, keep, out=x)
        np.bitwise_or(x, moved, out=x)
    return x


def varints(values: np.ndarray) -> bytes:
    """Integers as protobuf varints (negatives as their 10-byte two's complement).

    A few values are encoded minimally in Python. Longer arrays are encoded
    with numpy at one width for the whole array (1, 2, 4, 8 or 10 bytes),
    shorter values padded with continuation bytes: valid varints that every
    protobuf parser reads, and that a message re-serializes minimally.
    """
    if values.size <= _SMALL:
        return b"".join([varint(x & MASK64) for x in values.ravel().tolist()])
    if values.dtype.kind == "u":
        v = values.astype(np.uint64, copy=False).ravel()
    else:
        v = values.astype(np.int64, copy=False).ravel().view(np.uint64)
    top = int(v.max())
    if top < 128:
        return v.astype(np.uint8).tobytes()
    for limit, word, little, steps, more in _WIDTHS:
        if top < limit:
            x = _spread(v.astype(word), steps)
            x |= more
            return x.astype(little, copy=False).tobytes()
    # 10 bytes: the low 56 bits in a uint64 of 8 groups, the top 8 bits in 2 more.
    out = np.empty(v.size, _TEN_BYTES)
    low = _spread(v & np.uint64((1 << 56) - 1), _WIDTHS[2][3])
    low |= np.uint64(0x8080808080808080)
    out["low"] = low
    top8 = (v >> np.uint64(56)).astype(np.uint16)
    high = top8 >> np.uint16(7)
    high <<= np.uint16(8)
    top8 &= np.uint16(0x7F)
    high |= top8
    high |= np.uint16(0x80)
    out["high"] = high
    return out.tobytes()


def array_field(nbytes: int) -> bytes:
    """Tag and length of a payload's ``array = 1`` field (omitted when empty, as protobuf does)."""
    return b"\x0a" + varint(nbytes) if nbytes else b""


def remember(memo: dict, key: Any, value: _V, limit: int = CACHE_SIZE) -> _V:
    """``memo[key] = value`` in a memo of at most ``limit`` entries, emptied whole when full (a stream of
    keys never seen twice costs ``limit`` entries, not memory without end); returns ``value``.

    >>> memo = {}
    >>> [remember(memo, k, k * k, limit=2) for k in range(3)], memo
    ([0, 1, 4], {2: 4})
    """
    if len(memo) >= limit:
        memo.clear()
    memo[key] = value
    return value


_SHAPES: dict[tuple[int, ...], bytes] = {}


def shape_bytes(shape: tuple[int, ...]) -> bytes:
    """The ``shape = 15`` field (packed int32) for an array's shape; cached."""
    found = _SHAPES.get(shape)
    if found is not None:
        return found
    if any(d > 0x7FFFFFFF for d in shape):
        raise ValueError(f"shape {list(shape)} does not fit a Tensor (dimensions are int32)")
    body = b"".join(varint(d) for d in shape)
    return remember(_SHAPES, shape, b"\x7a" + varint(len(body)) + body if shape else b"")


def memory_head(c: DataTypeInfo, shape: tuple[int, ...], nbytes: int) -> bytes:
    """Everything of a memory-kind Tensor before its data: shape, payload tag, lengths."""
    inner = array_field(nbytes)
    return remember(c.heads, shape, shape_bytes(shape) + c.tag + varint(len(inner) + nbytes) + inner)


def encode_tensor(arr: np.ndarray, c: DataTypeInfo) -> bytes:
    """The wire bytes of a Tensor holding ``arr`` (already in ``c.wire`` dtype)."""
    if c.kind is MEMORY:
        head = c.heads.get(arr.shape)
        if head is None:
            head = memory_head(c, arr.shape, arr.nbytes)
        return head + (arr.data if arr.flags.c_contiguous else arr.tobytes())
    body = varints(arr)
    inner = array_field(len(body))
    return b"".join((shape_bytes(arr.shape), c.tag, varint(len(inner) + len(body)), inner, body))
