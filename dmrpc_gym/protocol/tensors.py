"""numpy <-> dm_env_rpc ``Tensor``: every DataType, broadcast, one -1 dimension.

Packing writes wire bytes and lets protobuf parse them in one call, instead
of adding elements one by one: float, double, int8, uint8 and bool payloads
are the array's own memory behind a cached header; the varint integer
payloads are encoded with vectorised numpy. Unpacking uses protobuf's
buffer-speed conversion of repeated fields (or ``np.fromiter`` for a few
elements, where that conversion's fixed cost dominates). Every unpacked
array is fresh, writable and owned by the caller: it shares no memory with
the message.

>>> t = pack(np.arange(6, dtype=np.float32).reshape(2, 3))
>>> t.WhichOneof("payload"), list(t.shape)
('floats', [2, 3])
>>> unpack(t)
array([[0., 1., 2.],
       [3., 4., 5.]], dtype=float32)
"""
from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
from google.protobuf import any_pb2
from google.protobuf import message as _message

from dmrpc_gym.protocol import wire
from dmrpc_gym.protocol.dtypes import (BY_DATA_TYPE, BY_FIELD_NAME, BY_WIRE_DTYPE, DTYPES, MEMORY, PROTO_KIND,
                                       STRING_KIND, VARINT, DataTypeInfo, data_type, data_type_name, info_for,
                                       np_dtype)
from dmrpc_gym.protocol.protowire import (MASK64, ONE_BYTE, array_field, encode_tensor, memory_head, shape_bytes,
                                          varint, varints)
from dmrpc_gym.protocol.shapes import MAX_TENSOR_BYTES, check_shape, element_limit, full_shape, resolve_shape
from dmrpc_gym.protocol.wire import pb

__all__ = [
    "DTYPES", "np_dtype", "data_type", "data_type_name",
    "pack", "pack_into", "unpack", "unpack_flat", "pack_flat_into", "tensor_bytes",
    "resolve_shape", "shaped", "check_shape", "prepare", "varint", "MAX_TENSOR_BYTES", "element_limit",
]


# -- values to arrays ------------------------------------------------------------

def _asarray(value: Any, dtype: Any = None) -> np.ndarray:
    try:
        return np.asarray(value, dtype=dtype)
    except ValueError as e:     # ragged nested sequences
        raise ValueError(f"cannot pack {type(value).__name__} {value!r:.60}: {e}") from None


def _objects(arr: np.ndarray, c: DataTypeInfo | None) -> tuple[np.ndarray, DataTypeInfo]:
    """An object array as protobuf messages (PROTO) or str (STRING)."""
    items = arr.ravel().tolist()
    if (c is None or c.kind is PROTO_KIND) and all(isinstance(x, _message.Message) for x in items):
        return arr, BY_DATA_TYPE[pb.PROTO]
    if (c is None or c.kind is STRING_KIND) and all(isinstance(x, str) for x in items):
        return np.array(items, dtype=np.str_).reshape(arr.shape), BY_DATA_TYPE[pb.STRING]
    want = "protobuf messages (PROTO) or all str (STRING)" if c is None else \
        ("protobuf messages" if c.kind is PROTO_KIND else "str")
    found = sorted({"message" if isinstance(x, _message.Message) else type(x).__name__ for x in items})
    raise TypeError(f"cannot pack an object array of shape {list(arr.shape)} holding "
                    f"{', '.join(found)}: its elements must all be {want}")


def _infer(value: Any) -> tuple[np.ndarray, DataTypeInfo]:
    """``value`` as an array and its codec, the DataType following the numpy dtype."""
    if isinstance(value, _message.Message):
        arr = np.empty((), dtype=object)
        arr[()] = value
        return arr, BY_DATA_TYPE[pb.PROTO]
    arr = _asarray(value)
    found = BY_WIRE_DTYPE.get(arr.dtype)
    if found is not None:
        return arr, found
    kind = arr.dtype.kind
    if kind == "U":
        return arr, BY_DATA_TYPE[pb.STRING]
    if kind == "O":
        return _objects(arr, None)
    found = BY_DATA_TYPE[data_type(arr.dtype)]     # a swapped byte order, or TypeError
    return arr.astype(found.wire), found


