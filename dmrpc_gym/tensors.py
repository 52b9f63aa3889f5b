"""numpy <-> dm_env_rpc ``Tensor``: every DataType, broadcast, one -1 dimension.

The fixed-width payloads (float, double, int8, uint8, bool) and the varint
integer payloads are encoded straight to wire bytes with numpy and parsed by
protobuf in one call, instead of element by element. Unpacking relies on
protobuf's buffer-speed sequence conversion. Every unpacked array is fresh,
writable and owned by the caller.

>>> t = pack(np.arange(6, dtype=np.float32).reshape(2, 3))
>>> t.WhichOneof("payload"), list(t.shape)
('floats', [2, 3])
>>> unpack(t)
array([[0., 1., 2.],
       [3., 4., 5.]], dtype=float32)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from google.protobuf import any_pb2
from google.protobuf import message as _message

from dmrpc_gym.wire import pb

__all__ = [
    "DTYPES", "np_dtype", "data_type", "data_type_name",
    "pack", "pack_into", "unpack", "unpack_flat", "pack_flat_into", "tensor_bytes",
    "resolve_shape",
]

# DataType -> (payload field name, Tensor field number, numpy dtype).
_PAYLOADS = {
    pb.FLOAT: ("floats", 1, np.dtype(np.float32)),
    pb.DOUBLE: ("doubles", 2, np.dtype(np.float64)),
    pb.INT8: ("int8s", 3, np.dtype(np.int8)),
    pb.INT32: ("int32s", 4, np.dtype(np.int32)),
    pb.INT64: ("int64s", 5, np.dtype(np.int64)),
    pb.UINT8: ("uint8s", 6, np.dtype(np.uint8)),
    pb.UINT32: ("uint32s", 7, np.dtype(np.uint32)),
    pb.UINT64: ("uint64s", 8, np.dtype(np.uint64)),
    pb.BOOL: ("bools", 9, np.dtype(np.bool_)),
    pb.STRING: ("strings", 10, np.dtype(np.str_)),
    pb.PROTO: ("protos", 11, np.dtype(object)),
}

#: DataType -> the numpy dtype its values unpack to.
DTYPES: dict[int, np.dtype] = {k: v[2] for k, v in _PAYLOADS.items()}
_BY_NAME = {v[0]: (k, v[2]) for k, v in _PAYLOADS.items()}
_BY_KIND = {np.dtype(d): k for k, d in DTYPES.items() if k not in (pb.STRING, pb.PROTO)}
_VARINT = {pb.INT32, pb.INT64, pb.UINT32, pb.UINT64}
_RAW = {pb.INT8, pb.UINT8}          # `bytes array = 1`
_FIXED = {pb.FLOAT, pb.DOUBLE}      # packed little-endian
_SUPPORTED = "float32, float64, int8, int32, int64, uint8, uint32, uint64, bool, str, protobuf messages"


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
    except KeyError:
        raise ValueError(f"DataType {data_type_name(dt)} has no numpy dtype") from None


def data_type(dtype: Any) -> int:
    """The DataType for a numpy dtype; ``TypeError`` naming it when there is none.

    >>> data_type(np.float32) == pb.FLOAT
    True
    >>> data_type(np.float16)
    Traceback (most recent call last):
    ...
    TypeError: numpy dtype float16 has no dm_env_rpc DataType (supported: float32, float64, int8, int32, int64, uint8, uint32, uint64, bool, str, protobuf messages)
    """
    dtype = np.dtype(dtype)
    found = _BY_KIND.get(dtype)
    if found is not None:
        return found
    if dtype.kind == "U":
        return pb.STRING
    raise TypeError(f"numpy dtype {dtype} has no dm_env_rpc DataType (supported: {_SUPPORTED})")


# -- wire encoding -----------------------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, body: bytes) -> bytes:
    """A length-delimited field: tag, length, body."""
    return _varint((number << 3) | 2) + _varint(len(body)) + body


def _varints(values: np.ndarray) -> bytes:
    """Encode integers as protobuf varints, vectorised (negatives as 10 bytes)."""
    v = values.astype(np.int64, copy=False).view(np.uint64) if values.dtype.kind == "i" \
        else values.astype(np.uint64, copy=False)
    if v.size == 0:
        return b""
    # Bytes per element: 1 + one more for every further 7 significant bits.
    nbytes = np.ones(v.shape, np.int64)
    rest = v >> np.uint64(7)
    groups = []
    shifted = v
    for _ in range(10):
        groups.append((shifted & np.uint64(0x7F)).astype(np.uint8))
        shifted = shifted >> np.uint64(7)
    while rest.any():
        more = rest != 0
        nbytes += more
        rest = rest >> np.uint64(7)
    width = int(nbytes.max())
    table = np.stack(groups[:width], axis=1)
    col = np.arange(width)
    table[col[None, :] < (nbytes[:, None] - 1)] |= 0x80
    return table[col[None, :] < nbytes[:, None]].tobytes()


def _payload_body(flat: np.ndarray, dt: int) -> bytes:
    """The body of an ``*Array`` message (its ``array = 1`` field) for numeric/bool data."""
    if dt in _RAW:
        raw = flat.tobytes()
    elif dt in _FIXED:
        raw = flat.astype(flat.dtype.newbyteorder("<"), copy=False).tobytes()
    elif dt == pb.BOOL:
        raw = flat.view(np.uint8).tobytes()
    else:
        raw = _varints(flat)
    return _field(1, raw) if raw else b""


def _shape_field(shape: tuple[int, ...]) -> bytes:
    if not shape:
        return b""
    return _field(15, b"".join(_varint(d & 0xFFFFFFFFFFFFFFFF) for d in shape))


def _as_array(value: Any, dtype: Any = None) -> tuple[np.ndarray, int]:
    """``value`` as an array and its DataType, casting to ``dtype`` when given."""
    if isinstance(value, _message.Message):
        return np.array(value, dtype=object), pb.PROTO
    if dtype is not None:
        dt = dtype if isinstance(dtype, int) and not isinstance(dtype, bool) else data_type(dtype)
        target = np_dtype(dt)
        arr = np.asarray(value)
        if dt == pb.PROTO:
            return np.asarray(value, dtype=object), dt
        if dt == pb.STRING:
            if arr.dtype.kind != "U":
                raise TypeError(f"cannot pack {arr.dtype} values as STRING")
            return arr, dt
        if arr.dtype != target:
            if arr.dtype.kind in "OUS" or (arr.dtype.kind == "f" and target.kind in "iub"):
                cast = arr.astype(target) if arr.dtype.kind != "O" else None
                if cast is None or not np.array_equal(cast, arr):
                    raise TypeError(f"cannot pack {arr.dtype} values as {data_type_name(dt)} without loss")
                arr = cast
            else:
                arr = arr.astype(target)
        return arr, dt
    arr = np.asarray(value)
    if arr.dtype.kind == "O":
        if arr.size and all(isinstance(x, _message.Message) for x in arr.flat):
            return arr, pb.PROTO
        raise TypeError(f"cannot pack object arrays that are not protobuf messages (supported: {_SUPPORTED})")
    return arr, data_type(arr.dtype)


def tensor_bytes(value: Any, dtype: Any = None) -> bytes:
    """The serialized ``Tensor`` for ``value`` (numeric and bool payloads only).

    ``dtype`` (a numpy dtype or a DataType) casts the value first.
    """
    arr, dt = _as_array(value, dtype)
    if dt in (pb.STRING, pb.PROTO):
        raise TypeError("tensor_bytes takes numeric or bool values; use pack() for strings and protos")
    number = _PAYLOADS[dt][1]
    return _field(number, _payload_body(arr.ravel(), dt)) + _shape_field(arr.shape)


def pack_into(tensor: pb.Tensor, value: Any, dtype: Any = None) -> pb.Tensor:
    """Overwrite ``tensor`` (for example a map entry of a request) with ``value``."""
    arr, dt = _as_array(value, dtype)
    tensor.Clear()
    if dt == pb.STRING:
        tensor.strings.array.extend(arr.ravel().tolist())
        tensor.shape.extend(arr.shape)
    elif dt == pb.PROTO:
        protos = tensor.protos
        protos.SetInParent()
        for item in arr.ravel():
            packed = item if isinstance(item, any_pb2.Any) else _pack_any(item)
            protos.array.add().CopyFrom(packed)
        tensor.shape.extend(arr.shape)
    else:
        tensor.MergeFromString(_field(_PAYLOADS[dt][1], _payload_body(arr.ravel(), dt))
                               + _shape_field(arr.shape))
    return tensor


def pack(value: Any, dtype: Any = None) -> pb.Tensor:
    """Pack a scalar, array, nested list, string or protobuf message into a new ``Tensor``.

    >>> pack(np.uint8(7)).uint8s.array
    b'\\x07'
    >>> list(pack([[True], [False]]).shape)
    [2, 1]
    """
    return pack_into(pb.Tensor(), value, dtype)


def _pack_any(message: _message.Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def pack_flat_into(target: Any, flat: np.ndarray, dt: int) -> None:
    """Set the payload of ``target`` (a ``Tensor`` or ``TensorSpec.Value``) to ``flat``.

    Used for spec bounds, whose payload fields carry different numbers than a
    Tensor's, so the message API (by name) is used rather than wire bytes.
    """
    name = _PAYLOADS[dt][0]
    payload = getattr(target, name)
    payload.SetInParent()
    if dt in _RAW:
        payload.array = np.ascontiguousarray(flat, dtype=DTYPES[dt]).tobytes()
    else:
        payload.array.extend(np.asarray(flat, dtype=DTYPES[dt]).tolist())


# -- decoding ------------------------------------------------------------------

def unpack_flat(source: Any) -> np.ndarray:
    """The payload of a ``Tensor`` or ``TensorSpec.Value`` as a fresh 1-D array."""
    name = source.WhichOneof("payload")
    if name is None:
        raise ValueError("tensor has no payload (no data type is set)")
    dt, dtype = _BY_NAME[name]
    array = getattr(source, name).array
    if dt in _RAW:
        return np.frombuffer(array, dtype).copy()
    if dt == pb.STRING:
        return np.array(list(array), dtype=np.str_) if len(array) else np.array([], np.str_)
    if dt == pb.PROTO:
        out = np.empty(len(array), dtype=object)
        for i, item in enumerate(array):
            copy = any_pb2.Any()
            copy.CopyFrom(item)
            out[i] = copy
        return out
    return np.array(array, dtype=dtype)


def resolve_shape(shape: Any, size: int) -> tuple[int, ...]:
    """``shape`` with its -1 dimension (at most one) inferred from ``size`` elements.

    A single element broadcasts, so ``size == 1`` fits any shape (a -1 becomes 1).

    >>> resolve_shape([2, -1], 6)
    (2, 3)
    """
    shape = tuple(int(d) for d in shape)
    unknown = [i for i, d in enumerate(shape) if d < 0]
    if len(unknown) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"shape {list(shape)} may have at most one -1 dimension and no other negative size")
    known = math.prod(d for d in shape if d >= 0)
    if unknown:
        i = unknown[0]
        if size == 1 and known != 1:
            return shape[:i] + (1,) + shape[i + 1:]
        if (known == 0 and size != 0) or (known and size % known):
            raise ValueError(f"a payload of {size} elements does not fit shape {list(shape)}")
        return shape[:i] + (size // known if known else 0,) + shape[i + 1:]
    if size not in (known, 1):
        raise ValueError(f"a payload of {size} elements does not fit shape {list(shape)}")
    return shape


def unpack(tensor: pb.Tensor) -> np.ndarray:
    """A ``Tensor`` as a fresh, writable numpy array (0-d for a scalar).

    A single-element payload is broadcast to the whole shape.
    """
    flat = unpack_flat(tensor)
    shape = resolve_shape(tensor.shape, flat.size)
    if flat.size == math.prod(shape):
        return flat.reshape(shape)
    return np.full(shape, flat[0], dtype=flat.dtype)
