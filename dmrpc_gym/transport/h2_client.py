"""One gRPC bidirectional stream over a dedicated HTTP/2 connection, in one thread.

grpcio's Python layers hand every message between threads (the sync API) or
through an event loop woken by a poller thread (``grpc.aio``). A dm_env_rpc
step is one small request and one answer, so that hand-off dominates the cost
of a round trip. A dm_env_rpc connection is one stream, so a blocking socket
speaking just the part of HTTP/2 that one client stream needs does the same
work with one ``send`` and one ``recv``: no threads, no event loop, and so it
works unchanged inside Jupyter, whose thread already runs an event loop.

What is spoken: the client preface and SETTINGS, one request stream (HEADERS,
DATA carrying length-prefixed gRPC messages), flow control both ways, PING
and SETTINGS acknowledgements, trailers (``grpc-status``), RST_STREAM and
GOAWAY. Headers are (de)compressed with ``hpack``.
"""
from __future__ import annotations

import socket
import struct
import urllib.parse
from collections import deque

import hpack

from dmrpc_gym.protocol.wire import METHOD_PATH
from dmrpc_gym.transport.base import StreamEnded, parse_address
from dmrpc_gym.transport.frames import (ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADER, HEADERS,
                                        MAX_WINDOW, PADDED, PING, PREFACE, PUSH_PROMISE, RST_STREAM, SETTING_FRAME,
                                        SETTING_HEADER_TABLE, SETTING_PUSH, SETTING_WINDOW, SETTINGS, U32,
                                        WINDOW_UPDATE, MessageSplitter, decode_headers, frame,
                                        grpc_frame, header_fragment, parse_settings)

__all__ = ["GrpcStream", "H2Transport"]

_STREAM = 1                      # the one stream this connection carries
_OUR_FRAME = 2**24 - 1           # largest frame we accept
_RECV_CHUNK = 1 << 18