def _cast(value: Any, c: DataTypeInfo) -> np.ndarray:
    """``value`` as an array of ``c.wire`` dtype; ``ValueError`` when values would change."""
    if c.kind is PROTO_KIND:
        if isinstance(value, _message.Message):
            return _infer(value)[0]
        return _objects(_asarray(value, object), c)[0]
    arr = _asarray(value)
    source = arr.dtype
    if source == c.wire:
        return arr
    if c.kind is STRING_KIND:
        if source.kind == "U":
            return arr
        if source.kind == "O":
            return _objects(arr, c)[0]
        raise TypeError(f"cannot pack {source} values as STRING (expected str values)")
    if source.kind not in "biuf":
        raise TypeError(f"cannot pack {source} values as {data_type_name(c.dt)} "
                        f"(expected numbers or bools)")
    if c.dtype.kind == "f" or np.can_cast(source, c.dtype, "safe"):
        return arr.astype(c.wire)
    with np.errstate(all="ignore"):
        cast = arr.astype(c.wire)
    changed = cast != arr
    if changed.any():
        where = tuple(int(i) for i in np.argwhere(changed)[0])
        raise ValueError(f"cannot pack {source} values as {data_type_name(c.dt)} without loss: "
                         f"{arr[where]!r} at index {list(where)} does not fit")
    return cast


def prepare(value: Any, dtype: Any = None) -> tuple[np.ndarray, DataTypeInfo]:
    """``value`` as the array a Tensor of ``dtype`` encodes (inferred when None), and that DataType's codec."""
    if dtype is None:
        if type(value) is np.ndarray:
            found = BY_WIRE_DTYPE.get(value.dtype)
            if found is not None:
                return value, found
        return _infer(value)
    c = info_for(dtype)
    if type(value) is np.ndarray and BY_WIRE_DTYPE.get(value.dtype) is c:
        return value, c
    return _cast(value, c), c


def _any(item: Any) -> any_pb2.Any:
    """A message as an ``Any`` (properties messages under their dm_env_rpc type URL)."""
    if isinstance(item, any_pb2.Any):
        return item
    try:
        return wire.pack_any(item)
    except KeyError:
        packed = any_pb2.Any()
        packed.Pack(item)
        return packed


def _write(tensor: pb.Tensor, arr: np.ndarray, c: DataTypeInfo) -> None:
    """Fill an empty ``tensor`` with ``arr``."""
    if c.kind is MEMORY or c.kind is VARINT:
        tensor.MergeFromString(encode_tensor(arr, c))
        return
    payload = getattr(tensor, c.name)
    items = arr.ravel().tolist()
    if items:
        payload.array.extend(items if c.kind is STRING_KIND else [_any(x) for x in items])
    else:
        payload.SetInParent()
    if arr.ndim:
        tensor.MergeFromString(shape_bytes(arr.shape))


# Scalars (rewards, discounts, discrete actions) skip numpy arrays altogether.
def _scalar_varint(c: DataTypeInfo, n: int) -> bytes:
    body = varint(n & MASK64)
    return c.tag + ONE_BYTE[len(body) + 2] + b"\x0a" + ONE_BYTE[len(body)] + body


_PACK_DOUBLE = struct.Struct("<d").pack
_DOUBLE_HEAD = memory_head(BY_DATA_TYPE[pb.DOUBLE], (), 8)
_BOOLS = {v: memory_head(BY_DATA_TYPE[pb.BOOL], (), 1) + bytes((v,)) for v in (0, 1)}


def _scalar_float(value: float) -> bytes:
    return _DOUBLE_HEAD + _PACK_DOUBLE(value)


def _scalar_int(value: int) -> bytes | None:
    if -(1 << 63) <= value < (1 << 63):      # numpy's int64; larger ones take the long way
        return _scalar_varint(BY_DATA_TYPE[pb.INT64], value)
    return None


def _scalar_numpy(value: np.generic) -> bytes | None:
    c = BY_WIRE_DTYPE.get(value.dtype)
    if c is None:
        return None
    if c.kind is MEMORY:
        return (c.heads.get(()) or memory_head(c, (), c.wire.itemsize)) + value.tobytes()
    return _scalar_varint(c, int(value))


