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
from dmrpc_gym.protocol.wire import pb

__all__ = [
    "DTYPES", "np_dtype", "data_type", "data_type_name",
    "pack", "pack_into", "unpack", "unpack_flat", "pack_flat_into", "tensor_bytes",
    "resolve_shape", "varint",
]

_SUPPORTED = ("float32, float64, int8, int32, int64, uint8, uint32, uint64, bool, "
              "str, protobuf messages")

# How a payload travels: the array's memory as is (bytes fields, packed
# fixed-width and bool fields), varints, or through the message API.
_MEMORY, _VARINT, _STRING, _PROTO = "memory", "varint", "string", "proto"


class _Codec:
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


_CODECS: dict[int, _Codec] = {c.dt: c for c in (
    _Codec(pb.FLOAT, "floats", 1, np.float32, "<f4", _MEMORY),
    _Codec(pb.DOUBLE, "doubles", 2, np.float64, "<f8", _MEMORY),
    _Codec(pb.INT8, "int8s", 3, np.int8, np.int8, _MEMORY),
    _Codec(pb.INT32, "int32s", 4, np.int32, np.int32, _VARINT),
    _Codec(pb.INT64, "int64s", 5, np.int64, np.int64, _VARINT),
    _Codec(pb.UINT8, "uint8s", 6, np.uint8, np.uint8, _MEMORY),
    _Codec(pb.UINT32, "uint32s", 7, np.uint32, np.uint32, _VARINT),
    _Codec(pb.UINT64, "uint64s", 8, np.uint64, np.uint64, _VARINT),
    _Codec(pb.BOOL, "bools", 9, np.bool_, np.bool_, _MEMORY),
    _Codec(pb.STRING, "strings", 10, np.str_, np.str_, _STRING),
    _Codec(pb.PROTO, "protos", 11, object, object, _PROTO),
)}

#: DataType -> the numpy dtype its values unpack to.
DTYPES: dict[int, np.dtype] = {dt: c.dtype for dt, c in _CODECS.items()}

# numpy dtype -> codec, for arrays that pack with no conversion at all.
_BY_DTYPE: dict[np.dtype, _Codec] = {
    c.wire: c for c in _CODECS.values() if c.kind in (_MEMORY, _VARINT)}
# Any dtype argument seen so far (DataType or numpy dtype-like) -> codec.
_BY_ARG: dict[Any, _Codec] = dict(_CODECS)
_BY_NAME: dict[str, _Codec] = {c.name: c for c in _CODECS.values()}
_CACHE_SIZE = 512


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
    found = (_BY_DTYPE.get(dtype) or _BY_DTYPE.get(dtype.newbyteorder("<"))
             or _BY_DTYPE.get(dtype.newbyteorder("=")))    # any byte order
    if found is not None:
        return found.dt
    if dtype.kind == "U":
        return pb.STRING
    raise TypeError(f"numpy dtype {dtype} has no dm_env_rpc DataType (supported: {_SUPPORTED})")


def _codec(dtype: Any) -> _Codec:
    """The codec for a ``dtype`` argument: a DataType, or a numpy dtype (object for PROTO)."""
    try:
        return _BY_ARG[dtype]
    except (KeyError, TypeError):   # TypeError: unhashable, looked up without the cache
        pass
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        np_dtype(int(dtype))        # raises ValueError naming the DataType
    np_type = np.dtype(dtype)
    found = _CODECS[pb.PROTO if np_type == object else data_type(np_type)]
    try:
        if len(_BY_ARG) < _CACHE_SIZE:
            _BY_ARG[dtype] = found
    except TypeError:
        pass
    return found


# -- wire encoding -------------------------------------------------------------

_MASK64 = (1 << 64) - 1
_ONE_BYTE = [bytes((i,)) for i in range(128)]


def varint(n: int) -> bytes:
    """One non-negative integer as a protobuf varint."""
    if n < 128:
        return _ONE_BYTE[n]
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


def _varints(values: np.ndarray) -> bytes:
    """Integers as protobuf varints (negatives as their 10-byte two's complement).

    A few values are encoded minimally in Python. Longer arrays are encoded
    with numpy at one width for the whole array (1, 2, 4, 8 or 10 bytes),
    shorter values padded with continuation bytes: valid varints that every
    protobuf parser reads, and that a message re-serializes minimally.
    """
    if values.size <= _SMALL:
        return b"".join([varint(x & _MASK64) for x in values.ravel().tolist()])
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


