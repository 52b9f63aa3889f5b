"""Step messages' tensor maps written by hand, and their large tensors read in place.

protobuf's Python API copies a bytes payload at every hand-over: into the
message, out to the wire, from the wire, out to numpy. For a 16 MiB image
those copies are most of a step. So the large memory-kind tensors (float,
double, int8, uint8 and bool payloads of :data:`LARGE` bytes or more) of a
step's ``actions`` or ``observations`` map skip protobuf at both ends:

- writing (:class:`Pieces`), each large map entry is two pieces, a header of
  a few bytes and the array's own memory, which the transport sends frame by
  frame (the client straight from the array; the server joins each frame's
  bytes once, as asyncio may hold them past the next step); the rest of the message is protobuf's bytes (client
  requests) or map entries written here too (every server step answer, where
  that is also the cheaper way for small ones);
- reading (:func:`split`), a message of :data:`LARGE` bytes or more is walked
  field by field: each large memory-kind Tensor of the step's map becomes an
  array over the received buffer itself, and protobuf parses the rest, byte
  for byte as it came.

Both sides write and accept plain protobuf: a peer sees one ordinary message,
and whatever the walk does not expect (a varint payload, an unknown field, an
unpacked shape) is simply left to protobuf.

>>> pieces = Pieces(OBSERVATIONS)
>>> response = pb.EnvironmentResponse()
>>> pieces.take(7, np.arange(LARGE, dtype=np.uint8), None)
True
>>> message = b"".join(pieces.envelope(STEP_TAG, response.step.SerializeToString()))
>>> rest, arrays = split(message, OBSERVATIONS)
>>> len(pb.EnvironmentResponse.FromString(rest).step.observations), arrays[7][0], arrays[7][1][:3]
(0, 'uint8s', array([0, 1, 2], dtype=uint8))
"""
from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.dtypes import BY_DATA_TYPE, MEMORY, VARINT, DataTypeInfo
from dmrpc_gym.protocol.fidelity import EXACT_UID
from dmrpc_gym.protocol.info import INFO_UID
from dmrpc_gym.protocol.turns import TURN_UID
from dmrpc_gym.protocol.protowire import ONE_BYTE, memory_head, varint
from dmrpc_gym.protocol.shapes import MAX_TENSOR_BYTES
from dmrpc_gym.protocol.wire import pb

__all__ = ["LARGE", "ACTIONS", "OBSERVATIONS", "STEP_TAG", "Pieces", "split", "Decoded", "NO_SPECS", "MAX_WALKED",
           "MAX_SETTINGS"]

#: Tensors of this many payload bytes or more travel outside protobuf.
LARGE = 1 << 16
#: Field numbers of the maps: StepRequest ``actions``, StepResponse ``observations``.
ACTIONS, OBSERVATIONS = 1, 2
_STEP = 3                                   # the envelopes' ``step`` field
STEP_TAG = bytes(((_STEP << 3) | 2,))
_SHAPE = 15                                 # Tensor ``shape``
#: ``(payload field name, array)``: a Tensor decoded by :func:`split`.
Decoded = tuple[str, np.ndarray]
_MEMORY = {c.dt: c for c in BY_DATA_TYPE.values() if c.kind is MEMORY}   # payload field number == DataType
_VARINTS = {c.dt: c for c in BY_DATA_TYPE.values() if c.kind is VARINT}   # payload field number == DataType
_HIDDEN = frozenset((INFO_UID, EXACT_UID, TURN_UID))   # observations our clients ask for that no spec lists


_KEYS: dict[int, bytes] = {}
_DOUBLES: dict[tuple[bytes, int], bytes] = {}   # (map tag, UID) -> a DOUBLE scalar's entry but its 8 bytes
_PACK_DOUBLE = struct.Struct("<d").pack


def _key(uid: int) -> bytes:
    """A map entry's ``key = 1`` field and the tag of its ``value = 2`` (cached per UID)."""
    key = b"\x08" + varint(uid) + b"\x12"
    if len(_KEYS) < 4096:
        _KEYS[uid] = key
    return key


