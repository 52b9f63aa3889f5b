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

>>> from dmrpc_gym.protocol.wire import pb
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

import struct
from typing import Any

import numpy as np

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.dtypes import DataTypeInfo, MEMORY
from dmrpc_gym.protocol.protowire import ONE_BYTE, memory_head, varint
from dmrpc_gym.protocol.large_requests import MAX_SETTINGS, MAX_WALKED, NO_SPECS, SETTINGS, Screen, judge_settings, judge_varints
from dmrpc_gym.protocol.field_reader import LARGE, Decoded, Unexpected, fields, read_tensor

__all__ = ["LARGE", "ACTIONS", "OBSERVATIONS", "STEP_TAG", "Pieces", "entry_bytes", "split", "Decoded", "NO_SPECS", "MAX_WALKED",
           "MAX_SETTINGS"]

#: Field numbers of the maps: StepRequest ``actions``, StepResponse ``observations``.
ACTIONS, OBSERVATIONS = 1, 2
_STEP = 3                                   # the envelopes' ``step`` field
STEP_TAG = bytes(((_STEP << 3) | 2,))


_KEYS: dict[int, bytes] = {}
_DOUBLES: dict[tuple[bytes, int], bytes] = {}   # (map tag, UID) -> a DOUBLE scalar's entry but its 8 bytes
_PACK_DOUBLE = struct.Struct("<d").pack


def _key(uid: int) -> bytes:
    """A map entry's ``key = 1`` field and the tag of its ``value = 2`` (cached per UID)."""
    key = b"\x08" + varint(uid) + b"\x12"
    if len(_KEYS) < 4096:
        _KEYS[uid] = key
    return key


def entry_bytes(tag: bytes, uid: int, tensor: bytes) -> bytes:
    """The map entry ``uid -> tensor`` (a serialized Tensor) of the map field whose tag is ``tag``, serialized.

    >>> entry_bytes(bytes([(OBSERVATIONS << 3) | 2]), 5, b"R\\x00")
    b'\\x12\\x06\\x08\\x05\\x12\\x02R\\x00'
    """
    key = _KEYS.get(uid) or _key(uid)
    n = len(tensor)
    if n + len(key) < 127:           # both lengths fit one byte
        return tag + ONE_BYTE[n + len(key) + 1] + key + ONE_BYTE[n] + tensor
    size = varint(n)
    return b"".join((tag, varint(len(key) + len(size) + n), key, size, tensor))


class Pieces:
    """Map entries of one step message being written by hand, as pieces to send unjoined.

    ``map_field`` is :data:`ACTIONS` (a StepRequest) or :data:`OBSERVATIONS` (a
    StepResponse). :meth:`take` keeps only large tensors (the rest of the
    message is a protobuf message); :meth:`add` takes any tensor (the whole
    map is written here).
    """

    __slots__ = ("tag", "parts", "regions")

    def __init__(self, map_field: int, regions: Any = None):
        self.tag = bytes(((map_field << 3) | 2,))
        self.parts: list[Any] = []    # bytes, and memoryviews of bytes
        #: Shared memory (a :class:`~dmrpc_gym.transport.shared_memory.RegionLink`, active), or None: a tensor
        #: of its ``threshold`` bytes or more that it ``place``\ s travels as a reference into its region.
        self.regions = regions

    def __bool__(self) -> bool:
        return bool(self.parts)

    def add(self, uid: int, value: Any, dtype: Any) -> None:
        """Append the map entry ``uid -> value`` (as :func:`~dmrpc_gym.protocol.tensors.pack` packs it)."""
        if type(value) is np.ndarray:
            if self.regions is not None and value.nbytes >= self.regions.threshold and self._placed(uid, value, dtype):
                return
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
        return entry_bytes(self.tag, uid, tensor)

    def take(self, uid: int, value: Any, dtype: Any) -> bool:
        """Whether ``value`` (the Tensor of ``uid``) is large, and so was added to the pieces."""
        if type(value) is np.ndarray and self.regions is not None and value.nbytes >= self.regions.threshold \
                and self._placed(uid, value, dtype):
            return True
        if type(value) is np.ndarray and value.nbytes >= LARGE:
            arr, c = tensors.prepare(value, dtype)
            if c.kind is MEMORY:
                self._add_memory(uid, arr, c)
                return True
        return False

    def _placed(self, uid: int, value: np.ndarray, dtype: Any) -> bool:
        """Whether the shared memory took ``value`` (its reference then added)."""
        ref = self.regions.place(uid, value, dtype)
        if ref is None:
            return False
        self.add_bytes(uid, ref)
        return True

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


def _entries(buf: Any, pos: int, end: int, map_field: int, found: dict[int, Decoded], kept: list,
             screen: "Screen | None" = None) -> None:
    """Walk a StepRequest/StepResponse: large entries of its map into ``found``, the rest into
    ``kept``; with ``screen`` (a request, and the spec it must keep to), its UIDs are judged on
    the way (:class:`Screen`)."""
    view = memoryview(buf)
    for number, kind, start, stop, value in fields(buf, pos, end):
        if screen is not None and screen.walked(number, kind, value, stop):   # requested: kept there
            if screen.stopped is not None:
                return
            continue
        if number == map_field and kind == 2:
            uid, tensor = 0, None
            for n, k, _, b, v in fields(buf, value, stop):
                if n == 1 and k == 0:
                    uid = v
                elif n == 2 and k == 2:
                    tensor = v, b
                else:
                    raise Unexpected
            if screen is not None and not screen.action(uid):
                return
            if tensor is not None and tensor[1] - tensor[0] >= LARGE:
                try:
                    try:
                        found[uid] = read_tensor(buf, *tensor)
                        continue
                    except Unexpected:            # not a memory kind: an integer payload is judged
                        judge_varints(buf, *tensor, *((None,) if screen is None else screen.action_bound(uid)))
                except ValueError as lie:
                    raise ValueError(f"{_KINDS[map_field]} UID {uid}: {lie}") from None
            found.pop(uid, None)           # a later entry for a UID replaces an earlier one
        kept.append(view[start:stop])


_KINDS = {ACTIONS: "action", OBSERVATIONS: "observation"}
_ENVELOPE_FIELDS = 64


def split(message: Any, map_field: int, specs: Any = None) -> tuple[Any, dict[int, Decoded]]:
    """``message`` (an envelope) without the large tensors of its step's map, and those tensors by UID.

    ``specs`` (a server reading a request: the ``ActionObservationSpecs`` of the agent it goes to,
    :data:`NO_SPECS` for none) bounds the walk of a StepRequest by the spec (:class:`Screen`):
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
        for walked, (number, kind, start, stop, value) in enumerate(fields(message, 0, len(message))):
            if walked >= _ENVELOPE_FIELDS:      # an envelope has one payload: the rest is a flood
                if specs is None:
                    raise Unexpected
                raise ValueError(f"an EnvironmentRequest of more than {_ENVELOPE_FIELDS} fields")
            if number == _STEP and kind == 2:
                kept: list[Any] = []
                screen = None if specs is None or map_field != ACTIONS else Screen(message, specs)
                _entries(message, value, stop, map_field, found, kept, screen)
                steps.append((start, stop, kept, screen))
            elif number in SETTINGS and kind == 2 and map_field == ACTIONS:
                judge_settings(message, value, stop, SETTINGS[number])
    except Unexpected:
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