def _array_field(nbytes: int) -> bytes:
    """Tag and length of a payload's ``array = 1`` field (omitted when empty, as protobuf does)."""
    return b"\x0a" + varint(nbytes) if nbytes else b""


_SHAPES: dict[tuple[int, ...], bytes] = {}


def _shape_bytes(shape: tuple[int, ...]) -> bytes:
    """The ``shape = 15`` field (packed int32) for an array's shape; cached."""
    found = _SHAPES.get(shape)
    if found is not None:
        return found
    if any(d > 0x7FFFFFFF for d in shape):
        raise ValueError(f"shape {list(shape)} does not fit a Tensor (dimensions are int32)")
    body = b"".join(varint(d) for d in shape)
    found = b"\x7a" + varint(len(body)) + body if shape else b""
    if len(_SHAPES) >= _CACHE_SIZE:
        _SHAPES.clear()
    _SHAPES[shape] = found
    return found


def _memory_head(c: _Codec, shape: tuple[int, ...], nbytes: int) -> bytes:
    """Everything of a memory-kind Tensor before its data: shape, payload tag, lengths."""
    inner = _array_field(nbytes)
    head = _shape_bytes(shape) + c.tag + varint(len(inner) + nbytes) + inner
    if len(c.heads) >= _CACHE_SIZE:
        c.heads.clear()
    c.heads[shape] = head
    return head


def _encode(arr: np.ndarray, c: _Codec) -> bytes:
    """The wire bytes of a Tensor holding ``arr`` (already in ``c.wire`` dtype)."""
    if c.kind is _MEMORY:
        head = c.heads.get(arr.shape)
        if head is None:
            head = _memory_head(c, arr.shape, arr.nbytes)
        return head + (arr.data if arr.flags.c_contiguous else arr.tobytes())
    body = _varints(arr)
    inner = _array_field(len(body))
    return b"".join((_shape_bytes(arr.shape), c.tag, varint(len(inner) + len(body)), inner, body))


# -- values to arrays ------------------------------------------------------------

def _asarray(value: Any, dtype: Any = None) -> np.ndarray:
    try:
        return np.asarray(value, dtype=dtype)
    except ValueError as e:     # ragged nested sequences
        raise ValueError(f"cannot pack {type(value).__name__} {value!r:.60}: {e}") from None


def _objects(arr: np.ndarray, c: _Codec | None) -> tuple[np.ndarray, _Codec]:
    """An object array as protobuf messages (PROTO) or str (STRING)."""
    items = arr.ravel().tolist()
    if (c is None or c.kind is _PROTO) and all(isinstance(x, _message.Message) for x in items):
        return arr, _CODECS[pb.PROTO]
    if (c is None or c.kind is _STRING) and all(isinstance(x, str) for x in items):
        return np.array(items, dtype=np.str_).reshape(arr.shape), _CODECS[pb.STRING]
    want = "protobuf messages (PROTO) or all str (STRING)" if c is None else \
        ("protobuf messages" if c.kind is _PROTO else "str")
    found = sorted({"message" if isinstance(x, _message.Message) else type(x).__name__ for x in items})
    raise TypeError(f"cannot pack an object array of shape {list(arr.shape)} holding "
                    f"{', '.join(found)}: its elements must all be {want}")


def _infer(value: Any) -> tuple[np.ndarray, _Codec]:
    """``value`` as an array and its codec, the DataType following the numpy dtype."""
    if isinstance(value, _message.Message):
        arr = np.empty((), dtype=object)
        arr[()] = value
        return arr, _CODECS[pb.PROTO]
    arr = _asarray(value)
    found = _BY_DTYPE.get(arr.dtype)
    if found is not None:
        return arr, found
    kind = arr.dtype.kind
    if kind == "U":
        return arr, _CODECS[pb.STRING]
    if kind == "O":
        return _objects(arr, None)
    found = _CODECS[data_type(arr.dtype)]     # a swapped byte order, or TypeError
    return arr.astype(found.wire), found


