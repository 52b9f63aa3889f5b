"""A :class:`~dmrpc_gym.client.agent.RemoteAgent`'s steady-state step: a fill and one round trip.

After the first step of an episode, a step's request and answer nearly always have the same layout
(the same UIDs, shapes, dtypes and envelope; only tensor bytes change). :class:`SteadyStep` learns the
answer's layout from a step the general path took and then, per step: takes the request's whole DATA
frame from a memo (built once per action value by the general encoder: the HTTP/2 frame header, the
gRPC prefix, the envelope and the map entries), sends it and checks the answer against the layout in
one :meth:`~dmrpc_gym.transport.client.steady.SteadyTrips.round_trip` (made by
:meth:`~dmrpc_gym.Connection.steady_write`), and reads the observations at their
known offsets straight into arrays. An answer that the general read takes (framed otherwise, or
a vector env's pipelined ``receive_step``) is still read at the offsets when its bytes have the layout
(:meth:`SteadyStep.decode`, which ``Connection._read_one`` calls before protobuf would). The gym-level
wrapping (reward, discount, the observation's space, ``info``) is the general path's own ``step_result``.

What it assumes (anything else takes the general path, which stays the reference):

- for the round trip: our own HTTP/2 transport (not a grpcio channel), the connection up (its first
  answer in), no answers owed (nothing pipelined), and the transport's assumptions
  (:mod:`~dmrpc_gym.transport.client.steady`);
- actions: int / bool / numpy integer values have their frame memoized per ``(type, value)``, and small numeric
  arrays (a Box's) by their bytes (:func:`action_key`, as the general path memoizes their StepRequest); other
  actions are checked and encoded by the general path each step, then framed here; large actions (sent outside
  protobuf) go the general way; a vector step sends its sub-envs' frames together
  (:mod:`~dmrpc_gym.client.steady_batch`) and its answers come to :meth:`SteadyStep.taken`;
- answers: every observation a float32, float64, int8 or uint8 tensor (fixed width: a value changes
  no length) or a reference into the connection's shared memory where this agent asked for it there
  (:mod:`~dmrpc_gym.transport.shared_memory`: the reference's bytes are fixed bytes of the layout, the values
  are read from the region), the answer under :data:`~dmrpc_gym.protocol.field_reader.LARGE` bytes, and the
  same observations in the same order with the same shapes as the answer the layout was learned from (a
  RUNNING one); its state RUNNING or, read by :meth:`SteadyStep.decode` only (a round trip hands such an
  answer to the general read), TERMINATED or INTERRUPTED in the same byte (an episode's end: a vector env of
  short episodes meets one every few steps), with the discount and the reward in their slots as ever;
  the ``info`` and exact-extras observations, where the agent asks for them, come last, each at most
  once, as the tail of the layout (:class:`~dmrpc_gym.transport.ByteLayout`): of any size, provided the
  envelope's length keeps the width of its varint, and read by :meth:`SteadyStep._tail` as the general
  read takes them (any other tail: the general read);
- a little-endian machine (protobuf's byte order is then numpy's native one).

The layout checks itself when it is learned: the observations it reads from that answer must equal,
in dtype, shape and value, what the general path read; else this agent keeps to the general path until
its specs change. ``DMRPC_STEADY_STEP=0`` in the environment turns the steady path off (read when an
agent's specs are applied), so that the general path can be measured and tested.
"""
from __future__ import annotations

import os
import sys
from types import MappingProxyType
from typing import Any, Hashable

import numpy as np
from google.protobuf.message import DecodeError

from dmrpc_gym.client.connection import REQUEST_TAGS
from dmrpc_gym.client.fidelity import NOTHING_SAID, exactly
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.fidelity import EXACT_UID
from dmrpc_gym.protocol.info import INFO_UID, unpack_info
from dmrpc_gym.protocol.field_reader import LARGE, OBSERVATIONS_FIELD, STATE_FIELD, Unexpected, fields, map_entry, \
    running_step
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.client.states import State
from dmrpc_gym.transport import STEADY_STEP_ENV, NOT_SENT, ByteLayout, grpc_frame

__all__ = ["SteadyStep", "STEADY_STEP_ENV", "action_key", "enabled", "steady_step"]

