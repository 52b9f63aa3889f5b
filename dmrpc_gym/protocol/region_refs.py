"""Tensors that travel as references into shared memory: their bytes on the wire, and the walk that finds them.

Between our client and our server on one host (:mod:`~dmrpc_gym.transport.shared_memory`), a large
memory-kind tensor of a step travels through a region both ends map; the step message carries
only where it lies. Both are fields that only our two ends write and read (protobuf keeps fields
it does not know, and no foreign peer ever gets one: they are used only after a negotiation):

- a **reference** is a ``Tensor`` with its ``shape`` and, in field :data:`REF` (no payload), the
  packed varints ``region, offset, data type``: the tensor's bytes are ``prod(shape) * itemsize``
  bytes of that region at that offset;
- **targets** are field :data:`REF` of a ``StepRequest``: the packed varints ``uid, offset,
  capacity`` of each observation the client wants written into its region (at most ``capacity``
  bytes at ``offset``), told with every step so that the answer to each step has its own.

:func:`read` takes them out of a step message (an envelope), leaving the rest for protobuf.

>>> ref = reference((2, 3), 6, 4096)
>>> message = b"".join(entries(OBSERVATIONS_TAG, {7: ref}))
>>> envelope = STEP_TAG + varint(len(message)) + message
>>> read(envelope, OBSERVATIONS)
(b'\\x1a\\x00', {7: ((2, 3), 6, 0, 4096)}, {})
>>> read(STEP_TAG + varint(len(targets({5: (128, 4096)}))) + targets({5: (128, 4096)}), ACTIONS)
(b'\\x1a\\x00', {}, {5: (128, 4096)})
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from dmrpc_gym.protocol.dtypes import BY_DATA_TYPE, MEMORY
from dmrpc_gym.protocol.field_reader import REF, Ref, Unexpected, fields, map_entry, read_reference, read_varints
from dmrpc_gym.protocol.large_tensors import ACTIONS, OBSERVATIONS, STEP_TAG, entry_bytes
from dmrpc_gym.protocol.protowire import remember, varint

__all__ = ["STEP_TAG", "large_specs", "REF", "REQUEST_HEADER", "OFFER_HEADER", "reference", "targets", "entries", "read", "Ref",
           "OBSERVATIONS_TAG", "ACTIONS_TAG", "MAX_REFS"]

_REF_TAG = varint((REF << 3) | 2)
_SHAPE_TAG = bytes(((15 << 3) | 2,))          # Tensor ``shape``
_STEP = 3
OBSERVATIONS_TAG = bytes(((OBSERVATIONS << 3) | 2,))
ACTIONS_TAG = bytes(((ACTIONS << 3) | 2,))
#: The request header with which our client asks for shared memory: a nonce (32 digits) that binds the
#: side channel to this gRPC stream (sent only when ``shared_memory`` is on).
REQUEST_HEADER = "dmrpc-shared-memory"
#: The response header with which our server offers it: the name of its abstract Unix socket.
OFFER_HEADER = "dmrpc-gym-shared-memory"
#: References and targets one message may hold (more: a flood, refused).
MAX_REFS = 1024


def reference(shape: Iterable[int], data_type: int, offset: int, region: int = 0) -> bytes:
    """The serialized ``Tensor`` that says: ``shape`` elements of ``data_type`` at ``offset`` of ``region``."""
    dims = b"".join(varint(int(d)) for d in shape)
    ref = varint(region) + varint(offset) + varint(data_type)
    head = _SHAPE_TAG + varint(len(dims)) + dims if dims else b""
    return head + _REF_TAG + varint(len(ref)) + ref


def targets(spans: Mapping[int, tuple[int, int]]) -> bytes:
    """The ``StepRequest`` field that asks for observations ``uid -> (offset, capacity)`` in the region."""
    packed = b"".join(varint(uid) + varint(offset) + varint(capacity) for uid, (offset, capacity) in spans.items())
    return _REF_TAG + varint(len(packed)) + packed


def entries(tag: bytes, tensors: Mapping[int, bytes]) -> list[bytes]:
    """Map entries ``uid -> serialized Tensor`` of the map whose tag is ``tag``."""
    return [entry_bytes(tag, uid, tensor) for uid, tensor in tensors.items()]


def large_specs(specs: Mapping[int, Any], threshold: int, uids: Iterable[int] | None = None) -> dict[int, tuple[int, int]]:
    """The tensors of ``specs`` (``uid -> TensorSpec``; only ``uids`` where given) that may go through a
    region: of a memory-kind data type and a fixed shape of ``threshold`` bytes or more, as
    ``uid -> (nbytes, data type)``."""
    found = {}
    for uid in specs if uids is None else uids:
        spec = specs.get(uid)
        c = None if spec is None else BY_DATA_TYPE.get(spec.dtype)
        if c is None or c.kind is not MEMORY or any(d < 0 for d in spec.shape):
            continue
        nbytes = math.prod(spec.shape) * c.wire.itemsize
        if nbytes >= threshold:
            found[uid] = nbytes, spec.dtype
    return found


#: Map entries (their bytes) read as references before -> ``(uid, reference)``; StepRequests read before ->
#: what :func:`read` gave for them (a step's entries and requests repeat: each is walked once).
_ENTRIES: dict[bytes, tuple[int, Ref]] = {}
_REQUESTS: dict[bytes, tuple[Any, dict, dict]] = {}
_MEMO, _SMALL = 1024, 1 << 12


def read(message: Any, map_field: int) -> tuple[Any, dict[int, Ref], dict[int, tuple[int, int]]]:
    """``message`` (an EnvironmentRequest or EnvironmentResponse) without its references and targets,
    the references of its step's ``map_field`` map by UID, and its targets (a StepRequest's) by UID.

    A message that is no step comes back as it is. ``ValueError`` names what is malformed (a
    reference that is no reference, more than :data:`MAX_REFS`)."""
    if message.find(_REF_TAG) < 0:         # (in C: no field REF anywhere; a payload's bytes may hold its tag)
        return message, {}, {}
    if map_field == ACTIONS and len(message) <= _SMALL:
        key = message if type(message) is bytes else bytes(message)      # (a bytearray is no key)
        known = _REQUESTS.get(key)
        if known is None:
            known = remember(_REQUESTS, key, _read(key, map_field), _MEMO)
        return known[0], dict(known[1]), dict(known[2])
    return _read(message, map_field)


def _read(message: Any, map_field: int) -> tuple[Any, dict[int, Ref], dict[int, tuple[int, int]]]:
    try:
        walk = fields(message, 0, len(message))
        number, kind, start, stop, value = next(walk)
        if number != _STEP or kind != 2 or stop != len(message):
            return message, {}, {}
    except (Unexpected, StopIteration):
        return message, {}, {}             # protobuf says what is wrong with it
    refs: dict[int, Ref] = {}
    spans: dict[int, tuple[int, int]] = {}
    kept: list[Any] = []
    view = memoryview(message)
    try:
        for number, kind, a, b, v in fields(message, value, stop):
            if number == REF and kind == 2 and map_field == ACTIONS:
                packed = read_varints(message, v, b)
                if len(packed) % 3 or len(packed) // 3 > MAX_REFS:
                    raise ValueError(f"shared-memory targets hold triples (uid, offset, capacity), at most "
                                     f"{MAX_REFS}; got {len(packed)} numbers")
                for i in range(0, len(packed), 3):
                    spans[packed[i]] = packed[i + 1], packed[i + 2]
                continue
            if number == map_field and kind == 2 and message.find(_REF_TAG, a, b) >= 0:
                entry = bytes(view[a:b])
                known = _ENTRIES.get(entry)
                if known is None:
                    try:
                        uid, ta, tb = map_entry(message, v, b)
                    except Unexpected:         # not as protobuf writes one: left to protobuf
                        kept.append(view[a:b])
                        continue
                    ref = read_reference(message, ta, tb)
                    if ref is not None and len(entry) <= 64:
                        remember(_ENTRIES, entry, (uid, ref), _MEMO)
                else:
                    uid, ref = known
                if ref is not None:
                    if len(refs) >= MAX_REFS:
                        raise ValueError(f"a step message with more than {MAX_REFS} tensor references")
                    refs[uid] = ref
                    continue
            kept.append(view[a:b])
    except Unexpected:
        raise ValueError("a step message with shared-memory references that cannot be read") from None
    if not refs and not spans:
        return message, refs, spans
    body = b"".join(kept)
    return b"".join((view[:start], STEP_TAG, varint(len(body)), body, view[stop:])), refs, spans
