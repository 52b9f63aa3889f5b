"""Connection over real gRPC on loopback: both transports, pipelining, errors, dead peers."""
from __future__ import annotations

import concurrent.futures as cf
import shutil
import signal
import socket
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest

from scripted_server import ScriptedServer

from dmrpc_gym.protocol import tensors
from dmrpc_gym.client.connection import Connection, parse_address
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.transport.client import interrupts


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.stop()


def step(conn: Connection, action=None) -> pb.StepResponse:
    request = pb.StepRequest(requested_observations=[0, 1])
    if action is not None:
        tensors.pack_into(request.actions[0], action)
    return conn.send(request)


def test_round_trip_and_payload_echo(server):
    with Connection(server.address) as conn:
        assert conn.send(pb.CreateWorldRequest()).world_name == "w"
        big = np.arange(1_000_000, dtype=np.float32)      # 4 MB: many frames, flow control both ways
        answer = step(conn, big)
        assert tensors.unpack(answer.observations[0]) == 1
        np.testing.assert_array_equal(tensors.unpack(answer.observations[1]), big)


def test_pipelined_answers_arrive_in_order(server):
    with Connection(server.address) as conn:
        for i in range(200):
            request = pb.StepRequest(requested_observations=[0, 1])
            tensors.pack_into(request.actions[0], np.int32(i))
            conn.submit(request)
        for i in range(200):
            answer = conn.receive()
            assert tensors.unpack(answer.observations[0]) == i + 1
            assert tensors.unpack(answer.observations[1]) == i


def test_error_answer_raises_and_stream_stays_usable(server):
    with Connection(server.address) as conn:
        with pytest.raises(DmRpcError) as err:
            conn.send(pb.CreateWorldRequest(settings={"bad": tensors.pack(1)}))
        assert err.value.code_name == "INVALID_ARGUMENT"
        assert "unknown world setting 'bad'" in str(err.value)
        assert err.value.request == "create_world"
        assert conn.send(pb.CreateWorldRequest()).world_name == "w"


def test_stream_aborted_with_status(server):
    server.abort_with = (grpc.StatusCode.FAILED_PRECONDITION, "world exploded: 100% gone")
    with Connection(server.address) as conn:
        with pytest.raises(DmRpcError) as err:
            step(conn)
        assert err.value.code_name == "FAILED_PRECONDITION"
        assert "world exploded: 100% gone" in str(err.value)
        with pytest.raises(ConnectionError, match="unusable"):
            step(conn)


def test_server_without_the_service_is_unimplemented():
    bare = grpc.server(cf.ThreadPoolExecutor(2))
    port = bare.add_insecure_port("127.0.0.1:0")
    bare.start()
    try:
        with Connection(f"127.0.0.1:{port}") as conn:
            with pytest.raises(DmRpcError) as err:
                step(conn)
            assert err.value.code_name == "UNIMPLEMENTED"
    finally:
        bare.stop(None)


def test_unreachable_address_names_it():
    with socket.socket() as s:           # a port that is certainly closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        Connection(f"127.0.0.1:{port}", connect_timeout=2)
    assert time.monotonic() - start < 5


def test_peer_that_is_not_grpc_fails_within_connect_timeout():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:                                  # accepts, never answers
        with pytest.raises(ConnectionError, match="did not answer as a gRPC"):
            Connection(f"127.0.0.1:{port}", connect_timeout=0.5)
    finally:
        listener.close()


def test_server_that_dies_mid_stream_fails_promptly(server):
    conn = Connection(server.address)
    step(conn)
    server.stop()
    with pytest.raises(ConnectionError, match="lost|ended"):
        for _ in range(3):               # the first write may still be buffered
            step(conn)
    conn.close()
    conn.close()
    assert conn.closed


def test_timeout_then_late_answer_is_dropped(server):
    with Connection(server.address, timeout=0.3) as conn:
        server.hold.set()
        with pytest.raises(TimeoutError, match="no answer to step"):
            step(conn, np.int32(7))
        server.hold.clear()
        server.release.set()
        answer = step(conn, np.int32(8))  # the late answer to 7 is read and dropped first
        assert tensors.unpack(answer.observations[1]) == 8
        assert tensors.unpack(answer.observations[0]) == 2


def test_metadata_reaches_the_server(server):
    with Connection(server.address, metadata=[("x-token", "abc")]) as conn:
        step(conn)
    assert ("x-token", "abc") in server.metadata[0]


