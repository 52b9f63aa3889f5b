"""The server's transport: gRPC bidi streams over HTTP/2, as an asyncio protocol.

grpcio's Python server spends more CPU per message than a trivial step costs
(measured in ``benchmarks/README.md``). dm_env_rpc needs one
method and one kind of call, so the server speaks just that part of gRPC over
HTTP/2 itself (sharing the framing of :mod:`dmrpc_gym.transport.frames`): each stream on
``/dm_env_rpc.v1.Environment/Process`` gets a session whose ``handle(bytes)``
answers each request in order; streams run concurrently, so one may wait on
another (multi-agent steps). Any HTTP/2 gRPC client works with it: grpcio's
(the official ``dm-env-rpc`` client), ours, or another language's.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import struct
import urllib.parse
from collections import deque
from typing import Awaitable, Callable, Protocol

import hpack

from dmrpc_gym.transport import frames as h2
from dmrpc_gym.transport.frames import (U32, ACK, CONTINUATION, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADER, HEADERS, MAX_WINDOW,
                          PADDED, PING, PREFACE, RST_STREAM, SETTING_FRAME, SETTING_HEADER_TABLE,
                          SETTING_WINDOW, SETTINGS, WINDOW_UPDATE, MessageSplitter, frame, parse_settings)
from dmrpc_gym.protocol.wire import METHOD_PATH

__all__ = ["StreamHandler", "GrpcProtocol"]

log = logging.getLogger("dmrpc_gym.server")

_OUR_FRAME = 1 << 20             # largest frame we accept (we advertise it)
_CHUNK = 1 << 18                 # largest DATA frame we write in one go
_UNIMPLEMENTED, _INTERNAL = 12, 13


class StreamHandler(Protocol):
    """What a stream talks to: answers requests in order, and is closed when the stream ends."""

    def handle(self, raw: bytes) -> Awaitable[bytes]: ...

    def close(self) -> None: ...


class _Stream:
    __slots__ = ("id", "window", "received", "splitter", "inbox", "wake", "task", "open", "replied")

    def __init__(self, stream_id: int, window: int):
        self.id = stream_id
        self.window = window
        self.received = 0                # bytes taken in since our last WINDOW_UPDATE for it
        self.splitter = MessageSplitter()
        self.inbox: deque = deque()      # requests, then None once the client is done writing
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.open = True
        self.replied = False


class GrpcProtocol(asyncio.Protocol):
    """One HTTP/2 connection: any number of gRPC streams, each served by its own session."""

    def __init__(self, new_session: Callable[[], StreamHandler], connections: set):
        self._new_session = new_session
        self._connections = connections
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._preface = False
        self._streams: dict[int, _Stream] = {}
        self._decoder = hpack.Decoder()
        self._encoder = hpack.Encoder()
        self._block = bytearray()
        self._block_stream = 0
        self._block_flags = 0
        self._conn_window = 65535
        self._peer_window = 65535
        self._peer_frame = 16384
        self._received = 0
        self._window_open = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._closed = False
        self._last_stream = 0

    # -- asyncio.Protocol --------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        transport.set_write_buffer_limits(high=_CHUNK)
        self._connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        settings = b"".join(struct.pack(">HL", k, v) for k, v in (
            (SETTING_WINDOW, MAX_WINDOW), (SETTING_FRAME, _OUR_FRAME)))
        transport.write(frame(SETTINGS, 0, 0, settings)
                        + frame(WINDOW_UPDATE, 0, 0, U32.pack(MAX_WINDOW - 65535)))

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        try:
            if not self._preface:
                if len(buf) < len(PREFACE):
                    return
                if bytes(buf[:len(PREFACE)]) != PREFACE:
                    raise ConnectionError("the client did not send the HTTP/2 preface")
                del buf[:len(PREFACE)]
                self._preface = True
            while len(buf) >= 9:
                hi, lo, kind, flags, stream = HEADER.unpack_from(buf)
                end = 9 + ((hi << 16) | lo)
                if len(buf) < end:
                    return
                payload = bytes(buf[9:end])
                del buf[:end]
                self._on_frame(kind, flags, stream & 0x7FFFFFFF, payload)
        except Exception as exc:  # noqa: BLE001 - a broken peer loses its connection, nobody else
            log.info("closing an HTTP/2 connection: %s", exc)
            self.abort(protocol_error=True)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._connections.discard(self)
        self._window_open.set()
        self._can_write.set()
        for stream in list(self._streams.values()):
            self._end_stream(stream)

    # -- frames --------------------------------------------------------------------
    def _on_frame(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        if kind == DATA:
            self._on_data(flags, sid, payload)
        elif kind in (HEADERS, CONTINUATION):
            self._on_headers(kind, flags, sid, payload)
        elif kind == SETTINGS:
            if not flags & ACK:
                for key, value in parse_settings(payload):
                    if key == SETTING_WINDOW:
                        for stream in self._streams.values():
                            stream.window += value - self._peer_window
                        self._peer_window = value
                    elif key == SETTING_FRAME:
                        self._peer_frame = value
                    elif key == SETTING_HEADER_TABLE:
                        self._encoder.header_table_size = value
                self._write(frame(SETTINGS, ACK, 0))
                self._window_open.set()
        elif kind == PING:
            if not flags & ACK:
                self._write(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            increment = U32.unpack(payload)[0] & 0x7FFFFFFF
            if sid == 0:
                self._conn_window += increment
            elif sid in self._streams:
                self._streams[sid].window += increment
            self._window_open.set()
        elif kind == RST_STREAM:
            stream = self._streams.get(sid)
            if stream is not None:
                self._end_stream(stream)
        elif kind == GOAWAY:
            self.abort()
        # PRIORITY, PUSH_PROMISE (never sent by clients) and unknown types: ignored.

    def _on_headers(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        if kind == HEADERS:
            self._block = bytearray(h2.header_fragment(flags, payload))
            self._block_stream, self._block_flags = sid, flags
        else:
            self._block += payload
        if not flags & END_HEADERS:
            return
        sid, flags = self._block_stream, self._block_flags
        headers = h2.decode_headers(self._decoder, self._block)
        if sid in self._streams:          # trailers from the client: treat as end of its requests
            if flags & END_STREAM:
                self._client_done(self._streams[sid])
            return
        if sid <= self._last_stream or not sid % 2:
            raise ConnectionError(f"stream id {sid} is not a new client stream")
        self._last_stream = sid
        stream = _Stream(sid, self._peer_window)
        path = headers.get(":path", "")
        if path != METHOD_PATH or headers.get(":method") != "POST":
            self._trailers_only(stream, _UNIMPLEMENTED, f"unknown method {path}; this server serves {METHOD_PATH}")
            return
        if headers.get("grpc-encoding", "identity") != "identity":
            self._trailers_only(stream, _UNIMPLEMENTED, f"message encoding {headers['grpc-encoding']} is not supported")
            return
        self._streams[sid] = stream
        stream.task = asyncio.get_running_loop().create_task(self._serve(stream))
        if flags & END_STREAM:
            self._client_done(stream)

    def _on_data(self, flags: int, sid: int, payload: bytes) -> None:
        # Windows start (and are topped up) at 2**31-1: give back what was used once half is.
        self._received += len(payload)
        if self._received > MAX_WINDOW // 2:
            self._write(frame(WINDOW_UPDATE, 0, 0, U32.pack(self._received)))
            self._received = 0
        stream = self._streams.get(sid)
        if stream is None:
            return                       # a stream we already ended
        stream.received += len(payload)
        if stream.received > MAX_WINDOW // 2:
            self._write(frame(WINDOW_UPDATE, 0, sid, U32.pack(stream.received)))
            stream.received = 0
        if flags & PADDED:
            payload = payload[1:len(payload) - payload[0]]
        before = len(stream.inbox)
        stream.splitter.feed(payload, stream.inbox)
        if len(stream.inbox) != before:
            stream.wake.set()
        if flags & END_STREAM:
            self._client_done(stream)

    def _client_done(self, stream: _Stream) -> None:
        stream.inbox.append(None)
        stream.wake.set()

    # -- streams -------------------------------------------------------------------
    async def _serve(self, stream: _Stream) -> None:
        session = self._new_session()
        try:
            inbox = stream.inbox
            while True:
                while not inbox:
                    stream.wake.clear()
                    await stream.wake.wait()
                raw = inbox.popleft()
                if raw is None:
                    break
                await self._send(stream, await session.handle(raw))
            self._trailers(stream, 0, "")
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - end this stream with a status, keep the connection
            log.exception("a stream failed")
            self._trailers(stream, _INTERNAL, f"{type(exc).__name__}: {exc}")
        finally:
            session.close()
            self._streams.pop(stream.id, None)

    async def _send(self, stream: _Stream, message: bytes) -> None:
        if not stream.replied:
            stream.replied = True
            self._write(frame(HEADERS, END_HEADERS, stream.id, self._encoder.encode(
                [(":status", "200"), ("content-type", "application/grpc")])))
        n = len(message) + 5
        if n <= _CHUNK and n <= stream.window and n <= self._conn_window and n <= self._peer_frame:
            stream.window -= n
            self._conn_window -= n
            self._write(h2.grpc_frame(message, stream.id))
            return
        # A large message goes out in chunks, each written only while the socket keeps
        # up (pause_writing / resume_writing): asyncio's write buffer then stays small,
        # where one huge write would be moved down its buffer once per partial send.
        data = memoryview(b"\x00" + U32.pack(len(message)) + message)
        while data:
            while min(stream.window, self._conn_window) <= 0 or not self._can_write.is_set():
                if self._closed or not stream.open:
                    raise asyncio.CancelledError()
                if self._can_write.is_set():
                    self._window_open.clear()
                    await self._window_open.wait()
                else:
                    await self._can_write.wait()
            n = min(len(data), stream.window, self._conn_window, self._peer_frame, _CHUNK)
            stream.window -= n
            self._conn_window -= n
            self._write(frame(DATA, 0, stream.id, bytes(data[:n])))
            data = data[n:]

    def _trailers(self, stream: _Stream, code: int, message: str) -> None:
        if not stream.open or self._closed:
            return
        stream.open = False
        fields = [] if stream.replied else [(":status", "200"), ("content-type", "application/grpc")]
        fields.append(("grpc-status", str(code)))
        if message:
            fields.append(("grpc-message", urllib.parse.quote(message, safe=" !#$&'()*+,/:;=?@[]~")))
        self._write(frame(HEADERS, END_HEADERS | END_STREAM, stream.id, self._encoder.encode(fields)))

    def _trailers_only(self, stream: _Stream, code: int, message: str) -> None:
        self._trailers(stream, code, message)

    def _end_stream(self, stream: _Stream) -> None:
        stream.open = False
        self._streams.pop(stream.id, None)
        if stream.task is not None and not stream.task.done():
            stream.task.cancel()

    # -- output --------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        if not self._closed and self._transport is not None:
            self._transport.write(data)

    def abort(self, protocol_error: bool = False) -> None:
        """Say GOAWAY and drop the connection; its streams end and their sessions close."""
        if self._closed or self._transport is None:
            return
        code = 1 if protocol_error else 0
        self._transport.write(frame(GOAWAY, 0, 0, struct.pack(">LL", self._last_stream, code)))
        self._closed = True
        self._transport.close()
