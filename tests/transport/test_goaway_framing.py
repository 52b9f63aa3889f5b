"""The client's GOAWAY on a protocol error never lands inside a half-sent frame (issue 31).

A send cut short (a timeout, Ctrl-C, a full socket) leaves the rest of a frame in the
connection's ``_unsent``. The GOAWAY that ``_fail`` sends must follow those bytes, so the
server still reads well-formed frames and learns why the connection ends.
"""
from __future__ import annotations

import socket
import struct

import pytest

from dmrpc_gym.transport.client.connection import GrpcConnection
from dmrpc_gym.transport.codes import ErrorCode
from dmrpc_gym.transport.frames import GOAWAY, HEADER, PING, PREFACE, SETTINGS, WINDOW_UPDATE, frame


def read_frames(data: bytes) -> list[tuple[int, bytes]]:
    """``(type, payload)`` of every whole frame in ``data`` (after the preface); a cut frame ends the list."""
    assert data.startswith(PREFACE)
    data, out = data[len(PREFACE):], []
    while len(data) >= 9:
        high, low, kind, _, _ = HEADER.unpack_from(data)
        length = high << 16 | low
        if len(data) < 9 + length:
            break
        out.append((kind, data[9:9 + length]))
        data = data[9 + length:]
    return out


def test_goaway_follows_the_rest_of_a_half_sent_frame():
    server, client = socket.socketpair()
    server.settimeout(5.0)
    client.settimeout(5.0)
    try:
        conn = GrpcConnection(client, "/m", "localhost")
        server.sendall(frame(SETTINGS, 0, 0))
        conn.handshake()
        # A PING whose send was cut after 5 of its 17 bytes: the rest waits in _unsent.
        ping = frame(PING, 0, 0, b"12345678")
        client.sendall(ping[:5])
        conn._unsent = ping[5:]
        server.sendall(frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x01"))     # 3 bytes: FRAME_SIZE_ERROR
        with conn.lock, pytest.raises(ConnectionError, match="error code 6"):
            conn._read_frame()
        client.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := server.recv(1 << 16):
            received += chunk
    finally:
        server.close()
        client.close()
    frames = read_frames(received)
    kinds = [kind for kind, _ in frames]
    assert (PING, b"12345678") in frames, f"the half-sent PING was not completed: {kinds}"
    assert kinds[-1] == GOAWAY, f"no GOAWAY after the PING: {kinds}"
    assert struct.unpack_from(">LL", frames[-1][1])[1] == ErrorCode.FRAME_SIZE_ERROR
    assert not conn._unsent
