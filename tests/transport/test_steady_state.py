"""The steady path is a drop-in for the general path: after the same steps, each end's connection
state is the same, whichever path took them (issue 39, item 4).

The byte-for-byte tests (``tests/client/test_steady_path.py``, ``tests/server/test_steady_path_server.py``)
compare what goes on the wire; this one compares what each end keeps: its whole connection state
(:class:`~dmrpc_gym.transport.server.state.ServerState`, :class:`~dmrpc_gym.transport.client.state.ClientState`:
the send and receive windows and their credit, the peer's settings, every stream's windows, credit and
states, the frame and header-block counters, what is owed, the PING policing), and the I/O counters
(bytes in and out, messages sent and read). The credit thresholds are lowered at both ends so
that WINDOW_UPDATEs go both ways many times within the steps.
"""
from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from dmrpc_gym.client.env import DmRpcEnv
from dmrpc_gym.server import Server
from dmrpc_gym.transport import STEADY_STEP_ENV
from dmrpc_gym.transport.client import connection as client_connection
from dmrpc_gym.transport.server import state as server_state_module
from dmrpc_gym.worlds.catch import Catch

STEPS = 300


def _windows(owner) -> tuple:
    return owner.send.size, owner.send.credit, owner.recv.size, owner.recv.credit


def _state(state) -> dict:
    """What both ends' connection states hold (transport.connection_state.ConnectionState): windows and
    credit, the peer's settings, the counters, the header block, what is owed, the PING policing's flag."""
    peer = state.peer
    return {"flow": (*_windows(state), state.threshold, peer.initial_window, peer.max_frame, peer.max_streams,
                     peer.max_header_list, peer.header_table),
            "counters": (state.frames, state.blocks), "header block": state.headers_in.data,
            "owed": list(state.outbox), "answered": state.answered}


def server_state(protocol) -> dict:
    """What the server keeps of one connection (a GrpcProtocol): its whole ServerState, and the I/O counters."""
    state = protocol.state
    streams = {sid: (*_windows(s), s.held, s.inbound.name, s.outbound.name, s.busy,
                     len(s.inbox), bool(s.splitter.buffered), s.splitter.large is None, s.declined)
               for sid, s in state.streams.items()}
    return {**_state(state), "streams": streams, "buffered": bytes(state.buf), "part": state.part,
            "last stream": state.last_stream, "draining": state.draining,
            "policing": (state.strikes, state.last_ping, state.resets, state.stall, state.drop_left),
            "bytes": (protocol._traffic.bytes_in, protocol._traffic.bytes_out)}


def client_state(conn) -> dict:
    """What the client keeps of its connection (a GrpcConnection): its whole ClientState, and the counters."""
    state = conn.state
    streams = {sid: (*_windows(s), s.inbound.name, s.outbound.name, s.messages_sent, s.messages_read,
                     len(s.messages), s.ended is None, bool(s.splitter.buffered), s.splitter.large is None)
               for sid, s in state.streams.items()}
    return {**_state(state), "streams": streams, "next id": state.next_id, "sent": conn.messages_sent}


def run(steady: bool, monkeypatch) -> tuple[dict, dict, list, int]:
    """Both ends' states after :data:`STEPS` steps of a seeded Catch, with the steady path ``steady``."""
    monkeypatch.setenv(STEADY_STEP_ENV, "1" if steady else "0")
    monkeypatch.setattr(server_state_module, "CREDIT_AT", 300)          # the server's credit back every few requests
    monkeypatch.setattr(client_connection, "CREDIT_AT", 700)  # the client's every few answers
    with Server(Catch, workers=0) as server, DmRpcEnv(server.address) as env:
        rewards, taken = [], 0
        env.reset(seed=7)
        agent = env._agent
        for i in range(STEPS):
            obs, reward, terminated, truncated, _ = env.step(np.int64(i % 3 - 1))
            rewards.append(reward)
            if terminated or truncated:
                env.reset()
            taken += agent.steady is not None and agent.steady.layout is not None
        conn = agent.connection._transport._stream.connection
        return settled(server), client_state(conn), rewards, taken


