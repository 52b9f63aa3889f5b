"""A gym agent's steady-state step on the server: a request seen before, an answer of a known layout.

After the first steps, a client sends the same few step requests again and again (a Discrete action's
request is one of ``n`` byte strings), and the answers keep one layout (the same observations, shapes and
dtypes; only their bytes change). :class:`SteadyServe` remembers, per request bytes, the action the
general path decoded from them and the plan of observations it asked for, and per plan the answer's
layout learned from a general answer: the bytes between its slots (the envelope, the map entries, the
state, the discount). :meth:`SteadyServe.answer` then steps the env inline and writes the observation's
and reward's bytes into the slots: no protobuf parse, no spec checks, no coroutine, no generic encoder.
:mod:`dmrpc_gym.transport.server.steady` calls it for a read that is exactly one such request.

What it assumes (anything else declines before anything is done, and the general path answers):

- a :class:`~dmrpc_gym.server.worlds.gym_world.GymAgent` (not a subclass: their steps differ), running, not
  interrupted, on the interface the request was learned on, whose lane runs the step inline now (as the
  general path would, :meth:`~dmrpc_gym.server.running.workers.Lane.inline`);
- the request: small, read by protobuf (no large actions), seen before with an action that is an
  immutable scalar (a Discrete's numpy integer, a Python number) or a numeric numpy array (a Box's: kept
  read-only, and each step given a fresh copy of it, as the general path gives a freshly decoded one),
  no frame asked for;
- the answer: its layout learned (a running step, observations of float32, float64, int8 or uint8 and a
  DOUBLE reward; with it, where the answer is the same but for its state and its discount, those of a step
  that ends the sequence; the step that starts the next fills the running one; ``info`` and the exact
  extras, where asked for, last) and its size within ``room``; observations the request asked for in shared
  memory (:mod:`~dmrpc_gym.transport.shared_memory`) are written there, at the targets of the request the
  layout was learned from (part of its bytes), their references being fixed bytes of the layout.
  An ``info`` is written by the general path's info encoder and goes at the end, the envelope's length
  grown by its size; so do the exact extras of a running step whose reward is a number of another type
  than ``float`` (Pendulum's ``np.float64``: they say only that type, the same bytes every step, made once
  per type by the general path's own functions).

Once the env has stepped there is no declining: a step that does not fit the layout (exact extras to say
of the observation's scalars or of an end both terminated and truncated, a reward that is no number, an
observation of another dtype or shape) is written by the general encoder, the very code the general path
runs after its step. ``DMRPC_STEADY_STEP=0`` turns this off
(read per connection, :class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol`).
"""
from __future__ import annotations

import os
import struct
from time import perf_counter
from typing import Any, Callable

import numpy as np

from dmrpc_gym.protocol.large_tensors import OBSERVATIONS, STEP_TAG, entry_bytes
from dmrpc_gym.protocol.fidelity import EXACT_UID, exact_step
from dmrpc_gym.protocol.info import INFO_UID, info_tensor_bytes, pack_info
from dmrpc_gym.protocol.protowire import remember, varint
from dmrpc_gym.protocol.field_reader import STATE_FIELD, Unexpected, fields, running_step
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.transport import STEADY_STEP_ENV
from dmrpc_gym.server.worlds.gym_world import GymAgent, Sequence
from dmrpc_gym.server.worlds.interface import KIND_DISCOUNT, KIND_ENV, KIND_EXACT, KIND_INFO, KIND_REWARD, StepAnswer, \
    sequence_state
from dmrpc_gym.server.running.workers import NOT_NOW

__all__ = ["SteadyServe"]

_MEMO = 256                         # request byte strings remembered per agent
_SMALL = 1 << 12                    # requests longer than this are not remembered
_IMMUTABLE = (np.generic, int, float, bool)
_ARRAY = np.ndarray
_NUMBERS = (int, np.number, np.bool_)     # rewards whose exact extras name only their type (exact_step)
_PACK_DOUBLE, _UNPACK_DOUBLE = struct.Struct("<d").pack, struct.Struct("<d").unpack
_ENTRY_TAG = bytes(((OBSERVATIONS << 3) | 2,))       # an entry of the StepResponse's observations map
_HIDDEN = (KIND_INFO, KIND_EXACT)                            # observations no spec lists: they go last
_RUNNING, _IDLE = Sequence.RUNNING, Sequence.IDLE
_RUNNING_STATE = pb.RUNNING
_REWARD_SLOT = ""                   # the slot name of the reward (observation names are never empty)