_MEMO = 256                          # frames remembered per agent, as the general path's StepRequests
#: An answer shorter than this is copied whole once, its observations sliced out of the copy (fewer calls than
#: copying each out of it: callgrind counts); a longer one has each observation copied out once (fewer bytes).
_WHOLE = 4096
_MEMO_TYPES = (int, bool, np.integer, np.bool_, type(None))    # (None: no actions, the step that starts a sequence)
_MEMO_BYTES = 256                    # an array action's bytes, at most, for its request to be remembered
_frombuffer = np.frombuffer
_RUNNING = State.RUNNING
#: The states an answer of the learned layout may say besides RUNNING, and their byte on the wire.
_ENDS = ((State.TERMINATED, pb.TERMINATED), (State.INTERRUPTED, pb.INTERRUPTED))
_NOTHING = (None, None)


def action_key(action: Any) -> Hashable | None:
    """What an action's request is remembered by: ``(type, value)`` for integers, bools and None (no actions);
    a small numeric array (a Box's) by its dtype, shape and bytes (numbers only: their bytes say them); None
    for anything else (its request is built every step).

    >>> action_key(2), action_key(np.array([0.5], np.float32)), action_key("left")
    ((<class 'int'>, 2), (<class 'numpy.ndarray'>, '<f4', (1,), b'\\x00\\x00\\x00?'), None)
    """
    kind = type(action)
    if kind is np.ndarray:
        return (kind, action.dtype.str, action.shape, action.tobytes()) \
            if action.nbytes <= _MEMO_BYTES and action.dtype.kind in "biuf" else None
    return (kind, action) if isinstance(action, _MEMO_TYPES) else None


def enabled() -> bool:
    """Whether steady-state steps are on (``DMRPC_STEADY_STEP`` is not ``0``) on this machine."""
    return os.environ.get(STEADY_STEP_ENV, "1") != "0" and sys.byteorder == "little"


def steady_step(agent: Any) -> SteadyStep | None:
    """A :class:`SteadyStep` for ``agent`` where its connection's transport has a steady link (ours
    does, a grpcio channel does not) and :func:`enabled`; else None."""
    link = agent.connection.steady_link
    return SteadyStep(agent, link) if link is not None and enabled() else None