class Pieces:
    """Map entries of one step message being written by hand, as pieces to send unjoined.

    ``map_field`` is :data:`ACTIONS` (a StepRequest) or :data:`OBSERVATIONS` (a
    StepResponse). :meth:`take` keeps only large tensors (the rest of the
    message is a protobuf message); :meth:`add` takes any tensor (the whole
    map is written here).
    """

    __slots__ = ("tag", "parts")

    def __init__(self, map_field: int):
        self.tag = bytes(((map_field << 3) | 2,))
        self.parts: list[Any] = []    # bytes, and memoryviews of bytes

    def __bool__(self) -> bool:
        return bool(self.parts)

    def add(self, uid: int, value: Any, dtype: Any) -> None:
        """Append the map entry ``uid -> value`` (as :func:`~dmrpc_gym.protocol.tensors.pack` packs it)."""
        if type(value) is np.ndarray:
            arr, c = tensors.prepare(value, dtype)
            if c.kind is MEMORY and arr.nbytes >= LARGE:
                self._add_memory(uid, arr, c)
                return
            value, dtype = arr, c.dt              # already converted: tensor_bytes takes it as it is
        self.add_bytes(uid, tensors.tensor_bytes(value, dtype))

    def add_double(self, uid: int, value: float) -> None:
        """Append the map entry ``uid -> value`` as a DOUBLE scalar (a reward, a discount)."""
        prefix = _DOUBLES.get((self.tag, uid))
        if prefix is None:
            prefix = self._entry_bytes(uid, tensors.tensor_bytes(0.0))[:-8]
            if len(_DOUBLES) < 4096:
                _DOUBLES[self.tag, uid] = prefix
        self.parts.append(prefix + _PACK_DOUBLE(value))

    def add_bytes(self, uid: int, tensor: bytes) -> None:
        """Append the map entry ``uid -> tensor`` (a serialized Tensor)."""
        self.parts.append(self._entry_bytes(uid, tensor))

    def _entry_bytes(self, uid: int, tensor: bytes) -> bytes:
        key = _KEYS.get(uid) or _key(uid)
        n = len(tensor)
        if n + len(key) < 127:           # both lengths fit one byte
            return self.tag + ONE_BYTE[n + len(key) + 1] + key + ONE_BYTE[n] + tensor
        size = varint(n)
        return b"".join((self.tag, varint(len(key) + len(size) + n), key, size, tensor))

    def take(self, uid: int, value: Any, dtype: Any) -> bool:
        """Whether ``value`` (the Tensor of ``uid``) is large, and so was added to the pieces."""
        if type(value) is np.ndarray and value.nbytes >= LARGE:
            arr, c = tensors.prepare(value, dtype)
            if c.kind is MEMORY:
                self._add_memory(uid, arr, c)
                return True
        return False

    def _add_memory(self, uid: int, arr: np.ndarray, c: DataTypeInfo) -> None:
        """Append the map entry ``uid -> arr`` (already in ``c``'s wire dtype)."""
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        head = c.heads.get(arr.shape) or memory_head(c, arr.shape, arr.nbytes)
        size = len(head) + arr.nbytes
        entry = (_KEYS.get(uid) or _key(uid)) + varint(size)
        first = self.tag + varint(len(entry) + size) + entry + head
        data = memoryview(arr.reshape(-1).view(np.uint8))
        self.parts += (first, data)

    def envelope(self, tag: bytes, body: bytes) -> list[Any]:
        """The message whose field ``tag`` holds ``body`` (protobuf's bytes of the rest) and the pieces."""
        parts = self.parts
        return [tag + varint(len(body) + sum(map(len, parts))) + body, *parts]


# -- reading -----------------------------------------------------------------------------------


class _Unexpected(Exception):
    """Something the walk leaves to protobuf."""