class _Layout:
    """An answer's bytes: ``pieces`` around ``slots`` (``(name, dtype, shape)``; the reward's name is "").

    Where the plan asks for ``info`` (``info``), an ``info`` entry goes last: the answer is then the
    envelope's tag (``STEP_TAG``) and length (of ``body`` bytes and the entry's), ``first`` (the rest of ``pieces[0]``),
    the other pieces and slots, and the entry. ``pieces[0]`` has the length of an answer without one.
    """

    __slots__ = ("pieces", "slots", "size", "whole", "info", "body", "first", "info_first", "ends", "regions",
                 "grown")

    def __init__(self, pieces: list[bytes], slots: list[tuple], whole: str | None, info: bool, first: bytes,
                 body: int, regions: tuple = ()):
        self.pieces, self.slots = pieces, tuple(slots)
        #: Observations written into shared memory: ``(name, dtype, shape, offset)``.
        self.regions = regions
        #: The observation's one array, where an ndarray observation is it as it is (ValueCodec.whole).
        self.whole = whole
        self.info, self.body, self.first = info, body, first
        #: Where both are asked for, whether ``info`` comes before the exact extras (the plan's order).
        self.info_first = True
        #: The layouts of the same answer saying that the sequence ended, by state (TERMINATED, INTERRUPTED).
        self.ends: dict[int, _Layout] = {}
        #: ``pieces[0]`` of an answer with a tail (``info``, exact extras) of so many bytes: its envelope grown.
        self.grown: dict[int, bytes] = {}
        self.size = len(pieces[0]) - len(first) + body     # without an info entry