def _cast(value: Any, c: _Codec) -> np.ndarray:
    """``value`` as an array of ``c.wire`` dtype; ``ValueError`` when values would change."""
    if c.kind is _PROTO:
        if isinstance(value, _message.Message):
            return _infer(value)[0]
        return _objects(_asarray(value, object), c)[0]
    arr = _asarray(value)
    source = arr.dtype
    if source == c.wire:
        return arr
    if c.kind is _STRING:
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


def _prepare(value: Any, dtype: Any) -> tuple[np.ndarray, _Codec]:
    if dtype is None:
        if type(value) is np.ndarray:
            found = _BY_DTYPE.get(value.dtype)
            if found is not None:
                return value, found
        return _infer(value)
    c = _codec(dtype)
    if type(value) is np.ndarray and _BY_DTYPE.get(value.dtype) is c:
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


def _write(tensor: pb.Tensor, arr: np.ndarray, c: _Codec) -> None:
    """Fill an empty ``tensor`` with ``arr``."""
    if c.kind is _MEMORY or c.kind is _VARINT:
        tensor.MergeFromString(_encode(arr, c))
        return
    payload = getattr(tensor, c.name)
    items = arr.ravel().tolist()
    if items:
        payload.array.extend(items if c.kind is _STRING else [_any(x) for x in items])
    else:
        payload.SetInParent()
    if arr.ndim:
        tensor.MergeFromString(_shape_bytes(arr.shape))


# Scalars (rewards, discounts, discrete actions) skip numpy arrays altogether.
def _scalar_varint(c: _Codec, n: int) -> bytes:
    body = varint(n & _MASK64)
    return c.tag + _ONE_BYTE[len(body) + 2] + b"\x0a" + _ONE_BYTE[len(body)] + body


_PACK_DOUBLE = struct.Struct("<d").pack
_DOUBLE_HEAD = _memory_head(_CODECS[pb.DOUBLE], (), 8)
_BOOLS = {v: _memory_head(_CODECS[pb.BOOL], (), 1) + bytes((v,)) for v in (0, 1)}


def _scalar_float(value: float) -> bytes:
    return _DOUBLE_HEAD + _PACK_DOUBLE(value)


def _scalar_int(value: int) -> bytes | None:
    if -(1 << 63) <= value < (1 << 63):      # numpy's int64; larger ones take the long way
        return _scalar_varint(_CODECS[pb.INT64], value)
    return None


def _scalar_numpy(value: np.generic) -> bytes | None:
    c = _BY_DTYPE.get(value.dtype)
    if c is None:
        return None
    if c.kind is _MEMORY:
        return (c.heads.get(()) or _memory_head(c, (), c.wire.itemsize)) + value.tobytes()
    return _scalar_varint(c, int(value))


_SCALARS = {float: _scalar_float, int: _scalar_int, bool: lambda value: _BOOLS[value]}
_SCALARS.update((c.dtype.type, _scalar_numpy) for c in _BY_DTYPE.values())


def _fill(tensor: pb.Tensor, value: Any, dtype: Any, clear: bool) -> pb.Tensor:
    if dtype is None:
        quick = _SCALARS.get(type(value))
        data = quick(value) if quick is not None else None
        if data is not None:
            if clear:
                tensor.Clear()
            tensor.MergeFromString(data)
            return tensor
    arr, c = _prepare(value, dtype)
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
    """The serialized ``Tensor`` for ``value``: ``pack(value, dtype).SerializeToString()``."""
    return pack(value, dtype).SerializeToString()


def pack_flat_into(target: Any, flat: Any, dt: int) -> None:
    """Set the payload of ``target`` (a ``Tensor`` or ``TensorSpec.Value``) to ``flat``.

    Used for spec bounds: the payload message (``array = 1``) is the same in
    both, though its field number in the parent differs. The shape is left alone.

    >>> spec = pb.TensorSpec(dtype=pb.INT32)
    >>> pack_flat_into(spec.min, [0, -1], pb.INT32)
    >>> spec.min.int32s.array[:]
    [0, -1]
    """
    c = _CODECS.get(dt) if isinstance(dt, int) else None
    if c is None:
        np_dtype(dt)    # raises ValueError naming it
    arr = _cast(flat, c).ravel()
    target.ClearField(c.name)
    payload = getattr(target, c.name)
    payload.SetInParent()
    if c.kind is _MEMORY:
        data = arr.tobytes()
        payload.MergeFromString(_array_field(len(data)) + data)
    elif c.kind is _VARINT:
        data = _varints(arr)
        payload.MergeFromString(_array_field(len(data)) + data)
    else:
        items = arr.tolist()
        payload.array.extend(items if c.kind is _STRING else [_any(x) for x in items])


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


