"""A TensorSpec bound (``min`` / ``max``) as an array, in today's form and in dm_env_rpc's pre-1.1 one.

dm_env_rpc 1.1.0 replaced the scalar fields 1-8 of ``TensorSpec.Value`` (``float``,
``double``, ``int8``, ``int32``, ``int64``, ``uint8``, ``uint32``, ``uint64``) with the
arrays 9-16 and reserved the old numbers. Older servers still send them; our messages
keep them as unknown fields, and they are read here as a one-element bound.

>>> from dmrpc_gym.protocol.wire import pb
>>> bound_values(pb.TensorSpec.Value(int32s=pb.Tensor.Int32Array(array=[-1, 2])))
array([-1,  2], dtype=int32)
>>> old = pb.TensorSpec.Value()
>>> old.MergeFromString(bytes([0x20, 0x7F]))   # field 4 (int32), varint 127: a pre-1.1 bound
2
>>> bound_values(old)
array([127], dtype=int32)
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np

from dmrpc_gym.protocol import tensors

__all__ = ["bound_values"]

#: Pre-1.1 scalar field number -> (its dtype, its protobuf wire type).
_LEGACY = {1: (np.float32, 5), 2: (np.float64, 1), 3: (np.int8, 0), 4: (np.int32, 0), 5: (np.int64, 0),
           6: (np.uint8, 0), 7: (np.uint32, 0), 8: (np.uint64, 0)}


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("a truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _legacy(raw: bytes) -> np.ndarray | None:
    """The last pre-1.1 scalar in ``raw`` (a Value holding only unknown fields), as a 1-element array."""
    found, pos = None, 0
    while pos < len(raw):
        key, pos = _varint(raw, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(raw, pos)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = raw[pos:pos + size], pos + size
        elif wire == 2:
            size, pos = _varint(raw, pos)
            pos += size
            continue
        else:
            raise ValueError(f"a field of wire type {wire}")
        if number not in _LEGACY or _LEGACY[number][1] != wire:
            continue
        dtype = np.dtype(_LEGACY[number][0])
        if wire == 0:
            if dtype.kind == "i" and value >= 1 << 63:       # negative: two's complement in 64 bits
                value -= 1 << 64
            found = np.array([value], dtype)
        else:
            found = np.array(struct.unpack("<f" if wire == 5 else "<d", value), dtype)
    return found


def bound_values(value: Any) -> np.ndarray | None:
    """The bound ``value`` holds as a flat array (one element, or one per element of the
    shape), or None when it holds none; a pre-1.1 scalar bound counts."""
    if value.WhichOneof("payload") is not None:
        return tensors.unpack_flat(value)
    raw = value.SerializeToString()          # nothing known is set: only unknown fields remain
    if not raw:
        return None
    try:
        return _legacy(raw)
    except ValueError:
        return None