_SCALARS = {float: _scalar_float, int: _scalar_int, bool: lambda value: _BOOLS[value]}
_SCALARS.update((c.dtype.type, _scalar_numpy) for c in BY_WIRE_DTYPE.values())


def _fill(tensor: pb.Tensor, value: Any, dtype: Any, clear: bool) -> pb.Tensor:
    if dtype is None:
        quick = _SCALARS.get(type(value))
        data = quick(value) if quick is not None else None
        if data is not None:
            if clear:
                tensor.Clear()
            tensor.MergeFromString(data)
            return tensor
    arr, c = prepare(value, dtype)
    if clear:
        tensor.Clear()
    _write(tensor, arr, c)
    return tensor


def pack(value: Any, dtype: Any = None) -> pb.Tensor:
    """Pack a scalar, array, nested list, string or protobuf message into a new ``Tensor``.

    ``dtype`` (a DataType or a numpy dtype) converts the value first; integer
    and bool targets refuse values that would change (``ValueError``). Without
    it the DataType follows the numpy dtype (``TypeError`` for float16, int16,
    complex, ... which have none).

    >>> pack(np.uint8(7)).uint8s.array
    b'\\x07'
    >>> list(pack([[True], [False]]).shape)
    [2, 1]
    >>> pack([1, 2], pb.UINT8).uint8s.array
    b'\\x01\\x02'
    """
    return _fill(pb.Tensor(), value, dtype, False)


def pack_into(tensor: pb.Tensor, value: Any, dtype: Any = None) -> pb.Tensor:
    """Overwrite ``tensor`` (for example a map entry of a request) with ``value``; as :func:`pack`.

    >>> request = pb.StepRequest()
    >>> _ = pack_into(request.actions[1], [0.5, 1.0], pb.FLOAT)
    >>> request.actions[1].floats.array[:]
    [0.5, 1.0]
    """
    return _fill(tensor, value, dtype, True)


def tensor_bytes(value: Any, dtype: Any = None) -> bytes:
    """The serialized ``Tensor`` for ``value`` (what ``pack(value, dtype)`` holds).

    Numeric values are written straight to bytes, with no message in between.

    >>> pb.Tensor.FromString(tensor_bytes([1, 2], pb.UINT8)) == pack([1, 2], pb.UINT8)
    True
    """
    if dtype is None:
        quick = _SCALARS.get(type(value))
        data = quick(value) if quick is not None else None
        if data is not None:
            return data
    arr, c = prepare(value, dtype)
    if c.kind is MEMORY or c.kind is VARINT:
        return encode_tensor(arr, c)
    tensor = pb.Tensor()
    _write(tensor, arr, c)
    return tensor.SerializeToString()


def pack_flat_into(target: Any, flat: Any, dt: int) -> None:
    """Set the payload of ``target`` (a ``Tensor`` or ``TensorSpec.Value``) to ``flat``.

    Used for spec bounds: the payload message (``array = 1``) is the same in
    both, though its field number in the parent differs. The shape is left alone.

    >>> spec = pb.TensorSpec(dtype=pb.INT32)
    >>> pack_flat_into(spec.min, [0, -1], pb.INT32)
    >>> spec.min.int32s.array[:]
    [0, -1]
    """
    c = BY_DATA_TYPE.get(dt) if isinstance(dt, int) else None
    if c is None:
        np_dtype(dt)    # raises ValueError naming it
    arr = _cast(flat, c).ravel()
    target.ClearField(c.name)
    payload = getattr(target, c.name)
    payload.SetInParent()
    if c.kind is MEMORY:
        data = arr.tobytes()
        payload.MergeFromString(array_field(len(data)) + data)
    elif c.kind is VARINT:
        data = varints(arr)
        payload.MergeFromString(array_field(len(data)) + data)
    else:
        items = arr.tolist()
        payload.array.extend(items if c.kind is STRING_KIND else [_any(x) for x in items])


# -- decoding ------------------------------------------------------------------

def _from_bytes(dtype: np.dtype):
    def decode(payload: Any) -> np.ndarray:
        # bytearray: one copy, writable, and shared with nothing.
        return np.frombuffer(bytearray(payload.array), dtype)
    return decode


