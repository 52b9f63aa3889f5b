"""Protocol limits a hostile peer may not push past (issue 23, finding 10): windows, and trailers on a stream not ours."""
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
from dmrpc_gym.transport.frames import (END_HEADERS, END_STREAM, FLOW_CONTROL_ERROR, HEADERS, MAX_WINDOW, SETTINGS,
                                        WINDOW_UPDATE, frame)
from dmrpc_gym.transport.h2_transport import H2Transport
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


def test_the_client_takes_trailers_only_on_its_own_stream():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    address = f"127.0.0.1:{listener.getsockname()[1]}"

    def server() -> None:            # trailers with a status, but on stream 3, which the client never opened
        peer, _ = listener.accept()
        peer.recv(65536)
        block = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc"),
                                        ("grpc-status", "7"), ("grpc-message", "not yours")])
        peer.sendall(frame(SETTINGS, 0, 0) + frame(HEADERS, END_HEADERS | END_STREAM, 3, block))
        time.sleep(2)
        peer.close()

    threading.Thread(target=server, daemon=True).start()
    try:
        transport = H2Transport(address, (), 5.0)
        try:
            transport.write(pb.EnvironmentRequest(step=pb.StepRequest()).SerializeToString())
            with pytest.raises(ConnectionError, match="HEADERS on stream 3"):
                transport.read(5.0)
        finally:
            transport.close()
    finally:
        listener.close()
