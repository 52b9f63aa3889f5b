"""dm_env_rpc's DataTypes and numpy's dtypes: which payload field carries which, and how.

>>> data_type(np.float32) == pb.FLOAT, np_dtype(pb.UINT8)
(True, dtype('uint8'))
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dmrpc_gym.protocol.wire import pb

__all__ = ["DTYPES", "DataTypeInfo", "BY_DATA_TYPE", "BY_FIELD_NAME", "info_for", "np_dtype", "data_type",
           "data_type_name", "BY_WIRE_DTYPE", "MEMORY", "VARINT", "STRING_KIND", "PROTO_KIND", "CACHE_SIZE"]

_SUPPORTED = ("float32, float64, int8, int32, int64, uint8, uint32, uint64, bool, "
              "str, protobuf messages")

# How a payload travels: the array's memory as is (bytes fields, packed
# fixed-width and bool fields), varints, or through the message API.
MEMORY, VARINT, STRING_KIND, PROTO_KIND = "memory", "varint", "string", "proto"


class DataTypeInfo:
    """What the codec needs to know about one DataType."""

    __slots__ = ("dt", "name", "dtype", "wire", "kind", "tag", "heads")

    def __init__(self, dt: int, name: str, number: int, dtype: Any, wire_dtype: Any, kind: str):
        self.dt = dt
        self.name = name                      # payload field name, e.g. "floats"
        self.dtype = np.dtype(dtype)          # what unpacking gives
        self.wire = np.dtype(wire_dtype)      # what packing encodes from
        self.kind = kind
        self.tag = bytes(((number << 3) | 2,))  # length-delimited payload field
        self.heads: dict[tuple[int, ...], bytes] = {}  # shape -> wire header (memory kinds)


BY_DATA_TYPE: dict[int, DataTypeInfo] = {c.dt: c for c in (
    DataTypeInfo(pb.FLOAT, "floats", 1, np.float32, "<f4", MEMORY),
    DataTypeInfo(pb.DOUBLE, "doubles", 2, np.float64, "<f8", MEMORY),
    DataTypeInfo(pb.INT8, "int8s", 3, np.int8, np.int8, MEMORY),
    DataTypeInfo(pb.INT32, "int32s", 4, np.int32, np.int32, VARINT),
    DataTypeInfo(pb.INT64, "int64s", 5, np.int64, np.int64, VARINT),
    DataTypeInfo(pb.UINT8, "uint8s", 6, np.uint8, np.uint8, MEMORY),
    DataTypeInfo(pb.UINT32, "uint32s", 7, np.uint32, np.uint32, VARINT),
    DataTypeInfo(pb.UINT64, "uint64s", 8, np.uint64, np.uint64, VARINT),
    DataTypeInfo(pb.BOOL, "bools", 9, np.bool_, np.bool_, MEMORY),
    DataTypeInfo(pb.STRING, "strings", 10, np.str_, np.str_, STRING_KIND),
    DataTypeInfo(pb.PROTO, "protos", 11, object, object, PROTO_KIND),
)}

#: DataType -> the numpy dtype its values unpack to.
DTYPES: dict[int, np.dtype] = {dt: c.dtype for dt, c in BY_DATA_TYPE.items()}

# numpy dtype -> codec, for arrays that pack with no conversion at all.
BY_WIRE_DTYPE: dict[np.dtype, DataTypeInfo] = {
    c.wire: c for c in BY_DATA_TYPE.values() if c.kind in (MEMORY, VARINT)}
# Any dtype argument seen so far (DataType or numpy dtype-like) -> codec.
_BY_ARG: dict[Any, DataTypeInfo] = dict(BY_DATA_TYPE)
BY_FIELD_NAME: dict[str, DataTypeInfo] = {c.name: c for c in BY_DATA_TYPE.values()}
CACHE_SIZE = 512


def data_type_name(dt: int) -> str:
    """``pb.FLOAT`` -> ``'FLOAT'``; unknown values print as their number."""
    try:
        return pb.DataType.Name(dt)
    except ValueError:
        return str(dt)


def np_dtype(dt: int) -> np.dtype:
    """The numpy dtype for a DataType; ``ValueError`` for INVALID or unknown values."""
    try:
        return DTYPES[dt]
    except (KeyError, TypeError):
        raise ValueError(f"DataType {data_type_name(dt)} has no numpy dtype") from None


def data_type(dtype: Any) -> int:
    """The DataType for a numpy dtype; ``TypeError`` naming it when there is none.

    Object arrays have none either: they pack as PROTO only when every element
    is a protobuf message (see :func:`pack`).

    >>> data_type(np.float32) == pb.FLOAT
    True
    >>> data_type(np.float16)
    Traceback (most recent call last):
    ...
    TypeError: numpy dtype float16 has no dm_env_rpc DataType (supported: float32, float64, int8, int32, int64, uint8, uint32, uint64, bool, str, protobuf messages)
    """
    dtype = np.dtype(dtype)
    found = (BY_WIRE_DTYPE.get(dtype) or BY_WIRE_DTYPE.get(dtype.newbyteorder("<"))
             or BY_WIRE_DTYPE.get(dtype.newbyteorder("=")))    # any byte order
    if found is not None:
        return found.dt
    if dtype.kind == "U":
        return pb.STRING
    raise TypeError(f"numpy dtype {dtype} has no dm_env_rpc DataType (supported: {_SUPPORTED})")


def info_for(dtype: Any) -> DataTypeInfo:
    """The codec for a ``dtype`` argument: a DataType, or a numpy dtype (object for PROTO)."""
    try:
        return _BY_ARG[dtype]
    except (KeyError, TypeError):   # TypeError: unhashable, looked up without the cache
        pass
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        np_dtype(int(dtype))        # raises ValueError naming the DataType
    np_type = np.dtype(dtype)
    found = BY_DATA_TYPE[pb.PROTO if np_type == object else data_type(np_type)]
    try:
        if len(_BY_ARG) < CACHE_SIZE:
            _BY_ARG[dtype] = found
    except TypeError:
        pass
    return found