def settled(server) -> dict:
    """The server's state of its one connection, read on its event loop once it holds still (the client's
    last frames, a WINDOW_UPDATE say, may still be on their way when the client's step returns)."""
    async def read() -> dict:
        (protocol,) = server._connections
        return server_state(protocol)

    before = None
    for _ in range(100):
        state = asyncio.run_coroutine_threadsafe(read(), server._loop).result(5)
        if state == before:
            return state
        before = state
        time.sleep(0.05)
    raise AssertionError("the server's connection state never settled")


def test_each_end_keeps_the_same_connection_state_on_either_path(monkeypatch):
    general_server, general_client, general_rewards, none = run(False, monkeypatch)
    steady_server, steady_client, steady_rewards, taken = run(True, monkeypatch)
    assert none == 0 and taken > STEPS // 2, "the steady path was not taken (or was, with it off)"
    assert steady_rewards == general_rewards
    assert steady_client == general_client
    assert steady_server == general_server
    # the credit went back many times both ways (past the thresholds above, 10 times at least)
    bytes_in, bytes_out = general_server["bytes"]
    assert bytes_in > 10 * 300 and bytes_out > 10 * 700


@pytest.mark.parametrize("which", ["server", "client"])
def test_the_comparison_sees_a_window_moved_by_one_byte(monkeypatch, which):
    state = run(True, monkeypatch)[0 if which == "server" else 1]
    moved = {**state, "flow": (state["flow"][0] - 1, *state["flow"][1:])}
    assert moved != state
    counted = {**state, "counters": (state["counters"][0] + 1, state["counters"][1])}
    assert counted != state


def run_vector(steady: bool, monkeypatch) -> tuple[dict, dict, list, int]:
    """Both ends' states after :data:`STEPS` vector steps of 3 seeded Catches on one shared connection (the
    vector step's steady path: one send, one read loop), with the steady path ``steady``."""
    from dmrpc_gym import DmRpcVectorEnv
    from dmrpc_gym.client.steady_batch import SteadyBatch

    monkeypatch.setenv(STEADY_STEP_ENV, "1" if steady else "0")
    monkeypatch.setattr(server_state_module, "CREDIT_AT", 300)
    monkeypatch.setattr(client_connection, "CREDIT_AT", 700)
    taken, take = [0], SteadyBatch.take

    def counted(self, indices):
        got = take(self, indices)
        taken[0] += got
        return got
    monkeypatch.setattr(SteadyBatch, "take", counted)
    with Server(Catch, workers=0) as server:
        envs = DmRpcVectorEnv(3, server.address)
        try:
            envs.reset(seed=7)
            rewards = [envs.step(np.array([i % 3 - 1] * 3, np.int8))[1].tolist() for i in range(STEPS)]
            conn = envs.envs[0].agent.connection._transport._stream.connection
            assert all(env.agent.connection._transport._stream.connection is conn for env in envs.envs)
            return settled(server), client_state(conn), rewards, taken[0]
        finally:
            envs.close()


@pytest.mark.usefixtures("not_in_a_kernel")     # (tests/conftest.py)
def test_a_vector_step_keeps_the_same_connection_state_on_either_path(monkeypatch):
    general_server, general_client, general_rewards, none = run_vector(False, monkeypatch)
    steady_server, steady_client, steady_rewards, taken = run_vector(True, monkeypatch)
    # (the lowered credit thresholds put a WINDOW_UPDATE between answers often: the rest is read the general way)
    assert none == 0 and taken > 3 * STEPS // 2, f"{taken} sub-env steps taken by the vector step's steady read"
    assert steady_rewards == general_rewards
    assert steady_client == general_client
    assert steady_server == general_server