def _varint(buf: Any, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise _Unexpected from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Unexpected


def _fields(buf: Any, pos: int, end: int):
    """``(number, wire type, start, stop, value)`` of each field in ``buf[pos:end]``.

    The field's bytes are ``buf[start:stop]``; ``value`` is a varint's value, or
    where a length-delimited value starts (it ends at ``stop``).
    """
    while pos < end:
        start = pos
        key, pos = _varint(buf, pos)
        kind = key & 7
        if kind == 2:
            n, pos = _varint(buf, pos)
            value = pos
            pos += n
        elif kind == 0:
            value, pos = _varint(buf, pos)
        elif kind in (1, 5):
            value = pos
            pos += 8 if kind == 1 else 4
        else:
            raise _Unexpected
        if pos > end:
            raise _Unexpected
        yield key >> 3, kind, start, pos, value


def _parts(buf: Any, pos: int, end: int, payloads: dict) -> tuple[list[int] | None, tuple[int, int, int]]:
    """A Tensor in ``buf[pos:end]`` whose payload is one of ``payloads`` (by field number): its
    shape (None: none given) and ``(payload field number, start, stop)``; else ``_Unexpected``."""
    shape, payload = None, None
    for number, kind, _, stop, value in _fields(buf, pos, end):
        if kind != 2:
            raise _Unexpected
        if number == _SHAPE and shape is None:
            shape = []
            while value < stop:
                d, value = _varint(buf, value)
                shape.append(d - (1 << 64) if d >= 1 << 63 else d)
        elif number in payloads and payload is None:
            payload = number, value, stop
        else:
            raise _Unexpected
    if payload is None:
        raise _Unexpected
    return shape, payload


def _tensor(buf: Any, pos: int, end: int) -> Decoded:
    """A memory-kind Tensor from ``buf[pos:end]``, as an array over ``buf``; ``ValueError`` when
    its shape does not fit its payload (a lie, refused before protobuf copies the message)."""
    shape, (number, a, b) = _parts(buf, pos, end, _MEMORY)
    c = _MEMORY[number]
    inner = list(_fields(buf, a, b))
    if len(inner) > 1 or (inner and (inner[0][0], inner[0][1]) != (1, 2)):
        raise _Unexpected
    a = inner[0][4] if inner else b
    wire = np.dtype(np.uint8) if c.dt == pb.BOOL else c.wire
    if (b - a) % wire.itemsize:
        raise _Unexpected
    flat = np.frombuffer(buf, wire, (b - a) // wire.itemsize, a)
    if c.dt == pb.BOOL:
        if flat.size and flat.max() > 1:
            raise _Unexpected              # non-canonical bools: protobuf reads them
        flat = flat.view(np.bool_)
    tensors.check_shape(shape or [], flat.size, c.name)          # before any copy
    if not flat.flags.writeable or not flat.flags.aligned:
        flat = flat.copy()
    return c.name, tensors.shaped(flat, shape or [], c.name)    # ValueError: the shape lies


_HIGH = bytes(range(0x80, 0x100))          # bytes that do not end a varint


def _judge_varints(buf: Any, pos: int, end: int, most: int | None) -> None:
    """A large Tensor of an integer (varint) payload in ``buf[pos:end]``: ``ValueError`` when it
    would decode to more than ``most`` bytes (settings: :data:`~dmrpc_gym.protocol.shapes.MAX_TENSOR_BYTES`;
    an action: the larger of that and its spec's size; None: no bound) or its shape does not fit
    it. A varint payload of one byte per element decodes to 8 bytes each (int64): 60 KB of gzip
    made 480 MB in protobuf's repeated field, and as much again in numpy. Its elements are
    counted (a MiB at a time by ``bytes.translate``, until past the bound) only when it could
    pass 64 MiB."""
    try:
        shape, (number, a, b) = _parts(buf, pos, end, _VARINTS)
    except _Unexpected:
        return                                 # left to protobuf
    c = _VARINTS[number]
    itemsize = c.wire.itemsize
    if (b - a) * itemsize <= MAX_TENSOR_BYTES:
        return                                 # at most 64 MiB once decoded: protobuf's to read
    inner = next(_fields(buf, a, b), (0, 0, 0, 0, 0))
    limit = None if most is None else max(MAX_TENSOR_BYTES, most)
    if inner[:2] != (1, 2) or inner[3] != b:  # unpacked (a field per element), or more than the array
        if limit is not None:
            raise ValueError(f"an unpacked {c.name} payload of {b - a} bytes, which may decode to "
                             f"more than {limit} bytes")
        return
    view, a, count = memoryview(buf), inner[4], 0
    for k in range(a, b, 1 << 20):
        count += len(bytes(view[k:min(b, k + (1 << 20))]).translate(None, _HIGH))
        if limit is not None and count * itemsize > limit:     # (the rest need not be counted)
            raise ValueError(f"a {c.name} payload of {b - a} bytes holds more than {limit // itemsize} elements: "
                             f"it decodes to more than the {limit} bytes allowed")
    tensors.check_shape(shape or [], count, c.name)


def _entries(buf: Any, pos: int, end: int, map_field: int, found: dict[int, Decoded], kept: list,
             screen: "_Screen | None" = None) -> None:
    """Walk a StepRequest/StepResponse: large entries of its map into ``found``, the rest into
    ``kept``; with ``screen`` (a request, and the spec it must keep to), its UIDs are judged on
    the way (:class:`_Screen`)."""
    view = memoryview(buf)
    for number, kind, start, stop, value in _fields(buf, pos, end):
        if screen is not None and screen.walked(number, kind, value, stop):   # requested: kept there
            if screen.stopped is not None:
                return
            continue
        if number == map_field and kind == 2:
            uid, tensor = 0, None
            for n, k, _, b, v in _fields(buf, value, stop):
                if n == 1 and k == 0:
                    uid = v
                elif n == 2 and k == 2:
                    tensor = v, b
                else:
                    raise _Unexpected
            if screen is not None and not screen.action(uid):
                return
            if tensor is not None and tensor[1] - tensor[0] >= LARGE:
                try:
                    try:
                        found[uid] = _tensor(buf, *tensor)
                        continue
                    except _Unexpected:            # not a memory kind: an integer payload is judged
                        _judge_varints(buf, *tensor, None if screen is None else screen.action_bytes(uid))
                except ValueError as lie:
                    raise ValueError(f"{_KINDS[map_field]} UID {uid}: {lie}") from None
            found.pop(uid, None)           # a later entry for a UID replaces an earlier one
        kept.append(view[start:stop])


#: StepRequest ``requested_observations``.
_REQUESTED = 2
#: Fields of a StepRequest (map entries, unpacked UIDs), and UIDs of 2 bytes or more, that the
#: server's walk reads at most (a few ms of its loop); a request with more is refused: no
#: spec has that many. Settings: :data:`MAX_SETTINGS`.
MAX_WALKED = 1 << 12


class _Screen:
    """A StepRequest's UIDs judged against the spec of the agent it goes to, as they are walked:
    the walk stops at the first UID the spec lacks (an action or a requested observation), and
    the step is then written again with that one only, which the session refuses by name;
    requested observations are kept once each, in the order they came (what the server answers),
    so that neither protobuf nor the session reads a list longer than the spec. One-byte UIDs are
    judged together (:meth:`_one_byte`); longer ones one by one, :data:`MAX_WALKED` at most."""

    def __init__(self, buf: Any, specs: Any):
        self._buf, self._specs = buf, specs
        self.actions = frozenset(specs.actions)
        self.observations = frozenset(specs.observations) | _HIDDEN
        self._small = small = sorted(uid for uid in self.observations if uid < 0x80)
        self._unknown_byte = bytes(0 if b in small else 1 for b in range(256))
        self.requested: dict[int, None] = {}         # in the order first requested
        self.stopped: bytes | None = None            # the step written again, past a UID unknown
        self.fields = 0

    def walked(self, number: int, kind: int, value: int, stop: int) -> bool:
        """Count a field of the step; True when it is a requested observation (taken here)."""
        self.fields += 1
        if self.fields > MAX_WALKED:
            raise ValueError(f"a StepRequest of more than {MAX_WALKED} fields (map entries or unpacked "
                             f"UIDs): the spec has {len(self.actions)} actions and "
                             f"{len(self.observations)} observations")
        if number != _REQUESTED:
            return False
        if kind == 0:
            self._request(value)
        elif kind == 2:
            self._requested_packed(self._buf, value, stop)
        else:
            raise _Unexpected
        return True

    def action_bytes(self, uid: int) -> int | None:
        """The bytes action ``uid``'s spec holds once decoded (None: a -1 dimension, no bound)."""
        if uid not in self._specs.actions:       # (reading a missing key of a map would add it)
            return None
        spec = self._specs.actions[uid]
        if any(d < 0 for d in spec.shape) or spec.dtype not in BY_DATA_TYPE:
            return None
        return math.prod(spec.shape) * BY_DATA_TYPE[spec.dtype].wire.itemsize

    def action(self, uid: int) -> bool:
        """Whether the spec has action ``uid`` (else the walk stops here)."""
        if uid in self.actions:
            return True
        entry = b"\x08" + varint(uid) + b"\x12\x00"          # the UID, with an empty Tensor
        self.stopped = b"\x0a" + varint(len(entry)) + entry
        return False

    def _request(self, uid: int) -> None:
        if self.stopped is not None or uid in self.requested:
            return
        if uid not in self.observations:
            packed = varint(uid)
            self.stopped = b"\x12" + varint(len(packed)) + packed
            return
        self.requested[uid] = None

    def _requested_packed(self, buf: Any, pos: int, end: int) -> None:
        if end - pos >= 64 and np.frombuffer(buf, np.uint8, end - pos, pos).max() < 0x80:
            self._one_byte(buf, pos, end)
            return
        walked = 0
        while pos < end and self.stopped is None:
            uid, pos = _varint(buf, pos)
            self._request(uid)
            walked += 1
            if walked > MAX_WALKED:
                raise ValueError(f"a StepRequest naming more than {MAX_WALKED} observation UIDs, some of "
                                 f"2 bytes or more; the spec has {len(self.observations)} observations")

    def _one_byte(self, buf: Any, pos: int, end: int) -> None:
        """Packed UIDs under 128, a byte each, judged a MiB at a time with no Python loop per UID:
        against the spec's range of one-byte UIDs where they are consecutive (as our servers number
        them: SIMD passes), else by ``bytes.translate``."""
        arr = np.frombuffer(buf, np.uint8, end - pos, pos)
        small, bad, view = self._small, -1, memoryview(buf)
        consecutive = small and small[-1] - small[0] + 1 == len(small)
        for at in range(0, end - pos, 1 << 20):
            if consecutive:
                chunk = arr[at:at + (1 << 20)] - np.uint8(small[0])    # below the range wraps past it
                found = int(np.argmax(chunk > small[-1] - small[0])) if chunk.max() > small[-1] - small[0] else -1
            else:
                found = bytes(view[pos + at:min(end, pos + at + (1 << 20))]).translate(self._unknown_byte).find(1)
            if found >= 0:
                bad = at + found
                break
        upto = end if bad < 0 else pos + bad
        whole = buf if hasattr(buf, "find") else bytes(buf)
        firsts = sorted((i, uid) for uid in small if uid not in self.requested
                        and (i := whole.find(bytes((uid,)), pos, upto)) >= 0)
        for _, uid in firsts:
            self.requested[uid] = None
        if bad >= 0:
            self._request(int(arr[bad]))

    def step(self, kept: list) -> bytes:
        """The step's fields as written again: the one past which the walk stopped, or what was
        kept and the requested observations, once each."""
        if self.stopped is not None:
            return self.stopped
        if self.requested:
            packed = b"".join(varint(uid) for uid in self.requested)
            kept.append(b"\x12" + varint(len(packed)) + packed)
        return b"".join(kept)


#: EnvironmentRequest fields whose message has a settings map -> that map's field number.
_SETTINGS = {1: 1, 2: 2, 4: 1, 5: 2}        # create_world, join_world, reset, reset_world
_KINDS = {ACTIONS: "action", OBSERVATIONS: "observation"}
#: Settings a request may carry (a world's keyword arguments): past them it is refused before
#: protobuf reads them (a million settings held the server's loop for seconds).
MAX_SETTINGS = 1 << 10


def _judge_settings(buf: Any, pos: int, end: int, map_field: int) -> None:
    """``ValueError`` naming the first large memory-kind setting of a request (in ``buf[pos:end]``)
    whose shape does not fit its payload, or saying that it has more than :data:`MAX_SETTINGS`
    fields: refused before protobuf copies or reads the message. Other entries are left to it."""
    for judged, (number, kind, _, stop, value) in enumerate(_fields(buf, pos, end)):
        if judged >= MAX_SETTINGS:
            raise ValueError(f"a request of more than {MAX_SETTINGS} settings")
        if number != map_field or kind != 2:
            continue
        name, tensor = None, None
        for n, k, _, b, v in _fields(buf, value, stop):
            if n == 1 and k == 2:
                name = bytes(buf[v:b]).decode("utf-8", "replace")
            elif n == 2 and k == 2:
                tensor = v, b
        if tensor is not None and tensor[1] - tensor[0] >= LARGE:
            try:
                try:
                    _tensor(buf, *tensor)
                except _Unexpected:                # not a memory kind: an integer payload is judged
                    _judge_varints(buf, *tensor, 0)
            except ValueError as lie:
                raise ValueError(f"setting {name!r}: {lie}") from None


_ENVELOPE_FIELDS = 64
#: The specs of a session joined to no agent: every UID is unknown to it.
NO_SPECS = pb.ActionObservationSpecs()


def split(message: Any, map_field: int, specs: Any = None) -> tuple[Any, dict[int, Decoded]]:
    """``message`` (an envelope) without the large tensors of its step's map, and those tensors by UID.

    ``specs`` (a server reading a request: the ``ActionObservationSpecs`` of the agent it goes to,
    :data:`NO_SPECS` for none) bounds the walk of a StepRequest by the spec (:class:`_Screen`):
    it stops at the first action or requested observation UID the spec lacks, the step then
    holding that one only, and its requested observations come back once each.

    Messages under :data:`LARGE` bytes, and any the walk does not expect,
    come back whole with no tensors. A large memory-kind tensor whose shape
    does not fit its payload is a ``ValueError`` naming it (its UID; in a
    request's settings, its name), found before protobuf copies the message. The arrays share memory with
    ``message`` when it is a writable buffer (a ``bytearray``); over read-only
    ``bytes`` they are copies. Protobuf's later entries win: a tensor found
    here replaces an earlier entry for its UID left in the message.
    """
    if len(message) < LARGE or not map_field:
        return message, {}
    found: dict[int, Decoded] = {}
    steps = []                              # (start, stop, kept pieces, screen) of each step field
    try:
        for walked, (number, kind, start, stop, value) in enumerate(_fields(message, 0, len(message))):
            if walked >= _ENVELOPE_FIELDS:      # an envelope has one payload: the rest is a flood
                if specs is None:
                    raise _Unexpected
                raise ValueError(f"an EnvironmentRequest of more than {_ENVELOPE_FIELDS} fields")
            if number == _STEP and kind == 2:
                kept: list[Any] = []
                screen = None if specs is None or map_field != ACTIONS else _Screen(message, specs)
                _entries(message, value, stop, map_field, found, kept, screen)
                steps.append((start, stop, kept, screen))
            elif number in _SETTINGS and kind == 2 and map_field == ACTIONS:
                _judge_settings(message, value, stop, _SETTINGS[number])
    except _Unexpected:
        return message, {}
    if not found and all(screen is None for *_, screen in steps):
        return message, {}
    view, out, done = memoryview(message), [], 0
    for start, stop, kept, screen in steps:
        body = b"".join(kept) if screen is None else screen.step(kept)
        out += (view[done:start], STEP_TAG, varint(len(body)), body)
        done = stop
    out.append(view[done:])
    return b"".join(out), found
