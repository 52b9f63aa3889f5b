"""The Transport interface tested directly: gRPC messages as bytes over each implementation, and the framing.

A Transport knows nothing of dm_env_rpc: these tests hand it serialized
EnvironmentRequests and read serialized answers, against our own server
protocol and against grpcio's server (the official package's side).
"""
from __future__ import annotations

import socket
import threading

import grpc
import gymnasium as gym
import numpy as np
import pytest
from scripted_server import ScriptedServer

from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from dmrpc_gym.transport import frames
from dmrpc_gym.transport.base import StreamEnded, Transport, parse_address
from dmrpc_gym.transport.client.grpcio_transport import GrpcioTransport
from dmrpc_gym.transport.client.h2_transport import H2Transport
from dmrpc_gym.worlds.catch import Catch


def request(**payload) -> bytes:
    return pb.EnvironmentRequest(**payload).SerializeToString()


def answer(raw: bytes) -> pb.EnvironmentResponse:
    return pb.EnvironmentResponse.FromString(raw)


@pytest.fixture(scope="module")
def ours():
    with Server(Catch) as server:
        yield server.address


@pytest.fixture
def grpcio_server():
    server = ScriptedServer()
    yield server
    server.stop()


def open_h2(address: str) -> H2Transport:
    return H2Transport(address, (), 5.0)


def open_grpcio(address: str) -> GrpcioTransport:
    return GrpcioTransport(grpc.insecure_channel(address), (), 5.0, address)


OPENERS = {"h2": open_h2, "grpcio": open_grpcio}


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_transport_carries_pipelined_messages_in_order(kind, ours):
    transport = OPENERS[kind](ours)
    assert isinstance(transport, Transport)
    try:
        transport.write(request(create_world=pb.CreateWorldRequest()))
        world = answer(transport.read(5.0)).create_world.world_name
        transport.write(request(join_world=pb.JoinWorldRequest(world_name=world)))
        for _ in range(20):                                       # pipelined: all sent before any is read
            transport.write(request(step=pb.StepRequest()))
        assert transport.messages_sent == 22 and not transport.broken
        assert answer(transport.read(5.0)).WhichOneof("payload") == "join_world"
        states = [answer(transport.read(5.0)).step.state for _ in range(20)]
        assert states[0] == pb.RUNNING and len(states) == 20
    finally:
        transport.close()


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_read_times_out_as_socket_timeout_and_the_stream_goes_on(kind, grpcio_server):
    transport = OPENERS[kind](grpcio_server.address)
    try:
        with pytest.raises(socket.timeout):
            transport.read(0.1)                                   # nothing was asked
        transport.write(request(leave_world=pb.LeaveWorldRequest()))
        assert answer(transport.read(5.0)).WhichOneof("payload") == "leave_world"
    finally:
        transport.close()


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_server_status_ends_the_stream_with_its_code(kind, grpcio_server):
    grpcio_server.abort_with = (grpc.StatusCode.PERMISSION_DENIED, "no entry")
    transport = OPENERS[kind](grpcio_server.address)
    try:
        transport.write(request(step=pb.StepRequest()))
        with pytest.raises(StreamEnded) as ended:
            transport.read(5.0)
        assert ended.value.status == grpc.StatusCode.PERMISSION_DENIED.value[0]
        assert "no entry" in ended.value.message
    finally:
        transport.close()


def test_our_client_stream_sends_metadata(grpcio_server):
    transport = H2Transport(grpcio_server.address, (("x-trace", "abc"),), 5.0)
    try:
        transport.write(request(leave_world=pb.LeaveWorldRequest()))
        transport.read(5.0)
    finally:
        transport.close()
    assert ("x-trace", "abc") in grpcio_server.metadata[0]


def test_something_that_is_not_a_grpc_server_is_refused_at_once():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    address = f"127.0.0.1:{listener.getsockname()[1]}"

    def http1() -> None:
        peer, _ = listener.accept()
        peer.recv(1024)
        peer.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        peer.close()

    threading.Thread(target=http1, daemon=True).start()
    try:
        with pytest.raises(ConnectionError, match="did not answer as a gRPC"):
            open_h2(address)
    finally:
        listener.close()


def test_framing_splits_messages_across_frames_and_joins_them():
    messages = [b"", b"a" * 10, b"b" * 70_000]
    stream = b"".join(frames.grpc_frame(m, 1)[9:] for m in messages)
    splitter, out = frames.MessageSplitter(), []
    for i in range(0, len(stream), 4096):                        # DATA frames cut anywhere
        splitter.feed(stream[i:i + 4096], out)
    assert out == messages
    header = frames.frame(frames.PING, frames.ACK, 0, b"12345678")
    assert frames.HEADER.unpack_from(header) == (0, 8, frames.PING, frames.ACK, 0)


def test_parse_address():
    assert parse_address("localhost:10000") == ("localhost", 10000)
    assert parse_address("[::1]:5") == ("::1", 5)
    for bad in ("localhost", ":5", "host:port"):
        with pytest.raises(ValueError, match="not of the form host:port"):
            parse_address(bad)


class _BigFrame(gym.Env):
    """One 8 MiB uint8 observation, different every step."""

    observation_space = gym.spaces.Box(0, 255, (8 << 20,), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.n = 0
        return np.zeros(8 << 20, np.uint8), {}

    def step(self, action):
        self.n += 1
        return np.full(8 << 20, self.n % 256, np.uint8), 0.0, False, False, {}


def test_a_large_answer_is_read_straight_into_its_message(monkeypatch):
    """A large DATA frame takes the direct path (read into the message, not buffered first)."""
    from dmrpc_gym.transport.client.large_messages import LargeMessages
    calls = []
    original = LargeMessages._read_data_direct

    def spy(self, *args):
        calls.append(args)
        return original(self, *args)

    monkeypatch.setattr(LargeMessages, "_read_data_direct", spy)
    with Server(_BigFrame) as server:
        transport = open_h2(server.address)
        try:
            transport.write(request(create_world=pb.CreateWorldRequest()))
            world = answer(transport.read(10.0)).create_world.world_name
            transport.write(request(join_world=pb.JoinWorldRequest(world_name=world)))
            answer(transport.read(10.0))
            for expected in (0, 1, 2):
                transport.write(request(step=pb.StepRequest(requested_observations=[1])))
                observation = answer(transport.read(30.0)).step.observations[1].uint8s.array
                assert len(observation) == 8 << 20 and observation[:3] == bytes([expected] * 3)
                assert observation[-1] == expected
        finally:
            transport.close()
    assert calls, "no large DATA frame took the direct path"
