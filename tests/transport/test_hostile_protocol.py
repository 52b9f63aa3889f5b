"""Protocol limits a hostile peer may not push past (issue 23): windows and trailers not ours (finding 10), trickled bytes (9), a drained connection (11)."""
from __future__ import annotations

import socket
import struct
import threading
import time

import hpack
import pytest
import servers
from raw_h2 import RawClient

from dmrpc_gym.protocol.wire import pb
from dmrpc_gym import DmRpcEnv
from dmrpc_gym.transport.frames import (DATA, END_HEADERS, END_STREAM, FLOW_CONTROL_ERROR, GOAWAY, HEADERS, MAX_WINDOW, SETTINGS,
                                        WINDOW_UPDATE, frame)
from dmrpc_gym.transport.client.h2_transport import H2Transport
from dmrpc_gym.worlds.catch import Catch


@pytest.fixture(scope="module")
def catch():
    server = servers.start(Catch)
    yield server
    server.stop()


def test_settings_pushing_a_stream_window_past_the_maximum_is_a_flow_control_error(catch):
    raw = RawClient(catch.address, timeout=5)
    try:                   # stream 1's window raised to the maximum, then a larger initial window
        raw.send(raw.request_headers(1)
                 + frame(WINDOW_UPDATE, 0, 1, struct.pack(">L", MAX_WINDOW - 65535))
                 + frame(SETTINGS, 0, 0, struct.pack(">HL", 4, 1 << 20)))
        code, debug = raw.goaway()
        assert code == FLOW_CONTROL_ERROR and "2**31-1" in debug
    finally:
        raw.close()


def answered_by(frames: bytes) -> str:
    """What our client's first read raises when a raw server answers its call with ``frames``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def server() -> None:
        peer, _ = listener.accept()
        peer.recv(65536)
        peer.sendall(frame(SETTINGS, 0, 0) + frames)
        time.sleep(2)
        peer.close()

    threading.Thread(target=server, daemon=True).start()
    try:
        transport = H2Transport(f"127.0.0.1:{listener.getsockname()[1]}", (), 5.0)
        try:
            transport.write(pb.EnvironmentRequest(step=pb.StepRequest()).SerializeToString())
            with pytest.raises(Exception) as raised:
                transport.read(5.0)
            return f"{type(raised.value).__name__}: {raised.value}"
        finally:
            transport.close()
    finally:
        listener.close()


def test_the_client_takes_trailers_only_on_its_own_stream():
    block = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc"),
                                    ("grpc-status", "7"), ("grpc-message", "not yours")])
    # trailers with a status, but on stream 3, which the client never opened
    raised = answered_by(frame(HEADERS, END_HEADERS | END_STREAM, 3, block))
    assert raised.startswith("ConnectionError") and "HEADERS on stream 3" in raised


def test_the_client_refuses_settings_that_push_its_window_past_the_maximum():
    raised = answered_by(frame(WINDOW_UPDATE, 0, 1, struct.pack(">L", MAX_WINDOW - 65535))
                         + frame(SETTINGS, 0, 0, struct.pack(">HL", 4, 1 << 20)))
    assert raised.startswith("ConnectionError") and "2**31-1" in raised


def test_the_client_respects_a_server_that_allows_no_streams():
    raised = answered_by(frame(SETTINGS, 0, 0, struct.pack(">HL", 3, 0)))   # SETTINGS_MAX_CONCURRENT_STREAMS 0
    assert raised.startswith("StreamEnded") and "SETTINGS_MAX_CONCURRENT_STREAMS 0" in raised


def trickling_server(prelude: bytes, trickle: bytes) -> tuple[socket.socket, threading.Event]:
    """A raw server that sends ``prelude`` at once, then ``trickle`` one byte every 0.25 s (finding 9)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    done = threading.Event()

    def serve() -> None:
        peer, _ = listener.accept()
        try:
            peer.sendall(prelude)
            for byte in trickle:
                if done.wait(0.25):
                    break
                peer.sendall(bytes([byte]))
        except OSError:
            pass
        finally:
            peer.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener, done


def test_connect_timeout_bounds_a_trickled_handshake():
    """Before: the timeout applied per recv, and a SETTINGS frame sent a byte at a time took 20 s."""
    listener, done = trickling_server(b"", frame(SETTINGS, 0, 0, struct.pack(">HL", 4, 65535) * 12))
    start = time.monotonic()
    try:
        with pytest.raises(ConnectionError, match="timed out"):
            DmRpcEnv(f"127.0.0.1:{listener.getsockname()[1]}", connect_timeout=1.5)
    finally:
        done.set()
        listener.close()
    assert time.monotonic() - start < 3


def test_step_timeout_bounds_a_trickled_answer():
    """A DATA frame of 80 bytes sent a byte at a time (20 s): the read ends at its 1.5 s timeout."""
    listener, done = trickling_server(frame(SETTINGS, 0, 0), frame(DATA, 0, 1, b"\x00" + struct.pack(">L", 75) + bytes(75)))
    try:
        transport = H2Transport(f"127.0.0.1:{listener.getsockname()[1]}", (), 5.0)
        try:
            transport.write(pb.EnvironmentRequest(step=pb.StepRequest()).SerializeToString())
            start = time.monotonic()
            with pytest.raises(socket.timeout):
                transport.read(1.5)
            assert time.monotonic() - start < 2.5
        finally:
            transport.close()
    finally:
        done.set()
        listener.close()


def test_an_idle_client_closes_a_connection_that_goaway_drained():
    """Finding 11: once a GOAWAY came and our stream ended, the idle client closes the connection at
    once (as grpcio and grpc-go do), so a server's graceful stop need not wait for it; the next call
    says why."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    closed_after: list[float] = []

    def server() -> None:
        peer, _ = listener.accept()
        peer.settimeout(10)
        peer.recv(65536)
        block = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc"),
                                        ("grpc-status", "14"), ("grpc-message", "server shutting down")])
        peer.sendall(frame(SETTINGS, 0, 0) + frame(GOAWAY, 0, 0, struct.pack(">LL", 1, 0))
                     + frame(HEADERS, END_HEADERS | END_STREAM, 1, block))
        start = time.monotonic()
        try:
            while peer.recv(65536):
                pass
            closed_after.append(time.monotonic() - start)
        except OSError:
            pass
        peer.close()

    thread = threading.Thread(target=server, daemon=True)
    thread.start()
    transport = H2Transport(f"127.0.0.1:{listener.getsockname()[1]}", (), 5.0)
    try:
        thread.join(5)
        assert closed_after and closed_after[0] < 2, closed_after
        with pytest.raises(Exception, match="server shutting down"):
            transport.write(pb.EnvironmentRequest(step=pb.StepRequest()).SerializeToString())
    finally:
        transport.close()
        listener.close()
