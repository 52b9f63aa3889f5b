"""The server's steady-state answers (issue 32) against the general path: a differential test.

Hypothesis draws a served env (a Box, a Dict with a scalar leaf, or integer observations; rewards of
several types; episodes that end; ``info`` now and then; an env whose step and then reset raise; a Box
action with a reward that is always an ``np.float64``, as Pendulum's; a non-contiguous observation now and
then), and a client's script:
steps with valid and invalid actions, asking for every observation or some (with ``info`` and the exact
extras, as our client asks, or without), resets, PINGs, WINDOW_UPDATEs and SETTINGS, each request
whole in one write or cut into frames and writes, or two requests in one write. The same script runs
against a server connection with the steady path off (``DMRPC_STEADY_STEP=0``) and on: every frame the server
sends must be the same, byte for byte.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from raw_h2 import RawClient, data, message
from fuzzing import fuzz_settings

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.fidelity import EXACT_UID
from dmrpc_gym.protocol.info import INFO_UID
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from dmrpc_gym.transport import STEADY_STEP_ENV
from dmrpc_gym.transport.frames import DATA, END_STREAM, HEADERS, PADDED, PING, SETTINGS, U32, WINDOW_UPDATE, frame
from dmrpc_gym.transport.server import state as server_state
from dmrpc_gym.transport.server import steady

_REWARDS = [1.0, 0.5, 2, np.float32(0.25), -1.0, 3.0]


class Scripted(gym.Env):
    """A deterministic env of a drawn kind: what it observes, rewards, ends and says in ``info``."""

    def __init__(self, kind: str = "box", end_every: int = 5, info_every: int = 0, fail_at: int = -1):
        self.kind, self.end_every, self.info_every, self.fail_at = kind, end_every, info_every, fail_at
        self.action_space = gym.spaces.Discrete(4)
        if kind == "pendulum":               # a Box action, an np.float64 reward (Pendulum-v1's)
            self.action_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        if kind in ("box", "pendulum"):
            self.observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
        elif kind == "dict":
            self.observation_space = gym.spaces.Dict({"a": gym.spaces.Box(0, 255, (2, 2), np.uint8),
                                                      "b": gym.spaces.Box(-5, 5, (), np.float64)})
        else:
            self.observation_space = gym.spaces.Box(-100, 100, (2,), np.int64)
        self.n = 0

    def _obs(self):
        rng = np.random.default_rng(self.n)
        if self.kind in ("box", "pendulum"):      # float64 now and then: flatten casts it to the spec's float32
            if self.n % 5 == 2:                  # (a view that is not C-contiguous now and then)
                return rng.uniform(-1, 1, 6).astype(np.float32)[::2]
            return rng.uniform(-1, 1, 3).astype(np.float64 if self.n % 4 == 3 else np.float32)
        if self.kind == "dict":
            b = float(rng.uniform(-5, 5)) if self.n % 3 else np.float64(1.5)   # a Python float now and then
            return {"a": rng.integers(0, 255, (2, 2)).astype(np.uint8), "b": b}
        return rng.integers(-100, 100, 2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        failed, self.n = self.n == self.fail_at, 0   # (an env the server reuses starts over as a new one)
        if failed:                           # the reset after the failed step fails too; the next one starts
            raise RuntimeError("scripted reset failure")
        return self._obs(), {"started": True} if self.info_every else {}

    def step(self, action):
        self.n += 1
        if self.n == self.fail_at:
            raise RuntimeError("scripted failure")
        ended = self.end_every and self.n % self.end_every == 0
        info = {"n": self.n, "s": "x" * (self.n * 37 % 300)} if self.info_every and self.n % self.info_every == 0 \
            else {}                          # (of many sizes: the envelope's length varies)
        if self.kind == "pendulum":
            assert action.flags.writeable and action.dtype == np.float32
            reward = np.float64(float(action[0]) - self.n)
            action[0] = 9                    # an env may change its action in place: the next step's is its own
            return self._obs(), reward, ended, False, info
        return self._obs(), _REWARDS[(self.n + int(action)) % len(_REWARDS)], ended, False, info


@pytest.fixture(scope="module")
def servers():
    """One server per env kind (every connection reads the switch as it starts)."""
    made = {}
    for kind in ("box", "dict", "ints", "pendulum"):
        for end_every, info_every, fail_at in ((5, 0, -1), (0, 4, 9)):
            made[kind, end_every] = Server(lambda k=kind, e=end_every, i=info_every, f=fail_at: Scripted(k, e, i, f),
                                           kind="gym", workers=0).start()
    yield made
    for server in made.values():
        server.stop(0)


_OP = st.one_of(
    *[st.tuples(st.just("step"), st.integers(0, 1))] * 8, st.tuples(st.just("step"), st.integers(0, 3)),
    st.tuples(st.just("step"), st.just(7)),
    st.tuples(st.just("reset")), st.tuples(st.just("ping")), st.tuples(st.just("window")),
    st.tuples(st.just("settings")), st.tuples(st.just("two"), st.integers(0, 3)))


def _answers(raw: RawClient, n: int, out: list) -> None:
    """Read frames into ``out`` until ``n`` more DATA frames (answers) came."""
    while n:
        got = raw.next_frame()
        assert got is not None, "the server closed the connection"
        out.append(got)
        n -= got[0] == 0


def _joined(raw: RawClient, out: list) -> list[int]:
    """Open stream 1, create a world and join it (its answers into ``out``, but the create answer, which
    names the world): the uids of its observations."""
    raw.send(raw.request_headers(1))
    raw.send(data(1, message(pb.EnvironmentRequest(create_world=pb.CreateWorldRequest()))))
    _answers(raw, 1, out)
    name = pb.EnvironmentResponse.FromString(out.pop()[3][5:]).create_world.world_name   # (names differ)
    join = message(pb.EnvironmentRequest(join_world=pb.JoinWorldRequest(world_name=name)))
    pad = 40 - len(join)                 # padded to one length, whatever the name's: the same credit
    raw.send(frame(DATA, PADDED, 1, bytes([pad]) + join + bytes(pad)))
    _answers(raw, 1, out)
    return sorted(pb.EnvironmentResponse.FromString(out[-1][3][5:]).join_world.specs.observations)


def play(address: str, script: tuple, steady: bool, monkeypatch, kind: str = "box") -> list:
    """Every frame the server sent for ``script``, with the steady path ``steady`` (``kind``: the env's, which
    says what its actions are)."""
    asks, cuts, ops = script
    monkeypatch.setenv(STEADY_STEP_ENV, "1" if steady else "0")
    raw, out = RawClient(address), []
    try:
        uids = _joined(raw, out)
        requested = [*uids[:asks[0]], *([INFO_UID, EXACT_UID] if asks[1] else [])]
        for i, op in enumerate(ops):
            if op[0] in ("step", "two"):
                act = np.array([op[1] / 2 - 0.5], np.float32) if kind == "pendulum" else np.int64(op[1])
                step = pb.StepRequest(actions={1: tensors.pack(act)}, requested_observations=requested)
                body = message(pb.EnvironmentRequest(step=step))
                wire = data(1, body) * (2 if op[0] == "two" else 1)
                cut = cuts[i % len(cuts)] if cuts and op[0] == "step" and i % 3 == 0 else 0
                if 0 < cut < len(body):      # the message cut into two frames, sent in two writes
                    wire = data(1, body[:cut]), data(1, body[cut:])
                    raw.send(wire[0])
                    raw.send(wire[1])
                else:
                    raw.send(wire)
                _answers(raw, 2 if op[0] == "two" else 1, out)
            elif op[0] == "reset":
                raw.send(data(1, message(pb.EnvironmentRequest(reset=pb.ResetRequest()))))
                _answers(raw, 1, out)
            else:
                raw.send({"ping": frame(PING, 0, 0, b"abcdefgh"), "settings": frame(SETTINGS, 0, 0, b""),
                          "window": frame(WINDOW_UPDATE, 0, 1, U32.pack(4096))}[op[0]])
        raw.send(data(1, b"", end=True))
        while (got := raw.next_frame()) is not None:
            out.append(got)
            if got[0] == HEADERS and got[1] & END_STREAM:
                break
    finally:
        raw.close()
    return out


def test_the_servers_steady_path_and_general_path_send_the_same_frames(servers, monkeypatch):
    from dmrpc_gym.server.serving.steady import SteadyServe
    answered, fill, updates = [], SteadyServe.answer, []

    def counted(self, raw, room):
        got = fill(self, raw, room)
        answered.append(got is not None)
        return got

    monkeypatch.setattr(SteadyServe, "answer", counted)
    # consumed request bytes given back after 200 (not 512 KiB): the scripts' WINDOW_UPDATEs, each path's
    monkeypatch.setattr(server_state, "CREDIT_AT", 200)

    @fuzz_settings(40)
    @given(st.sampled_from(sorted(servers)), st.tuples(st.integers(0, 4), st.booleans()),
           st.lists(st.integers(0, 40), max_size=3), st.lists(_OP, min_size=8, max_size=24))
    def check(server, asks, cuts, ops):
        address = servers[server].address
        general = play(address, (asks, cuts, ops), False, monkeypatch, server[0])
        steady = play(address, (asks, cuts, ops), True, monkeypatch, server[0])
        assert steady == general
        updates.extend(got for got in steady if got[0] == WINDOW_UPDATE)

    check()
    print(f"{sum(answered)} of {len(answered)} steady answers given")
    assert sum(answered) > 10
    assert updates, "no script made the server give credit back"


def test_a_request_past_the_message_limit_is_refused_alike_on_both_paths(monkeypatch):
    # The steady path leaves a message past the stream's limit to the general path, which refuses it from
    # its prefix: the same frames with the path off, on, and on again (the request's head then remembered).
    from dmrpc_gym.server.serving.steady import SteadyServe
    answered, fill = [], SteadyServe.answer

    def counted(self, raw, room):
        got = fill(self, raw, room)
        answered.append(got is not None)
        return got

    monkeypatch.setattr(SteadyServe, "answer", counted)
    server = Server(lambda: Scripted("box", 0), kind="gym", workers=0, max_message_size=200).start()
    runs = []
    try:
        for steady in (False, True, True):
            monkeypatch.setenv(STEADY_STEP_ENV, "1" if steady else "0")
            raw, out = RawClient(server.address), []
            try:
                uids = _joined(raw, out)
                step = pb.StepRequest(actions={1: tensors.pack(np.int64(1))}, requested_observations=uids)
                for _ in range(3):
                    raw.send(data(1, message(pb.EnvironmentRequest(step=step))))
                    _answers(raw, 1, out)
                big = message(pb.EnvironmentRequest(step=pb.StepRequest(
                    actions={1: tensors.pack(np.int64(1))}, requested_observations=[*uids] * 120)))
                assert len(big) > 205
                raw.send(data(1, big))
                fields = raw.trailers(1)
                out.append(fields)
            finally:
                raw.close()
            runs.append(out)
    finally:
        server.stop(0)
    assert fields["grpc-status"] == "8" and "maximum message size of 200" in fields["grpc-message"], fields
    assert runs[1] == runs[0] and runs[2] == runs[0]
    assert sum(answered) == 6 - 2        # the steady answers of both steady runs (their first steps: learned)