class GrpcStream:
    """A client-side gRPC bidi stream: ``write`` messages, ``read`` answers in order.

    Args:
        sock: a connected socket (TLS-wrapped with ALPN ``h2`` for https).
        path: the gRPC method path.
        authority: the ``:authority`` header (``host:port``).
        metadata: extra request headers (lower-case names).
        scheme: ``"http"`` or ``"https"``.

    The constructor sends the preface and the request headers; ``handshake``
    waits for the server's SETTINGS so that a peer which is not an HTTP/2
    server is found at once.
    """

    def __init__(self, sock: socket.socket, path: str, authority: str,
                 metadata: tuple[tuple[str, str], ...] = (), scheme: str = "http"):
        self._sock = sock
        self._buf = bytearray()
        self._splitter = MessageSplitter()
        self._messages: deque[bytes] = deque()
        self._decoder = hpack.Decoder()
        self._header_block = bytearray()
        self._header_flags = 0
        self._trailers: dict[str, str] | None = None
        self._ended: StreamEnded | None = None
        self._settled = False
        self._unsent = b""
        self.messages_sent = 0
        self.broken = False
        self._send_conn = 65535
        self._send_stream = 65535
        self._peer_window = 65535       # the peer's SETTINGS_INITIAL_WINDOW_SIZE
        self._peer_frame = 16384
        self._received = 0              # bytes received since our last WINDOW_UPDATE
        self._goaway: str | None = None
        headers = [(":method", "POST"), (":scheme", scheme), (":path", path),
                   (":authority", authority), ("content-type", "application/grpc"),
                   ("te", "trailers"), ("user-agent", "dmrpc-gym")]
        headers += [(k.lower(), v) for k, v in metadata]
        block = hpack.Encoder().encode(headers)
        settings = b"".join(struct.pack(">HL", k, v) for k, v in (
            (SETTING_PUSH, 0), (SETTING_WINDOW, MAX_WINDOW), (SETTING_FRAME, _OUR_FRAME)))
        self._sock.sendall(
            PREFACE + frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, U32.pack(MAX_WINDOW - 65535))
            + frame(HEADERS, END_HEADERS, _STREAM, block))

    # -- public ----------------------------------------------------------------
    def handshake(self) -> None:
        """Block until the server's first SETTINGS frame arrives (socket timeout applies)."""
        while not self._settled:
            self._read_frame()

    def write(self, message: bytes) -> None:
        """Send one gRPC message (blocks only while the peer's flow-control window is full).

        ``messages_sent`` counts the messages committed to the stream. A
        message is committed before its first byte is sent: if an interrupt
        (Ctrl-C) stops the send, its remaining bytes go out before anything
        else, so the stream stays whole. Only an interrupt between the frames
        of a message too large for one frame leaves it ``broken``.
        """
        if self._ended is not None:
            raise self._ended
        n = len(message) + 5
        if n <= self._send_stream and n <= self._send_conn and n <= self._peer_frame:
            self._send_stream -= n
            self._send_conn -= n
            self._send(grpc_frame(message, _STREAM), message=True)
            return
        data = memoryview(b"\x00" + U32.pack(len(message)) + message)
        self.broken = True               # until the last frame of this message is committed
        self.messages_sent += 1
        while data:
            while min(self._send_stream, self._send_conn) <= 0:
                self._read_frame()
                if self._ended is not None:
                    raise self._ended
            n = min(len(data), self._send_stream, self._send_conn, self._peer_frame)
            self._send_stream -= n
            self._send_conn -= n
            self._send(frame(DATA, 0, _STREAM, bytes(data[:n])))
            data = data[n:]
        self.broken = False

    def _send(self, data: bytes, message: bool = False) -> None:
        """Send ``data`` after any bytes an interrupted send left behind."""
        pending = self._unsent + data if self._unsent else data
        # One straight-line step (no call, no loop): an interrupt lands before or after it.
        self._unsent, self.messages_sent = pending, self.messages_sent + message
        sent = 0
        try:
            while sent < len(pending):
                sent += self._sock.send(pending[sent:])
        finally:
            self._unsent = pending[sent:]

    def read(self) -> bytes:
        """The next gRPC message; ``StreamEnded`` once the server has ended the stream."""
        messages = self._messages
        if self._unsent:
            self._send(b"")
        while not messages:
            if self._ended is not None:
                raise self._ended
            self._read_frame()
        return messages.popleft()

    def close(self) -> None:
        """Half-close our side politely, then close the socket. Never blocks for long."""
        try:
            self._sock.settimeout(0.0)
            self._sock.send(frame(DATA, END_STREAM, _STREAM))
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass

    # -- frames ----------------------------------------------------------------
    def _fill(self, n: int) -> None:
        """Receive until ``n`` bytes are buffered; an EOF is a ``ConnectionError``."""
        buf = self._buf
        while len(buf) < n:
            chunk = self._sock.recv(max(_RECV_CHUNK, n - len(buf)))
            if not chunk:
                why = f" after GOAWAY ({self._goaway})" if self._goaway else ""
                raise ConnectionResetError(f"the server closed the connection{why}")
            buf += chunk

    def _read_frame(self) -> None:
        buf = self._buf
        if len(buf) < 9:
            self._fill(9)
        hi, lo, kind, flags, stream = HEADER.unpack_from(buf)
        end = 9 + ((hi << 16) | lo)
        if len(buf) < end:
            self._fill(end)
        stream &= 0x7FFFFFFF
        if kind == WINDOW_UPDATE:          # grpcio servers send two with every answer: read in place
            increment = U32.unpack_from(buf, 9)[0] & 0x7FFFFFFF
            del buf[:end]
            if stream == 0:
                self._send_conn += increment
            else:
                self._send_stream += increment
            return
        payload = bytes(buf[9:end])
        del buf[:end]
        if kind == DATA:
            self._on_data(flags, payload)
        elif kind in (HEADERS, CONTINUATION):
            self._on_headers(kind, flags, payload)
        elif kind == SETTINGS:
            if not flags & ACK:
                self._on_settings(payload)
        elif kind == PING:
            if not flags & ACK:
                self._send(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM and stream == _STREAM:
            code = U32.unpack(payload)[0]
            self._end(None, f"the server reset the stream (HTTP/2 error code {code})")
        elif kind == GOAWAY:
            last, code = struct.unpack_from(">LL", payload)
            debug = payload[8:].decode("utf-8", "replace")
            self._goaway = f"HTTP/2 error code {code}{': ' + debug if debug else ''}"
            if (last & 0x7FFFFFFF) < _STREAM:
                self._end(None, f"the server is going away ({self._goaway})")
        elif kind == PUSH_PROMISE:
            raise ConnectionError("protocol error: the server pushed a stream we disabled")
        # PRIORITY and unknown frame types are ignored, as HTTP/2 requires.

    def _on_settings(self, payload: bytes) -> None:
        for key, value in parse_settings(payload):
            if key == SETTING_WINDOW:
                self._send_stream += value - self._peer_window
                self._peer_window = value
            elif key == SETTING_FRAME:
                self._peer_frame = value
            elif key == SETTING_HEADER_TABLE:
                pass  # we never index headers, so any table size suits us
        self._send(frame(SETTINGS, ACK, 0))
        self._settled = True

    def _on_data(self, flags: int, payload: bytes) -> None:
        self._received += len(payload)
        if flags & PADDED:
            payload = payload[1:len(payload) - payload[0]]
        self._splitter.feed(payload, self._messages)
        if self._received > MAX_WINDOW // 2:
            update = U32.pack(self._received)
            self._send(frame(WINDOW_UPDATE, 0, 0, update) + frame(WINDOW_UPDATE, 0, _STREAM, update))
            self._received = 0
        if flags & END_STREAM:
            self._end(None, "the server ended the stream without trailers")

    def _on_headers(self, kind: int, flags: int, payload: bytes) -> None:
        if kind == HEADERS:
            self._header_block = bytearray(header_fragment(flags, payload))
            self._header_flags = flags
        else:
            self._header_block += payload
        if not flags & END_HEADERS:
            return
        headers = decode_headers(self._decoder, self._header_block)
        if headers.get(":status", "200") != "200":
            self._end(None, f"the server answered HTTP status {headers[':status']}")
        elif self._header_flags & END_STREAM:
            status = int(headers.get("grpc-status", "2"))
            message = urllib.parse.unquote(headers.get("grpc-message", ""))
            self._end(status, message or f"the server ended the stream with gRPC status {status}")

    def _end(self, status: int | None, message: str) -> None:
        if self._ended is None:
            self._ended = StreamEnded(status, message)


class H2Transport:
    """A :class:`~dmrpc_gym.transport.base.Transport`: :class:`GrpcStream` over a TCP socket to ``address``."""

    def __init__(self, address: str, metadata, connect_timeout: float | None):
        host, port = parse_address(address)
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as err:
            raise ConnectionError(f"cannot reach a dm_env_rpc server at {address}: {err}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._stream = GrpcStream(sock, METHOD_PATH, address, tuple(metadata or ()))
            self._stream.handshake()
        except (OSError, ConnectionError) as err:
            sock.close()
            raise ConnectionError(
                f"{address} did not answer as a gRPC (HTTP/2) server: {err}") from None
        self._sock = sock
        self._timeout = connect_timeout
        self.write = self._stream.write

    @property
    def messages_sent(self) -> int:
        return self._stream.messages_sent

    @property
    def broken(self) -> bool:
        return self._stream.broken

    def read(self, timeout: float | None) -> bytes:
        if timeout != self._timeout:
            self._sock.settimeout(timeout)
            self._timeout = timeout
        return self._stream.read()

    def close(self) -> None:
        self._stream.close()