def test_caller_channel_uses_grpc_transport(server):
    channel = grpc.insecure_channel(server.address)
    with Connection(channel=channel, timeout=5) as conn:
        assert tensors.unpack(step(conn, np.int8(3)).observations[1]) == 3
        with pytest.raises(DmRpcError):
            conn.send(pb.CreateWorldRequest(settings={"bad": tensors.pack(1)}))
    channel.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_tls_credentials(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    creds = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
    server = ScriptedServer(credentials=creds)
    try:
        client = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with Connection(f"localhost:{server.port}", credentials=client, connect_timeout=5) as conn:
            assert tensors.unpack(step(conn, np.int8(5)).observations[1]) == 5
    finally:
        server.stop()


def test_bad_arguments():
    with pytest.raises(ValueError, match="exactly one"):
        Connection()
    with pytest.raises(ValueError, match="host:port"):
        parse_address("localhost")
    assert parse_address("[::1]:80") == ("::1", 80)


def test_official_client_and_ours_share_a_server(server):
    from dm_env_rpc.v1 import connection as official_connection
    from dm_env_rpc.v1 import dm_env_rpc_pb2 as opb
    channel = grpc.insecure_channel(server.address)
    official = official_connection.Connection(channel)
    try:
        with Connection(server.address) as ours:
            assert official.send(opb.CreateWorldRequest()).world_name == "w"
            assert ours.send(pb.CreateWorldRequest()).world_name == "w"
    finally:
        official.close()
        channel.close()


class _Interrupt(BaseException):
    """Stands in for KeyboardInterrupt, without risking pytest's own handling of it."""


def test_interrupt_during_a_step_leaves_the_connection_usable(server):
    import os
    import signal

    def raise_interrupt(signum, frame):
        raise _Interrupt()

    previous = signal.signal(signal.SIGUSR1, raise_interrupt)
    try:
        with Connection(server.address) as conn:
            server.hold.set()
            timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
            timer.start()
            with pytest.raises(_Interrupt):
                step(conn, np.int32(1))       # blocked in recv when the signal lands
            timer.join()
            server.hold.clear()
            server.release.set()
            answer = step(conn, np.int32(2))
            assert tensors.unpack(answer.observations[1]) == 2
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize("where", ["after the request went", "after its answer was read"])
def test_an_interrupted_exchange_never_hands_its_answer_to_the_next_request(server, monkeypatch, where):
    # Ctrl-C can land between a request's write and the read of its answer, where no code of the
    # read has run yet: the late answer must still be dropped, not taken for the next step's.
    with Connection(server.address) as conn:
        real = conn._receive

        def interrupted(map_field, *steady):
            monkeypatch.setattr(conn, "_receive", real)        # once
            if where == "after its answer was read":
                real(map_field, *steady)
            raise _Interrupt()

        monkeypatch.setattr(conn, "_receive", interrupted)
        with pytest.raises(_Interrupt):
            step(conn, np.int32(1))
        assert tensors.unpack(step(conn, np.int32(2)).observations[1]) == 2
        assert tensors.unpack(step(conn, np.int32(3)).observations[1]) == 3


class _CtrlCAfter:
    """A socket whose first ``recv_into`` (or ``send``) moves just 3 bytes (a piece of a frame) and
    is followed at once by a SIGINT to the main thread, which Python handles before the call's
    result reaches its caller. (Sent to the process, the SIGINT of a held read may go to another
    thread, whose handler can run before or after the bytes are stored: see interrupts.)"""

    def __init__(self, sock, method: str):
        self._sock, self.armed = sock, method

    def recv_into(self, buffer, nbytes=0, *flags):
        if self.armed != "recv_into":
            return self._sock.recv_into(buffer, nbytes, *flags)
        self.armed = None
        n = self._sock.recv_into(buffer, 3, *flags)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        return n

    def send(self, data, *flags):
        if self.armed != "send":
            return self._sock.send(data, *flags)
        self.armed = None
        n = self._sock.send(bytes(data[:3]), *flags)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        return n

    def __getattr__(self, name):
        return getattr(self._sock, name)


@pytest.mark.parametrize("method", ["recv_into", "send"])
def test_a_ctrl_c_just_after_a_read_or_send_loses_or_repeats_no_byte_in_a_kernel(server, monkeypatch, method):
    # In a Jupyter kernel (which lives on after Ctrl-C) a read or send holds SIGINT back until what
    # it moved is accounted for: without that, the next step waited for an answer already read,
    # or the server got a piece of a frame twice.
    def raise_interrupt(signum, frame):
        raise _Interrupt()

    monkeypatch.setattr(interrupts, "in_kernel", lambda: True)
    previous = signal.signal(signal.SIGINT, raise_interrupt)
    try:
        with Connection(server.address, timeout=5.0) as conn:
            carrier = conn._transport._stream.connection
            carrier._sock = _CtrlCAfter(carrier._sock, method)
            with pytest.raises(_Interrupt):
                step(conn, np.int32(1))
            assert carrier._sock.armed is None
            assert tensors.unpack(step(conn, np.int32(2)).observations[1]) == 2
            assert tensors.unpack(step(conn, np.int32(3)).observations[1]) == 3
    finally:
        signal.signal(signal.SIGINT, previous)


def test_connects_inside_a_running_event_loop(server):
    """As in Jupyter, where the caller's thread already runs an event loop."""
    import asyncio

    async def inside_loop():
        with Connection(server.address) as conn:
            return tensors.unpack(step(conn, np.int8(4)).observations[1])

    assert asyncio.run(inside_loop()) == 4


def test_two_timeouts_in_a_row_keep_answers_matched(server):
    """The second timeout strikes while the first late answer is being dropped."""
    with Connection(server.address, timeout=0.2) as conn:
        server.hold.set()
        for _ in range(2):
            with pytest.raises(TimeoutError):
                step(conn, np.int32(1))
        server.hold.clear()
        server.release.set()
        assert conn.send(pb.CreateWorldRequest()).world_name == "w"   # not a late step answer
        assert tensors.unpack(step(conn, np.int32(9)).observations[1]) == 9