class SteadyServe:
    """The steady-state answers of one joined agent (see the module's docstring).

    >>> import asyncio, gymnasium as gym
    >>> from dmrpc_gym.server import Server
    >>> from dmrpc_gym.client.env import DmRpcEnv
    >>> with Server("CartPole-v1") as server, DmRpcEnv(server.address) as env:
    ...     _ = env.reset(seed=1)
    ...     steps = [env.step(1) for _ in range(3)]
    >>> steps[-1][0].dtype, steps[-1][2]
    (dtype('float32'), False)
    """

    def __init__(self, agent: GymAgent, failure: Callable[[str, Exception], bytes], regions: Any = None):
        self.agent, self.failure = agent, failure
        self.regions = regions               # the stream's shared memory (a RegionLink), or None
        self.interface = agent.interface
        self.kinds = bool(len(agent.interface.scalar_kinds))   # (scalar leaves: their kinds may need saying)
        self.requests: dict[bytes, tuple] = {}       # request bytes -> (action, plan, layout)
        self.layouts: dict[Any, _Layout | None] = {}  # plan -> the answer's layout (None: none fits)
        self.extras: dict[type, bytes | None] = {float: b""}   # reward type -> its running step's exact entry

    @classmethod
    def of(cls, agent: Any, failure: Callable[[str, Exception], bytes], regions: Any = None) -> SteadyServe | None:
        """The steady path of ``agent`` (None for agents other than a GymAgent's, or with the switch off)."""
        if type(agent) is not GymAgent or os.environ.get(STEADY_STEP_ENV, "1") == "0":
            return None
        return cls(agent, failure, regions)

    # -- an answer ------------------------------------------------------------------------------
    def answer(self, raw: bytes, room: int) -> bytes | None:
        """The serialized answer to the step request ``raw``, or None (nothing done: the general path answers)."""
        try:
            action, plan, layout = self.requests[raw]
        except KeyError:
            return None
        agent = self.agent
        if agent.sequence is not _RUNNING or agent.interface is not self.interface or layout.size > room:
            if agent.sequence is _IDLE and agent.interface is self.interface and layout.size <= room:
                return self._start(plan, layout)
            return None
        if type(action) is _ARRAY:
            action = action.copy()               # the env's own, as a freshly decoded one is
        lane = agent.lane
        spent = lane.spent
        try:
            stepped = lane.inline(agent.env.step, action)
            if stepped is NOT_NOW:
                return None                      # a step for a worker thread: the general path's
            obs, raw_reward, terminated, truncated, info = stepped
        except Exception as exc:  # noqa: BLE001 - the env's error is the answer
            return self.failure("step", agent.step_failed(exc))
        try:
            extras = b"" if type(raw_reward) is float or not plan.exact else self.extras.get(type(raw_reward))
            if terminated or truncated or extras is None \
                    or (self.kinds and plan.exact and plan.env and self.interface.scalar_kinds.of(obs)):
                message = self._other(plan, layout, obs, raw_reward, terminated, truncated, info, extras)
            else:       # a running step, a reward of a type seen (its extras made): the common case, written out
                reward = agent.ran(obs, raw_reward)
                tail = self._said(layout, info, extras) if info and layout.info else extras
                message = self._filled(plan, layout, obs, reward, tail) \
                    or self._general(plan, _RUNNING_STATE, reward, 1.0, raw_reward, (False, False), info)
        except Exception as exc:  # noqa: BLE001 - as Session.handle: a refusal or a server bug, answered
            return self.failure("step", exc)
        # as Session.handle (from the env call's start: the lookup before it is a few attribute reads)
        agent.world.counts.record(perf_counter() - lane.started, lane.spent - spent)
        return message

    def _start(self, plan: Any, layout: _Layout) -> bytes | None:
        """The answer to a step that starts a sequence (the agent IDLE: its actions are ignored), where the
        agent can start it now (:meth:`~dmrpc_gym.server.worlds.gym_world.GymAgent.start_inline`), as the
        general path writes it (:meth:`_answer`); None: nothing done."""
        agent = self.agent
        lane = agent.lane
        spent = lane.spent
        started = agent.start_inline()
        if started is False:
            return None
        try:
            if started is not True:
                raise started
            message = self._answer(plan, layout, agent.observation, _RUNNING_STATE, 0.0, 1.0, 0.0, (False, False),
                                   agent.start_info, b"")
        except Exception as exc:  # noqa: BLE001 - as Session.handle: a refusal or a server bug, answered
            return self.failure("step", exc)
        agent.world.counts.record(perf_counter() - lane.started, lane.spent - spent)
        return message

    def _other(self, plan: Any, layout: _Layout, obs: Any, raw_reward: Any, terminated: bool, truncated: bool,
               info: Any, extras: bytes | None) -> bytes:
        """The answer of a step that ended the sequence, or whose reward is of a type whose exact extras are
        not made yet (``extras`` None: made here, where they can be), or whose observation's scalars are to be
        said: filled where it can be (:meth:`_answer`), else the general encoder's."""
        agent = self.agent
        if extras is None:
            extras = self._extras(raw_reward)
        if extras is None or (terminated and truncated and plan.exact):    # (the extras say both: the general's)
            return self._general(plan, *agent.stepped(obs, raw_reward, terminated, truncated), raw_reward,
                                 (terminated, truncated), info)
        if terminated or truncated:
            state, reward, discount = agent.stepped(obs, raw_reward, terminated, truncated)
            return self._answer(plan, layout.ends.get(state), obs, state, reward, discount, raw_reward,
                                (terminated, truncated), info, extras)
        return self._answer(plan, layout, obs, _RUNNING_STATE, agent.ran(obs, raw_reward), 1.0, raw_reward,
                            (False, False), info, extras)

    def _answer(self, plan: Any, layout: _Layout | None, obs: Any, state: int, reward: float, discount: float,
                raw: Any, ends: tuple, info: Any, extras: bytes) -> bytes:
        """The answer of a step that ended a sequence, started one, or whose reward is no float (``state``,
        ``reward``, ``discount``: what the agent made of it): ``layout`` filled, with ``info``'s entry and
        ``extras`` (the exact extras' entry) at its end; where it cannot be (no layout, scalars to say, an
        observation that does not fit), the general encoder's. (The answer of a running step whose reward's
        extras are made, a float's or another type's, is the same, written out in :meth:`answer`: calls fewer.)"""
        if layout is not None and not (self.kinds and plan.exact and plan.env and self.interface.scalar_kinds.of(obs)):
            tail = self._said(layout, info, extras) if info and layout.info else extras
            message = self._filled(plan, layout, obs, reward, tail)
            if message is not None:
                return message
        return self._general(plan, state, reward, discount, raw, ends, info)

    def _said(self, layout: _Layout, info: Any, extras: bytes) -> bytes:
        """The tail of an answer with an ``info``: its entry (the general path's info encoder's) and
        ``extras``, in the plan's order."""
        said = entry_bytes(_ENTRY_TAG, INFO_UID, self.interface.info_tensor(info))
        return said + extras if layout.info_first else extras + said

    def _extras(self, raw_reward: Any) -> bytes | None:
        """The exact-extras entry of a running step whose reward is ``raw_reward`` (no observation scalars to
        say): what the general encoder writes for it, made once per reward type; None for a reward that is no
        number (the general path answers)."""
        kind = type(raw_reward)
        try:
            return self.extras[kind]
        except KeyError:
            pass
        said = None
        if isinstance(raw_reward, _NUMBERS) and len(self.extras) < _MEMO:
            exact = exact_step(raw_reward, False, False)
            said = entry_bytes(_ENTRY_TAG, EXACT_UID, info_tensor_bytes(pack_info(exact))) if exact else b""
            self.extras[kind] = said
        return said

    def _filled(self, plan: Any, layout: _Layout, obs: Any, reward: float, tail: bytes) -> bytes | None:
        """The answer to a running step: the layout filled, with ``tail`` (the serialized ``info`` entry, or
        nothing) at its end; None where the observation does not fit the layout (the general encoder then
        writes the answer, or says what is wrong with it)."""
        if layout.whole is not None and type(obs) is np.ndarray:
            flat = {layout.whole: obs}           # what flatten gives for it (ValueCodec.whole)
        elif plan.env:
            try:
                flat = self.interface.obs_codec.flatten(obs)
            except (ValueError, TypeError):
                return None
        else:
            flat = {}
        filled = [layout.pieces[0]]
        for (name, dtype, shape), piece in zip(layout.slots, layout.pieces[1:]):
            if name is _REWARD_SLOT:
                filled += (_PACK_DOUBLE(reward), piece)
                continue
            try:
                array = flat[name]
            except KeyError:
                return None
            if array.dtype != dtype or array.shape != shape:
                return None
            filled += (array, piece)             # (joined from the array's own memory: one copy, not tobytes' two)
        if layout.regions:
            region = self.regions.region if self.regions is not None else None
            for name, dtype, shape, offset in layout.regions:
                array = flat.get(name)
                if region is None or array is None or array.dtype != dtype or array.shape != shape:
                    return None
                region.write(offset, array)
        if tail:                                 # the envelope's length grows by the tail's
            grown = layout.grown.get(len(tail))
            if grown is None:
                grown = remember(layout.grown, len(tail), STEP_TAG + varint(layout.body + len(tail)) + layout.first,
                                 _MEMO)
            filled[0] = grown
            filled.append(tail)
        try:
            return b"".join(filled)
        except TypeError:                        # an array that is not C-contiguous: its bytes in C order
            return b"".join(part if type(part) is bytes else part.tobytes() for part in filled)

    def _general(self, plan: Any, state: int, reward: float, discount: float, raw: Any, ends: tuple,
                 info: Any) -> bytes:
        """The answer as the general path writes it after its step (``state``, ``reward``, ``discount``: what
        :meth:`~dmrpc_gym.server.worlds.gym_world.GymAgent.stepped` gave)."""
        out = StepAnswer()
        out.state = state
        self.agent.encode(plan, out, raw, ends, reward, discount, info)
        return b"".join(out.message())

    # -- learning -------------------------------------------------------------------------------
    def learn(self, raw: bytes, request: pb.StepRequest, message: list) -> list:
        """Remember ``raw`` (a step request the general path just answered with ``message``, returned as it
        is) with its action, plan and answer layout, where the steady path can take it."""
        agent = self.agent
        if agent.interface is not self.interface:           # a new env, maybe new specs: start again
            self.interface, self.requests, self.layouts = agent.interface, {}, {}
            self.kinds = bool(len(agent.interface.scalar_kinds))
        if raw in self.requests or len(self.requests) >= _MEMO or len(raw) > _SMALL or agent.sequence is not _RUNNING:
            return message
        try:
            action = self.interface.actions(request.actions)
            plan = self.interface.plan(request.requested_observations)
        except Exception:  # noqa: BLE001 - the general path answered it with its refusal
            return message
        if type(action) is _ARRAY and action.dtype.kind in "biuf":
            action = action.copy()               # kept as it was asked for: each step gets a copy
            action.flags.writeable = False
        elif not isinstance(action, _IMMUTABLE):
            return message
        if plan.rgb:
            return message
        targets = self.regions.writes if self.regions is not None else None
        key = (plan, tuple(targets.items())) if targets else plan      # (the answer's references: where they lie)
        if key not in self.layouts:
            self.layouts[key] = self._layout(plan, b"".join(message))
        layout = self.layouts[key]
        if layout is not None:
            self.requests[raw] = (action, plan, layout)
        return message

    def _layout(self, plan: Any, answer: bytes) -> _Layout | None:
        """The layout of ``answer`` (a running step of ``plan``), if it is one taken here and filling it with
        this step's values (and its own ``info`` entry) gives the very bytes; else None. With it, in
        :attr:`_Layout.ends`, those of the same answer saying TERMINATED (its discount 0) and INTERRUPTED,
        where its state is one byte of its own (the same checks)."""
        try:
            cuts, end, body_start, state_at, discount_at, regions = self._slots(plan, answer)
        except (Unexpected, KeyError, ValueError):
            return None
        layout = self._pieces(plan, answer, cuts, end, body_start, regions)
        if layout is not None and state_at is not None:
            for state, discount in (sequence_state(True, False), sequence_state(False, True)):
                ended = answer[:state_at] + bytes((state,)) + answer[state_at + 1:]
                if discount_at is not None:
                    ended = ended[:discount_at] + _PACK_DOUBLE(discount) + ended[discount_at + 8:]
                variant = self._pieces(plan, ended, cuts, end, body_start, regions)
                if variant is not None:
                    layout.ends[state] = variant
        return layout

    def _pieces(self, plan: Any, answer: bytes, cuts: list, end: int, body_start: int,
                regions: tuple = ()) -> _Layout | None:
        """The layout of ``answer`` cut at ``cuts`` (see :meth:`_layout`), or None."""
        pieces, at, slots, reward = [], body_start, [], 0.0
        for a, b, slot in cuts:
            pieces.append(answer[at:a])
            slots.append(slot)
            at = b
            if slot[0] is _REWARD_SLOT:
                reward = _UNPACK_DOUBLE(answer[a:b])[0]
        pieces.append(answer[at:end])
        first, body = pieces[0], end - body_start
        pieces[0] = STEP_TAG + varint(body) + first        # the envelope of an answer without info
        whole = self.interface.obs_codec.whole if plan.env else None
        named = [s[0] for s in slots if s[0]] + [r[0] for r in regions]
        layout = _Layout(pieces, slots, whole if named == [whole] else None,
                         any(item[1] == KIND_INFO for item in plan.items), first, body, regions)
        hidden = [item[1] for item in plan.items if item[1] in _HIDDEN]
        layout.info_first = hidden[:1] != [KIND_EXACT]
        try:
            rebuilt = self._filled(plan, layout, self.agent.observation, reward, answer[end:])
        except Exception:  # noqa: BLE001 - an observation this path cannot write: the general path's
            return None
        return layout if rebuilt == answer else None

    def _slots(self, plan: Any, answer: bytes) -> tuple[list[tuple], int, int, int | None, int | None, tuple]:
        """``(start, stop, (name, dtype, shape))`` of each value of ``answer``, where its ``info`` and exact
        extras begin (they come last; its end without them), where its StepResponse begins, where its state's
        one byte is and where its DOUBLE discount's 8 bytes are (None: no such thing), and the observations it
        has in shared memory, ``(name, dtype, shape, offset)``; ``Unexpected`` where it has another layout."""
        hidden = [item[1] in _HIDDEN for item in plan.items]
        if hidden != sorted(hidden):                        # info and the extras asked for last
            raise Unexpected
        items = {uid: (kind, name, dt) for uid, kind, name, dt in plan.items}
        refs = {} if self.regions is not None and self.regions.region is not None else None
        values, tail, body_start = running_step(answer, {uid for uid, kind, *_ in plan.items if kind in _HIDDEN}, refs)
        targets = self.regions.writes if refs else {}
        regions = []
        for uid, (dtype, shape, number, offset, _) in (refs or {}).items():   # written there: as the general path did
            kind, name, _ = items[uid]
            if kind != KIND_ENV or number != 0 or targets.get(uid, (None,))[0] != offset:
                raise Unexpected
            regions.append((name, dtype, shape, offset))
        cuts, discount_at, state_at = [], None, None
        for uid, dtype, shape, a, b in values:
            kind, name, dt = items[uid]
            if kind == KIND_ENV:
                cuts.append((a, b, (name, dtype, shape)))
            elif kind == KIND_REWARD and dt == pb.DOUBLE:
                cuts.append((a, b, (_REWARD_SLOT, None, None)))
            elif kind != KIND_DISCOUNT or dt != pb.DOUBLE:
                raise Unexpected
            else:
                discount_at = a
        end = len(answer) if tail is None else tail
        for number, kind, a, b, _ in fields(answer, body_start, end):
            if number == STATE_FIELD and kind == 0 and b - a == 2:
                state_at = a + 1
        return cuts, end, body_start, state_at, discount_at, tuple(regions)
