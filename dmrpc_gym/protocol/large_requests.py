"""What the server's walk of a large request refuses before protobuf reads it: UIDs the spec lacks,
floods of tiny fields, settings past their number, and integer tensors past what they may decode to.

:func:`~dmrpc_gym.protocol.large_tensors.split` walks every request of :data:`~dmrpc_gym.protocol.large_tensors.LARGE`
bytes or more; given the specs of the agent the request goes to, it judges a StepRequest's UIDs
(:class:`Screen`), and every request's settings (:func:`judge_settings`), so that no request
holds the server's loop or memory for long: protobuf read 16,777,216 UIDs in 0.5 s, a million
settings in 0.7 s, and an int64 tensor of one-byte varints into 8 bytes per byte.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.dtypes import BY_DATA_TYPE, VARINT
from dmrpc_gym.protocol.fidelity import EXACT_UID
from dmrpc_gym.protocol.info import INFO_UID
from dmrpc_gym.protocol.protowire import varint
from dmrpc_gym.protocol.shapes import MAX_TENSOR_BYTES
from dmrpc_gym.protocol.turns import TURN_UID
from dmrpc_gym.protocol.field_reader import LARGE, Unexpected, fields, parts, read_tensor, read_varint
from dmrpc_gym.protocol.wire import pb

__all__ = ["Screen", "judge_settings", "judge_varints", "NO_SPECS", "MAX_WALKED", "MAX_SETTINGS", "SETTINGS"]

_VARINTS = {c.dt: c for c in BY_DATA_TYPE.values() if c.kind is VARINT}   # payload field number == DataType
_HIDDEN = frozenset((INFO_UID, EXACT_UID, TURN_UID))   # observations our clients ask for that no spec lists
#: The specs of a session joined to no agent: every UID is unknown to it.
NO_SPECS = pb.ActionObservationSpecs()


_HIGH = bytes(range(0x80, 0x100))          # bytes that do not end a varint


def judge_varints(buf: Any, pos: int, end: int, most: int | None, elements: int | None = None,
                  bound: str = "") -> None:
    """A large Tensor of an integer (varint) payload in ``buf[pos:end]``: ``ValueError`` when it
    would decode to more than ``most`` bytes (settings, and actions whose spec has a -1 dimension:
    :data:`~dmrpc_gym.protocol.shapes.MAX_TENSOR_BYTES`; None: no bound) or to more than ``elements``
    (an action: its spec's count, ``bound`` saying where it comes from), or its shape does not
    fit it. A varint payload of one byte per element decodes to 8 bytes each (int64): 60 KB of
    gzip made 480 MB in protobuf's repeated field, and as much again in numpy; an 8 MB action of
    8,388,608 elements whose spec holds one cost +218 MB. So whenever its bytes could hold more
    elements than the bound, they are counted from the header on (a MiB at a time by
    ``bytes.translate``, until past the bound), before protobuf reads any of them."""
    try:
        shape, (number, a, b) = parts(buf, pos, end, _VARINTS)
    except Unexpected:
        return                                 # left to protobuf
    c = _VARINTS[number]
    itemsize = c.wire.itemsize
    cap = None if most is None else most // itemsize
    if elements is not None:
        cap = elements if cap is None else min(cap, elements)
    if b - a <= (MAX_TENSOR_BYTES // itemsize if cap is None else cap):
        return                                 # no more elements than bytes: within the bound
    why = bound or f"it decodes to more than the {most} bytes allowed"
    inner = next(fields(buf, a, b), (0, 0, 0, 0, 0))
    if inner[:2] != (1, 2) or inner[3] != b:  # unpacked (a field per element), or more than the array
        if cap is not None:
            raise ValueError(f"an unpacked {c.name} payload of {b - a} bytes, which may hold more than "
                             f"{cap} elements: {why}")
        return
    view, a, count = memoryview(buf), inner[4], 0
    for k in range(a, b, 1 << 20):
        count += len(bytes(view[k:min(b, k + (1 << 20))]).translate(None, _HIGH))
        if cap is not None and count > cap:     # (the rest need not be counted)
            raise ValueError(f"a {c.name} payload of {b - a} bytes holds more than {cap} elements: {why}")
    tensors.check_shape(shape or [], count, c.name)


#: StepRequest ``requested_observations``.
_REQUESTED = 2
#: Fields of a StepRequest (map entries, unpacked UIDs), and UIDs of 2 bytes or more, that the
#: server's walk reads at most (a few ms of its loop); a request with more is refused: no
#: spec has that many. Settings: :data:`MAX_SETTINGS`.
MAX_WALKED = 1 << 12


class Screen:
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
            raise Unexpected
        return True

    def action_bound(self, uid: int) -> tuple[int | None, int | None, str]:
        """What action ``uid`` may decode to (:func:`judge_varints`' ``most``, ``elements`` and
        ``bound``): its spec's count of elements, or :data:`~dmrpc_gym.protocol.shapes.MAX_TENSOR_BYTES`
        where the spec has a -1 dimension (or no such action: the session refuses it by name)."""
        spec = self._specs.actions[uid] if uid in self._specs.actions else None   # (a missing key would be added)
        if spec is None or any(d < 0 for d in spec.shape):
            return MAX_TENSOR_BYTES, None, ""
        count = math.prod(spec.shape)
        return None, count, f"its spec holds {count} (shape {list(spec.shape)})"

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
            uid, pos = read_varint(buf, pos)
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
SETTINGS = {1: 1, 2: 2, 4: 1, 5: 2}        # create_world, join_world, reset, reset_world
#: Settings a request may carry (a world's keyword arguments): past them it is refused before
#: protobuf reads them (a million settings held the server's loop for seconds).
MAX_SETTINGS = 1 << 10


def judge_settings(buf: Any, pos: int, end: int, map_field: int) -> None:
    """``ValueError`` naming the first large memory-kind setting of a request (in ``buf[pos:end]``)
    whose shape does not fit its payload, or saying that it has more than :data:`MAX_SETTINGS`
    fields: refused before protobuf copies or reads the message. Other entries are left to it."""
    for judged, (number, kind, _, stop, value) in enumerate(fields(buf, pos, end)):
        if judged >= MAX_SETTINGS:
            raise ValueError(f"a request of more than {MAX_SETTINGS} settings")
        if number != map_field or kind != 2:
            continue
        name, tensor = None, None
        for n, k, _, b, v in fields(buf, value, stop):
            if n == 1 and k == 2:
                name = bytes(buf[v:b]).decode("utf-8", "replace")
            elif n == 2 and k == 2:
                tensor = v, b
        if tensor is not None and tensor[1] - tensor[0] >= LARGE:
            try:
                try:
                    read_tensor(buf, *tensor)
                except Unexpected:                # not a memory kind: an integer payload is judged
                    judge_varints(buf, *tensor, MAX_TENSOR_BYTES)
            except ValueError as lie:
                raise ValueError(f"setting {name!r}: {lie}") from None
