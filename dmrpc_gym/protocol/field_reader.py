"""Reading a protobuf message in place, field by field: what :mod:`~dmrpc_gym.protocol.large_tensors`
and :mod:`~dmrpc_gym.protocol.large_requests` walk before protobuf reads a large message.

>>> [(number, kind) for number, kind, *_ in fields(b"\\x08\\x01\\x12\\x02ab", 0, 6)]
[(1, 0), (2, 2)]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.dtypes import BY_DATA_TYPE, MEMORY
from dmrpc_gym.protocol.wire import pb

__all__ = ["LARGE", "Unexpected", "read_varint", "fields", "parts", "read_tensor", "Decoded", "MEMORY_PAYLOADS",
           "SHAPE", "OBSERVATIONS_FIELD", "STATE_FIELD", "map_entry", "running_step", "REF", "Ref", "read_reference",
           "read_varints"]

#: Tensors of this many payload bytes or more are read here, in place, not by protobuf.
LARGE = 1 << 16
SHAPE = 15                                  # Tensor ``shape``
#: The field number of a reference into shared memory in a ``Tensor``, and of the targets in a ``StepRequest``
#: (:mod:`~dmrpc_gym.protocol.region_refs`; a number dm_env_rpc does not use).
REF = 4040
#: A reference as read: ``(shape, data type, region, offset)``.
Ref = tuple[tuple[int, ...], int, int, int]
#: ``(payload field name, array)``: a Tensor decoded in place.
Decoded = tuple[str, np.ndarray]
#: Memory-kind payloads by field number (== DataType).
MEMORY_PAYLOADS = {c.dt: c for c in BY_DATA_TYPE.values() if c.kind is MEMORY}
_FIXED_WIDTH = {c.dt for c in MEMORY_PAYLOADS.values() if c.dt != pb.BOOL}     # a value changes no length
_STEP = pb.EnvironmentResponse.DESCRIPTOR.fields_by_name["step"].number
#: The StepResponse's ``state``.
STATE_FIELD = _STATE = pb.StepResponse.DESCRIPTOR.fields_by_name["state"].number
#: The StepResponse's ``observations`` map.
OBSERVATIONS_FIELD = pb.StepResponse.DESCRIPTOR.fields_by_name["observations"].number


class Unexpected(Exception):
    """Something the walk leaves to protobuf."""


def read_varint(buf: Any, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise Unexpected from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Unexpected


def fields(buf: Any, pos: int, end: int):
    """``(number, wire type, start, stop, value)`` of each field in ``buf[pos:end]``.

    The field's bytes are ``buf[start:stop]``; ``value`` is a varint's value, or
    where a length-delimited value starts (it ends at ``stop``).
    """
    while pos < end:
        start = pos
        key, pos = read_varint(buf, pos)
        kind = key & 7
        if kind == 2:
            n, pos = read_varint(buf, pos)
            value = pos
            pos += n
        elif kind == 0:
            value, pos = read_varint(buf, pos)
        elif kind in (1, 5):
            value = pos
            pos += 8 if kind == 1 else 4
        else:
            raise Unexpected
        if pos > end:
            raise Unexpected
        yield key >> 3, kind, start, pos, value


def parts(buf: Any, pos: int, end: int, payloads: dict) -> tuple[list[int] | None, tuple[int, int, int]]:
    """A Tensor in ``buf[pos:end]`` whose payload is one of ``payloads`` (by field number): its
    shape (None: none given) and ``(payload field number, start, stop)``; else ``Unexpected``."""
    shape, payload = None, None
    for number, kind, _, stop, value in fields(buf, pos, end):
        if kind != 2:
            raise Unexpected
        if number == SHAPE and shape is None:
            shape = []
            while value < stop:
                d, value = read_varint(buf, value)
                shape.append(d - (1 << 64) if d >= 1 << 63 else d)
        elif number in payloads and payload is None:
            payload = number, value, stop
        else:
            raise Unexpected
    if payload is None:
        raise Unexpected
    return shape, payload


def read_tensor(buf: Any, pos: int, end: int) -> Decoded:
    """A memory-kind Tensor from ``buf[pos:end]``, as an array over ``buf``; ``ValueError`` when
    its shape does not fit its payload (a lie, refused before protobuf copies the message)."""
    shape, (number, a, b) = parts(buf, pos, end, MEMORY_PAYLOADS)
    c = MEMORY_PAYLOADS[number]
    inner = list(fields(buf, a, b))
    if len(inner) > 1 or (inner and (inner[0][0], inner[0][1]) != (1, 2)):
        raise Unexpected
    a = inner[0][4] if inner else b
    wire = np.dtype(np.uint8) if c.dt == pb.BOOL else c.wire
    if (b - a) % wire.itemsize:
        raise Unexpected
    flat = np.frombuffer(buf, wire, (b - a) // wire.itemsize, a)
    if c.dt == pb.BOOL:
        if flat.size and flat.max() > 1:
            raise Unexpected              # non-canonical bools: protobuf reads them
        flat = flat.view(np.bool_)
    tensors.check_shape(shape or [], flat.size, c.name)          # before any copy
    if not flat.flags.writeable or not flat.flags.aligned:
        flat = flat.copy()
    return c.name, tensors.shaped(flat, shape or [], c.name)    # ValueError: the shape lies


def read_varints(buf: Any, pos: int, end: int) -> list[int]:
    """The packed varints of ``buf[pos:end]``; ``Unexpected`` where they do not end there."""
    out = []
    while pos < end:
        value, pos = read_varint(buf, pos)
        out.append(value)
    if pos != end:
        raise Unexpected
    return out


def read_reference(buf: Any, pos: int, end: int) -> Ref | None:
    """The reference into shared memory in the Tensor ``buf[pos:end]`` (:mod:`~dmrpc_gym.protocol.region_refs`):
    ``(shape, data type, region, offset)``; None where it holds none (a Tensor as dm_env_rpc has it)."""
    shape, ref, other = (), None, False
    for number, kind, _, stop, value in fields(buf, pos, end):
        if number == REF and kind == 2:
            ref = read_varints(buf, value, stop)
        elif number == SHAPE and kind == 2:
            shape = read_varints(buf, value, stop)
        else:
            other = True                 # a payload
    if ref is None:
        return None                      # an ordinary Tensor
    if other:
        raise ValueError("a tensor reference with a payload beside it")
    if len(ref) != 3:
        raise ValueError(f"a tensor reference holds 3 numbers (region, offset, data type), got {len(ref)}")
    if any(d >= 1 << 63 for d in shape):
        raise ValueError(f"a tensor reference's shape has a negative dimension: {shape}")
    return tuple(shape), ref[2], ref[0], ref[1]


def map_entry(buf: Any, pos: int, end: int) -> tuple[int, int, int]:
    """The entry of a ``map<uint64, Tensor>`` in ``buf[pos:end]``, as protobuf writes one (its key, then its
    value): ``(key, value start, value stop)``; else ``Unexpected``."""
    entry = list(fields(buf, pos, end))
    if [(n, k) for n, k, *_ in entry] != [(1, 0), (2, 2)]:
        raise Unexpected
    return entry[0][4], entry[1][4], entry[1][3]


def running_step(raw: Any, hidden: Any, refs: dict | None = None) -> tuple[list[tuple[int, np.dtype, tuple, int, int]],
                                                                           int | None, int]:
    """A RUNNING step's answer (an EnvironmentResponse) of the layout the steady-state paths take: each
    observation's ``(uid, dtype, shape, start, stop)`` (its payload's bytes: one field of float32, float64,
    int8 or uint8), in order; where the entries of ``hidden`` UIDs (``info``, the exact extras) begin,
    which must come last (None: none came); and where the StepResponse begins. ``Unexpected`` otherwise.
    ``refs``: a dict that takes the observations sent as references into shared memory
    (:func:`read_reference`), ``uid -> (dtype, shape, region, offset, data type)``, their entries left in place (else
    a reference is ``Unexpected``).

    >>> from dmrpc_gym.protocol.large_tensors import Pieces, STEP_TAG
    >>> pieces = Pieces(OBSERVATIONS_FIELD)
    >>> pieces.add(3, np.zeros(2, np.float32), pb.FLOAT)
    >>> raw = b"".join(pieces.envelope(STEP_TAG, b"\\x08\\x01"))
    >>> values, tail, at = running_step(raw, ())
    >>> [(uid, str(dtype), shape, raw[start:stop]) for uid, dtype, shape, start, stop in values], tail, at
    ([(3, 'float32', (2,), b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00')], None, 2)
    """
    top = list(fields(raw, 0, len(raw)))
    if len(top) != 1 or top[0][:2] != (_STEP, 2) or top[0][3] != len(raw):
        raise Unexpected
    values, tail, state = [], None, None
    for number, kind, start, stop, value in fields(raw, top[0][4], len(raw)):
        if number == _STATE and kind == 0 and tail is None:
            state = value
            continue
        if number != OBSERVATIONS_FIELD or kind != 2:
            raise Unexpected
        uid, begin, end = map_entry(raw, value, stop)
        if uid in hidden:
            tail = start if tail is None else tail
            continue
        if tail is not None:                 # nothing after the hidden entries
            raise Unexpected
        if refs is not None:
            try:
                ref = read_reference(raw, begin, end)
            except ValueError:
                raise Unexpected from None
            if ref is not None:
                c = MEMORY_PAYLOADS.get(ref[1])
                if c is None or uid in refs:
                    raise Unexpected
                refs[uid] = np.dtype(c.wire), ref[0], ref[2], ref[3], ref[1]
                continue
        shape, (payload, a, b) = parts(raw, begin, end, MEMORY_PAYLOADS)
        inner = list(fields(raw, a, b))
        if payload not in _FIXED_WIDTH or len(inner) != 1 or inner[0][:2] != (1, 2):
            raise Unexpected
        dtype = np.dtype(MEMORY_PAYLOADS[payload].dtype)
        a = inner[0][4]
        if not shape and (b - a) != dtype.itemsize:
            raise Unexpected
        values.append((uid, dtype, tuple(shape or ()), a, b))
    if state != pb.RUNNING:
        raise Unexpected
    return values, tail, top[0][4]