def _from_repeated(dtype: np.dtype):
    def decode(payload: Any) -> np.ndarray:
        values = payload.array
        n = len(values)
        if n <= 32:
            return np.fromiter(values, dtype, n)
        return np.array(values, dtype)
    return decode


def _strings(payload: Any) -> np.ndarray:
    return np.array(payload.array[:], dtype=np.str_)


def _copy_any(item: any_pb2.Any) -> any_pb2.Any:
    copy = any_pb2.Any()
    copy.CopyFrom(item)
    return copy


def _protos(payload: Any) -> np.ndarray:
    items = payload.array
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = _copy_any(item)
    return out


_DECODERS = {c.name: (_strings if c.kind is STRING_KIND else _protos if c.kind is PROTO_KIND
                      else _from_bytes(c.dtype) if c.dt in (pb.INT8, pb.UINT8)
                      else _from_repeated(c.dtype))
             for c in BY_DATA_TYPE.values()}


def unpack_flat(source: Any) -> np.ndarray:
    """The payload of a ``Tensor`` or ``TensorSpec.Value`` as a fresh 1-D array.

    >>> unpack_flat(pb.TensorSpec.Value(int32s=pb.Tensor.Int32Array(array=[3, 4])))
    array([3, 4], dtype=int32)
    """
    name = source.WhichOneof("payload")
    if name is None:
        raise ValueError(f"{type(source).__name__} has no payload (no data type is set)")
    return _DECODERS[name](getattr(source, name))


def _fit(flat: np.ndarray, shape: list[int], name: str, max_elements: int | None = None) -> np.ndarray:
    """``flat`` in ``shape``: -1 resolved, a single element broadcast (the slow path).

    A broadcast is checked before anything is allocated: it may not make more than
    ``max_elements`` (the spec's size, where a spec is known) or what
    :data:`MAX_TENSOR_BYTES` holds, so a few bytes cannot claim gigabytes.
    """
    full = full_shape(shape, flat.size, name, flat.dtype, max_elements)
    size = math.prod(full)
    if flat.size == size:
        return flat.reshape(full)
    if flat.dtype == object:     # a message of its own in every cell
        out = np.empty(full, dtype=object)
        cells = out.reshape(-1)  # a view; np.ndindex would first build a tuple of every range, 0-sized too
        for i in range(size):
            cells[i] = _copy_any(flat[0])
        return out
    return np.full(full, flat[0], dtype=flat.dtype)


def unpack(tensor: pb.Tensor, max_elements: int | None = None) -> np.ndarray:
    """A ``Tensor`` as a fresh, writable numpy array (0-d for a scalar).

    A single-element payload is broadcast to the whole shape, up to
    ``max_elements`` (default: what :data:`MAX_TENSOR_BYTES` holds); a -1
    dimension takes the rest of the payload.

    >>> unpack(pack(3.5))
    array(3.5)
    >>> unpack(pb.Tensor(int8s=pb.Tensor.Int8Array(array=b"\\x01"), shape=[2, 2]))
    array([[1, 1],
           [1, 1]], dtype=int8)
    """
    name = tensor.WhichOneof("payload")
    if name is None:
        raise ValueError("tensor has no payload (no data type is set)")
    payload, shape = getattr(tensor, name), tensor.shape[:]
    if name == "int8s" or name == "uint8s":        # protobuf copies a bytes field when it is read
        data = payload.array
        if shape:
            check_shape(shape, len(data), name, max_elements)
        return shaped(np.frombuffer(bytearray(data), BY_FIELD_NAME[name].dtype), shape, name, max_elements)
    if shape:
        check_shape(shape, len(payload.array), name, max_elements)
    return shaped(_DECODERS[name](payload), shape, name, max_elements)


def shaped(flat: np.ndarray, shape: list[int], name: str, max_elements: int | None = None) -> np.ndarray:
    """The 1-D payload ``flat`` of a ``name`` (e.g. ``"floats"``) tensor in its ``shape``.

    >>> shaped(np.zeros(1, np.float32), [2, -1], "floats")
    array([[0.],
           [0.]], dtype=float32)
    """
    if shape and min(shape) < 0:
        return _fit(flat, shape, name, max_elements)
    try:
        flat.shape = shape
    except ValueError:
        return _fit(flat, shape, name, max_elements)
    return flat