_DECODERS = {c.name: (_strings if c.kind is _STRING else _protos if c.kind is _PROTO
                      else _from_bytes(c.dtype) if c.dt in (pb.INT8, pb.UINT8)
                      else _from_repeated(c.dtype))
             for c in _CODECS.values()}


def unpack_flat(source: Any) -> np.ndarray:
    """The payload of a ``Tensor`` or ``TensorSpec.Value`` as a fresh 1-D array.

    >>> unpack_flat(pb.TensorSpec.Value(int32s=pb.Tensor.Int32Array(array=[3, 4])))
    array([3, 4], dtype=int32)
    """
    name = source.WhichOneof("payload")
    if name is None:
        raise ValueError(f"{type(source).__name__} has no payload (no data type is set)")
    return _DECODERS[name](getattr(source, name))


def resolve_shape(shape: Any, size: int) -> tuple[int, ...]:
    """``shape`` with its -1 dimension (at most one) inferred from ``size`` elements.

    A single element broadcasts, so ``size == 1`` fits any shape (a -1 becomes 1).

    >>> resolve_shape([2, -1], 6)
    (2, 3)
    >>> resolve_shape([2, 3], 1)
    (2, 3)
    """
    shape = tuple(int(d) for d in shape)
    unknown = [i for i, d in enumerate(shape) if d < 0]
    if len(unknown) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"shape {list(shape)} may have at most one -1 dimension "
                         f"and no other negative size")
    known = math.prod(d for d in shape if d >= 0)
    if unknown:
        i = unknown[0]
        if size == 1 and known != 1:
            return shape[:i] + (1,) + shape[i + 1:]
        if (known == 0 and size != 0) or (known and size % known):
            raise ValueError(f"a payload of {size} elements does not fit shape {list(shape)} "
                             f"(needs a multiple of {known}, or 1 to broadcast)")
        return shape[:i] + (size // known if known else 0,) + shape[i + 1:]
    if size not in (known, 1):
        raise ValueError(f"a payload of {size} elements does not fit shape {list(shape)} "
                         f"(needs {known}, or 1 to broadcast)")
    return shape


def _fit(flat: np.ndarray, shape: list[int], name: str) -> np.ndarray:
    """``flat`` in ``shape``: -1 resolved, a single element broadcast (the slow path)."""
    try:
        full = resolve_shape(shape, flat.size)
    except ValueError as e:
        dt = data_type_name(_BY_NAME[name].dt)
        raise ValueError(f"cannot unpack a {dt} tensor: {e}") from None
    if flat.size == math.prod(full):
        return flat.reshape(full)
    if flat.dtype == object:     # a message of its own in every cell
        out = np.empty(full, dtype=object)
        for index in np.ndindex(*full):
            out[index] = _copy_any(flat[0])
        return out
    return np.full(full, flat[0], dtype=flat.dtype)


def unpack(tensor: pb.Tensor) -> np.ndarray:
    """A ``Tensor`` as a fresh, writable numpy array (0-d for a scalar).

    A single-element payload is broadcast to the whole shape; a -1 dimension
    takes the rest of the payload.

    >>> unpack(pack(3.5))
    array(3.5)
    >>> unpack(pb.Tensor(int8s=pb.Tensor.Int8Array(array=b"\\x01"), shape=[2, 2]))
    array([[1, 1],
           [1, 1]], dtype=int8)
    """
    name = tensor.WhichOneof("payload")
    if name is None:
        raise ValueError("tensor has no payload (no data type is set)")
    flat = _DECODERS[name](getattr(tensor, name))
    shape = tensor.shape[:]
    if shape and min(shape) < 0:
        return _fit(flat, shape, name)
    try:
        flat.shape = shape
    except ValueError:
        return _fit(flat, shape, name)
    return flat
