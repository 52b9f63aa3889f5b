"""A raw HTTP/2 peer for protocol tests: frames written byte by byte to a real server over loopback."""
from __future__ import annotations

import socket
import struct

import hpack

from dmrpc_gym.protocol.wire import METHOD_PATH, pb
from dmrpc_gym.transport.limits import ConnectionLimits
from dmrpc_gym.transport.frames import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADER,
    HEADERS,
    PREFACE,
    SETTINGS,
    U32,
    frame,
)


#: Server limits for tests whose header lists pass the default 16 KiB (a 60 KB path, 32 KB of metadata).
LARGE_HEADERS = ConnectionLimits(max_header_list_size=64 << 10)


class RawClient:
    """A client that writes whatever frames it is told to; ``frames()`` reads the server's."""

    def __init__(self, address: str, timeout: float = 10.0):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        self._buf = b""
        self._encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request_headers(self, stream: int, extra: tuple = (), path: str = METHOD_PATH) -> bytes:
        """A HEADERS frame opening a gRPC call on ``stream``."""
        return frame(HEADERS, END_HEADERS, stream, self._encoder.encode(
            [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "x"),
             ("content-type", "application/grpc"), ("te", "trailers"), *extra]))

    def next_frame(self) -> tuple[int, int, int, bytes] | None:
        """``(kind, flags, stream, payload)``, or None at EOF."""
        while True:
            if len(self._buf) >= 9:
                hi, lo, kind, flags, stream = HEADER.unpack_from(self._buf)
                end = 9 + ((hi << 16) | lo)
                if len(self._buf) >= end:
                    payload, self._buf = self._buf[9:end], self._buf[end:]
                    return kind, flags, stream & 0x7FFFFFFF, payload
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self._buf += chunk

    def goaway(self) -> tuple[int, str] | None:
        """Read until the server's GOAWAY: ``(error code, debug text)``; None if it closed without one."""
        while (got := self.next_frame()) is not None:
            kind, _, _, payload = got
            if kind == GOAWAY:
                return struct.unpack_from(">L", payload, 4)[0], payload[8:].decode()
        return None

    def trailers(self, stream: int) -> dict[str, str]:
        """Read until ``stream``'s END_STREAM HEADERS; their decoded fields (answers on the way are kept)."""
        self.answers: list[bytes] = getattr(self, "answers", [])
        block = b""
        while (got := self.next_frame()) is not None:
            kind, flags, sid, payload = got
            if kind == HEADERS and sid == stream:
                block, end = payload, flags & END_STREAM
            elif kind == CONTINUATION and sid == stream:
                block += payload
            elif kind == DATA and sid == stream:
                self.answers.append(payload)
                continue
            else:
                continue
            if flags & END_HEADERS:
                fields = dict(self.decoder.decode(block))
                if end:
                    return fields
        raise ConnectionError("the server closed the connection before the trailers")

    def close(self) -> None:
        self.sock.close()


def message(request: pb.EnvironmentRequest, flag: int = 0) -> bytes:
    """One length-prefixed gRPC message."""
    body = request.SerializeToString()
    return bytes([flag]) + U32.pack(len(body)) + body


def data(stream: int, payload: bytes, end: bool = False) -> bytes:
    return frame(DATA, END_STREAM if end else 0, stream, payload)