class SteadyStep:
    """The steady-state step of one agent (see the module's docstring); None from :meth:`step` means
    it sent nothing: take the general path.

    >>> from dmrpc_gym.server import Server
    >>> from dmrpc_gym.worlds.catch import Catch
    >>> from dmrpc_gym.client.env import DmRpcEnv
    >>> with Server(Catch) as server, DmRpcEnv(server.address) as env:
    ...     _ = env.reset(seed=1)
    ...     steps = [env.step(np.int8(0)) for _ in range(3)]
    ...     steady = env._agent.steady
    ...     steady.layout is not None, steps[-1][0].shape
    (True, (10, 10))
    """

    def __init__(self, agent: Any, link: Any):
        self.agent = agent
        self.link = link
        self.frames: dict[tuple, tuple[bytes, int]] = {}
        self.memo_types: set[type] = set()
        #: The answer's layout, once learned (None: not yet, or not learnable).
        self.layout: ByteLayout | None = None
        self.slots: tuple[tuple[str, int, int, np.dtype, tuple, int], ...] = ()   # (name, start, stop, dtype, shape, uid)
        #: The observations read from shared memory: ``(name, read)``, ``read(copy)`` the region's reader of
        #: each (its place checked once: ``Region.reader``).
        self.region_slots: tuple[tuple[str, Any], ...] = ()
        #: The info and exact-extras observations of the answer just read (see :meth:`_tail`).
        self.hidden: tuple[pb.Tensor | None, pb.Tensor | None] = _NOTHING
        self.asked = {uid for uid in (INFO_UID, EXACT_UID) if uid in agent.requested}
        self.given_up = False
        #: The layouts an answer is checked against, in turn: ``(state, layout, size, pieces, hidden)`` (the
        #: message's size and fixed pieces ``(start, stop, bytes)``: what is checked when no tail came; ``hidden``:
        #: what :meth:`_tail` read of a tail that is part of the pieces, or None), RUNNING's first.
        self.candidates: tuple = ()
        #: The candidates' layouts, in their order (what a vector step's read checks an answer against).
        self.layouts: tuple[ByteLayout, ...] = ()
        self.cuts: list[tuple[int, int]] = []   # the slots' (start, stop), in order
        #: What a round trip whose answer has :attr:`layout` read of its tail (see :meth:`_constant`), and what
        #: its exact extras say (read once, read-only; None: nothing learned).
        self.first_hidden, self.said = _NOTHING, None
        #: The state of the answer :meth:`decode` read last (what :meth:`wrap` says).
        self.state = _RUNNING
        #: The latest answer :meth:`decode` saw while no layout was learned (what :meth:`learn` learns from).
        self.seen: bytes | None = None

    # -- a step ----------------------------------------------------------------------------------
    def step(self, action: Any) -> tuple | None:
        """``(obs, reward, terminated, truncated, info)`` for ``action``; None when nothing was sent."""
        kind = type(action)
        framed = self.frames.get((kind, action)) if kind in self.memo_types else None
        if framed is None:
            framed = self.frame(action)
            if framed is None:
                return None
        self.hidden = self.first_hidden
        message = self.agent.connection.steady_write(self.link, framed, self.layout)
        if message is None:
            return self.agent.receive_step()     # (which learns the layout, when there is none yet)
        if message is NOT_SENT:
            return None
        if self.hidden is not self.first_hidden:  # a tail read by _tail: of the exact extras alone?
            self._constant(bytes(message))
        return self.wrap(self._named(message))

    def frame(self, action: Any) -> tuple[bytes, int] | None:
        """The general encoder's request for ``action`` (None: no actions, the step that starts a sequence),
        framed: ``(data, payload size)``, remembered by the action's :func:`action_key`
        (integers, None and small numeric arrays; :attr:`frames`); None where it has large actions (sent outside
        protobuf: the general way)."""
        key = action_key(action)
        framed = self.frames.get(key) if key is not None else None
        if framed is not None:                   # (a Box's array: looked up by its bytes)
            return framed
        request, pieces = self.agent.step_request(action)
        if pieces:
            return None
        body = request.SerializeToString()
        data = grpc_frame(REQUEST_TAGS["step"] + tensors.varint(len(body)) + body, self.link.stream.id)
        framed = data, len(data) - 9
        if key is not None and len(self.frames) < _MEMO:
            if type(action) is not np.ndarray:   # (looked up by (type, value) before any call: see step)
                self.memo_types.add(type(action))
            self.frames[key] = framed
        return framed

    def decode(self, message: bytes) -> dict | None:
        """The observations of an answer (however it was framed) that has the learned layout, by name;
        else None (the general path reads it). Only reads: :meth:`wrap` makes the step's result."""
        if self.layout is None:
            self.seen = message                  # what the layout is learned from, if this step is one
            return None
        self.hidden, view = _NOTHING, None
        for state, layout, size, pieces, hidden in self.candidates:     # RUNNING's first: the others at an end
            if len(message) == size:             # (with a tail: none came, or the one of the pieces)
                for a, b, piece in pieces:
                    if message[a:b] != piece:
                        break
                else:
                    if hidden is not None:
                        self.hidden = hidden
                    break
            elif layout.tail is not None:        # a tail came: its lengths checked as a frame, as a round trip does
                if view is None:
                    view = memoryview(grpc_frame(message, self.link.stream.id))
                checks = layout.fitting(view, len(view))
                if checks is None:
                    continue
                for a, b, piece in checks:
                    if view[a:b] != piece:
                        break
                else:
                    if state is _RUNNING:
                        self._constant(bytes(message))
                    break
        else:
            return None
        self.state = state
        if len(message) < _WHOLE:
            return self._named(bytearray(message))
        return self._named(message, False)

    def _named(self, message: bytes | bytearray, sliced: bool = True) -> dict:
        """The observations at their offsets in ``message``, each an array of its own (writable): ``sliced``,
        over a slice of a ``bytearray`` (a round trip's, fresh each step: the slice is the copy); else copied
        once out of ``message`` (no copy of the whole message first: a large observation costs one copy)."""
        named = {}
        if sliced:
            for name, a, b, dtype, shape, _ in self.slots:
                array = _frombuffer(message[a:b], dtype)
                array.shape = shape
                named[name] = array
        else:
            for name, a, b, dtype, shape, _ in self.slots:
                array = _frombuffer(message, dtype, (b - a) // dtype.itemsize, a).copy()
                array.shape = shape
                named[name] = array
        if self.region_slots:
            copy = self.agent.connection.regions.copy
            for name, read in self.region_slots:
                named[name] = read(copy)
        return named

    def taken(self, message: bytearray, k: int) -> tuple:
        """The step's result from ``message``, an answer of the layout of :attr:`candidates` ``[k]`` that a vector
        step's read took (:meth:`~dmrpc_gym.transport.client.steady.SteadyTrips.take_answers`, which checked it
        against them in turn, with :attr:`hidden` set to nothing first): as :meth:`decode` and :meth:`wrap` take it."""
        state, layout, _, _, hidden = self.candidates[k]
        if len(message) + 14 == layout.total:    # no tail came, or the one of its pieces
            self.hidden = _NOTHING if hidden is None else hidden
        elif state is _RUNNING:                  # a tail came, read by _tail as the check took it
            self._constant(bytes(message))
        self.state = state
        return self.wrap(self._named(message), state)

    def wrap(self, named: dict, state: State = _RUNNING) -> tuple:
        """The step's ``(obs, reward, terminated, truncated, info)`` from its observations (an answer of the
        learned layout, saying ``state``: :attr:`state` for one :meth:`decode` read, whose tail :meth:`_tail`
        read): the general path's own ``step_result``, as its ``_stepped`` calls it."""
        agent = self.agent
        agent.state = state
        agent.last_observations = named
        info, extras = self.hidden
        carried = None if info is None else agent.read_info(info)
        result = agent.step_result(named, state, carried)
        if extras is None:
            if agent.exact is not None:
                agent.exact.said = NOTHING_SAID
            return result
        return exactly(result, extras, agent.exact, agent.reward.fn is None and agent.reward.name == "reward",
                       self.said if extras is self.first_hidden[1] else None)

    def _tail(self, buf: Any, start: int, stop: int) -> bool:
        """Whether ``buf[start:stop]``, an answer's tail, is the ``info`` and exact-extras entries the agent
        asks for, each at most once, as the general read would take them (then :attr:`hidden`: a step sets it
        to nothing before its answer comes, an answer without a tail keeps it so)."""
        found = {}
        try:
            for number, kind, _, end, value in fields(buf, start, stop):
                if number != OBSERVATIONS_FIELD or kind != 2:
                    return False
                uid, a, b = map_entry(buf, value, end)
                if uid not in self.asked or uid in found:
                    return False
                found[uid] = pb.Tensor.FromString(bytes(buf[a:b]))
        except (Unexpected, DecodeError):
            return False
        self.hidden = found.get(INFO_UID), found.get(EXACT_UID)
        return True

    # -- learning the layout ----------------------------------------------------------------------
    def learn(self, result: tuple) -> tuple:
        """Learn the answer's layout from the step the general path just took (which gave ``result``,
        returned as it is), if none is learned yet, if it is one this path can take, and if reading it
        here gives what the general path gave."""
        self._learn()
        return result

    def _learn(self) -> None:
        agent, raw, self.seen = self.agent, self.seen, None
        if self.layout is not None or self.given_up or raw is None or agent.state != _RUNNING or len(raw) >= LARGE:
            return
        raw = bytes(raw)
        try:
            slots, tail, state_at = self._walk(raw)
        except (Unexpected, KeyError, ValueError):
            self.given_up = True
            return
        if tail is not None and not self._tail(raw, tail, len(raw)):
            self.given_up = True
            return
        order = {name: i for i, name in enumerate(agent.last_observations)}   # the general path's order
        if len(order) != len(slots) + len(self.region_slots):
            self.given_up = True
            return
        self.slots = tuple(sorted(slots, key=lambda slot: order.get(slot[0], -1)))
        named = {}
        for name, a, b, dtype, shape, _ in self.slots:
            array = np.frombuffer(bytearray(raw[a:b]), dtype)
            array.shape = shape
            named[name] = array
        for name, read in self.region_slots:
            named[name] = read(True)
        named = {name: named[name] for name in sorted(named, key=lambda name: order.get(name, -1))}
        if not _same(named, agent.last_observations):
            self.given_up = True
            return
        cuts = sorted((a, b) for _, a, b, *_ in self.slots)
        candidates = [self._candidate(_RUNNING, raw, cuts, tail)]
        if state_at is not None:                 # the same answer, saying that the sequence ended
            candidates += [self._candidate(state, raw[:state_at] + bytes((byte,)) + raw[state_at + 1:], cuts, tail)
                           for state, byte in _ENDS]
        self.candidates, self.cuts = tuple(candidates), cuts
        self.layouts = tuple(candidate[1] for candidate in candidates)
        self.layout = candidates[0][1]

    def _constant(self, raw: bytes) -> None:
        """Where ``raw``, a running answer of the learned layout whose tail :meth:`_tail` just read, holds the
        exact extras alone (they say the reward's type: Pendulum's ``np.float64``, the same bytes every step),
        and no such answer was learned yet: it becomes the first of :attr:`candidates`, its tail a part of its
        pieces, read once (:attr:`hidden` now); and the layout a round trip checks (:attr:`layout`, with
        :attr:`first_hidden`)."""
        info, extras = self.hidden
        if info is not None or extras is None or self.candidates[0][4] is not None:
            return
        try:
            said = MappingProxyType(unpack_info(extras.strings.array[0]))
        except (ValueError, IndexError):       # (what wrap's exactly then says of them, as the general read's)
            return
        state, layout, size, pieces, _ = self._candidate(_RUNNING, raw, self.cuts, None)
        self.candidates = ((state, layout, size, pieces, self.hidden), *self.candidates)
        self.layouts = (layout, *self.layouts)
        self.layout, self.first_hidden, self.said = layout, self.hidden, said

    def _candidate(self, state: State, raw: bytes, cuts: list, tail: int | None) -> tuple:
        """``(state, layout, size, pieces, None)`` of answers like ``raw`` (see :attr:`candidates`): with a tail,
        the size and pieces of such an answer that has none (the layout's checks of a frame, less the frame's
        header and the gRPC prefix, which follow from the size: -1 where no such answer can be)."""
        layout = ByteLayout(raw, self.link.stream.id, cuts, tail, self._tail)
        if tail is not None:
            pieces = [(max(a - 14, 0), b - 14, piece[max(14 - a, 0):]) for a, b, piece in layout.checks if b > 14]
            return state, layout, layout.total - 14 if layout.total >= 0 else -1, tuple(pieces), None
        pieces, at = [], 0
        for a, b in [*cuts, (len(raw), len(raw))]:
            if a > at:
                pieces.append((at, a, raw[at:a]))
            at = b
        return state, layout, len(raw), tuple(pieces), None

    def _walk(self, raw: bytes):
        """The observation slots ``(name, start, stop, dtype, shape)`` of a StepResponse envelope, where
        its info and exact-extras entries begin (they must come last; the end where the agent asks for them
        and none came; None where it asks for neither), and where its state's one byte is (None: not one
        byte of its own); ``Unexpected`` where the answer is not of a layout taken here."""
        regions = self.agent.connection.regions
        refs = {} if regions.region is not None else None
        values, tail, body = running_step(raw, self.asked, refs)
        by_uid = self.agent.specs.observations.by_uid
        slots = [(by_uid[uid].name, a, b, dtype, shape, uid) for uid, dtype, shape, a, b in values]
        region_slots = []
        for uid, (dtype, shape, number, offset, dt) in (refs or {}).items():    # the general read's own check
            if regions.reads is None or regions.refused(uid, shape, dt, number, offset) is not None:
                raise Unexpected
            region_slots.append((by_uid[uid].name, regions.region.reader(offset, dtype, shape)))
        self.region_slots = tuple(region_slots)
        state_at = None
        for number, kind, start, stop, _ in fields(raw, body, len(raw)):
            if number == STATE_FIELD and kind == 0 and stop - start == 2:
                state_at = start + 1
        return slots, len(raw) if tail is None and self.asked else tail, state_at


def _same(ours: dict, theirs: dict) -> bool:
    """Whether two ``{name: array}`` hold the same names, dtypes, shapes and values (NaN equal to NaN)."""
    if list(ours) != list(theirs):
        return False
    for name, array in ours.items():
        other = theirs[name]
        if not isinstance(other, np.ndarray) or array.dtype != other.dtype or array.shape != other.shape \
                or not np.array_equal(array, other, equal_nan=array.dtype.kind == "f"):
            return False
    return True
