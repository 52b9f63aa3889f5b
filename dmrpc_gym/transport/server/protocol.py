"""The server's transport: gRPC bidi streams over HTTP/2, as an asyncio protocol.

grpcio's Python server spends more CPU per message than a trivial step costs
(measured in ``benchmarks/README.md``). dm_env_rpc needs one
method and one kind of call, so the server speaks just that part of gRPC over
HTTP/2 itself (sharing the framing of :mod:`dmrpc_gym.transport.frames`): each stream is
routed by its ``:path`` through the application's method table
(:mod:`~dmrpc_gym.transport.server.methods`; ``/dm_env_rpc.v1.Environment/Process`` alone by
default) to a session whose ``handle(bytes)`` answers each request in order (or, for a
server-streaming method, with many messages: :mod:`~dmrpc_gym.transport.server.answering`);
streams run concurrently, so one may wait on
another (multi-agent steps). Any HTTP/2 gRPC client works with it: grpcio's
(the official ``dm-env-rpc`` client), ours, or another language's (grpc-js
and grpclib are tested). It reads gzip/deflate requests and answers in kind,
accepts header blocks split in CONTINUATION frames and splits its own, refuses
a message over ``max_message_size`` from its 5-byte prefix, closes gracefully
on GOAWAY either way, and answers malformed frames with the RFC 9113 GOAWAY.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Callable, Mapping, Sequence, Union

import hpack

from dmrpc_gym.transport import compression as encodings
from dmrpc_gym.transport.codes import GrpcStatus
from dmrpc_gym.transport.base import STEADY_STEP_ENV
from dmrpc_gym.transport.server import eager
from dmrpc_gym.transport.server.steady import Steady
from dmrpc_gym.transport.frames import (ACK, CONTINUATION, DATA, DEFAULT_MAX_MESSAGE, DEFAULT_WINDOW, END_STREAM,
                                        FRAME_SIZE_ERROR, GOAWAY, HEADERS, IN_PLACE, NO_ERROR, PADDED, PING, PREFACE,
                                        PROTOCOL_ERROR, PUSH_PROMISE, REFUSED_STREAM, RST_STREAM, SETTINGS,
                                        SETTING_FRAME, SETTING_HEADER_LIST, SETTING_STREAMS, SETTING_WINDOW, U32,
                                        WINDOW_UPDATE, WRITE_CHUNK, Deflated, ProtocolError,
                                        check_frame, goaway_frame, ping_frame, read_head, rst_stream_frame,
                                        settings_frame, window_update_frame)
from dmrpc_gym.transport.flow import SETTINGS_ACK, Flow, StreamReset
from dmrpc_gym.transport.server.stream import HEADER_LIMIT, HTTP1_ANSWER, Inbound, Stream, StreamHandler, refusal_of
from dmrpc_gym.transport.headers import HeaderBlock
from dmrpc_gym.transport.server.replies import Replies
from dmrpc_gym.transport.server import requests
from dmrpc_gym.transport.server.requests import Requests, receive_window
from dmrpc_gym.transport.server.conduct import Conduct, Watching
from dmrpc_gym.transport.server.answering import Answering
from dmrpc_gym.transport.server.methods import Method
from dmrpc_gym.transport.server.traffic import Traffic
from dmrpc_gym.protocol.wire import METHOD_PATH
from dmrpc_gym.transport.limits import KEEPALIVE_PING, ConnectionLimits

__all__ = ["StreamHandler", "GrpcProtocol"]   # StreamHandler: re-exported from server.stream

log = logging.getLogger("dmrpc_gym.server")

_OUR_FRAME = 1 << 20             # largest frame we accept (we advertise it)
_LINGER = 1.0                    # seconds a connection that broke the protocol is read and dropped


class GrpcProtocol(Steady, Requests, Replies, Answering, Watching, asyncio.Protocol):
    """One HTTP/2 connection: any number of gRPC streams, each served by its own session.

    ``methods``: what is served, :class:`~dmrpc_gym.transport.server.methods.Method` by ``:path``
    (a stream is routed once, at its HEADERS); a callable ``new_session(headers)`` alone serves
    dm_env_rpc's ``Process`` with it. Another path is answered UNIMPLEMENTED, naming those served;
    ``token``: when set, a call must carry ``authorization: Bearer <token>``;
    ``max_message_size``: the largest request accepted, in bytes (RESOURCE_EXHAUSTED beyond);
    ``limits``: the connection's bounds (:class:`~dmrpc_gym.transport.limits.ConnectionLimits`);
    ``app_headers``: ``(name, value)`` pairs every stream's response headers carry after gRPC's own
    (the application says who it is and what it speaks; the transport does not know);
    ``traffic``: where the connection counts its bytes, refusals and failed statuses (one
    :class:`~dmrpc_gym.transport.server.traffic.Traffic` per server; None: its own).
    """

    def __init__(self, methods: Union[Mapping[str, Method], Callable[[Mapping[str, str]], StreamHandler]],
                 connections: set, *, token: str | None = None, max_message_size: int = DEFAULT_MAX_MESSAGE,
                 limits: ConnectionLimits | None = None, app_headers: Sequence[tuple[str, str]] = (),
                 traffic: Traffic | None = None):
        self._methods = {METHOD_PATH: Method(methods)} if callable(methods) else dict(methods)
        self._traffic = traffic if traffic is not None else Traffic()
        self._app_headers = tuple(app_headers)   # the application's response headers (name, version, features)
        self._limits = limits or ConnectionLimits()
        self._connections = connections
        self._token = token
        self._max_message = max_message_size
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        if os.environ.get(STEADY_STEP_ENV, "1") != "0":    # the steady path (transport.server.steady), per connection
            self.data_received = self._steady_received
        self._preface = False
        self._streams: dict[int, Stream] = {}
        self._headers_in = HeaderBlock(self._limits.max_header_list_size, HEADER_LIMIT)
        self._decoder = self._headers_in.decoder()
        self._encoder = hpack.Encoder()
        # Flow control (transport.flow): inbound, the client may send what the session has consumed, and
        # one largest message more (so memory follows what the application takes, not what arrives).
        self._window = receive_window(max_message_size)
        self._flow = Flow(self._window, requests.CREDIT_AT)
        self._conduct: Conduct | None = None
        self._tick: asyncio.TimerHandle | None = None
        self._frames_done = 0              # frames and header blocks taken whole: how a stall is told
        self._blocks_done = 0
        self._window_open = asyncio.Event()
        self._can_write = asyncio.Event()  # set while asyncio's write buffer takes more (to wait on)
        self._can_write.set()
        self._writable = True              # the same, read without a call on every answer
        self._closed = False
        self._lingering = False
        self._last_stream = 0
        self._draining = False           # a GOAWAY went either way: close once the streams are done
        self._fd: int | None = None             # the socket, where large answers may be written to it directly
        self._part: list | None = None          # a large DATA frame being read: [stream, flags, bytes left]
        self._held: list[bytes] | None = None   # small writes of one data_received, sent together

    @property
    def open_streams(self) -> int:
        """The streams open on this connection now."""
        return len(self._streams)

    # -- asyncio.Protocol --------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        if len(self._connections) >= self._limits.max_connections:
            self._closed = True
            self._traffic.refuse("max_connections")
            self._traffic.connections_refused.note(self._limits.max_connections)
            transport.abort()
            return
        transport.set_write_buffer_limits(high=WRITE_CHUNK)
        self._connections.add(self)
        loop = asyncio.get_running_loop()
        self._conduct = Conduct(self._limits, loop.time())
        self._tick = loop.call_later(self._conduct.tick, self._on_tick)
        sock = transport.get_extra_info("socket")
        if sock is not None and transport.get_extra_info("sslcontext") is None and hasattr(os, "writev"):
            self._fd = sock.fileno()    # plain TCP or a Unix socket: large answers are written from their pieces
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def _frames_received(self, data: bytes) -> None:
        """The general path of ``data_received``: frames read one by one (the steady path, when on, is
        ``data_received`` and hands over what it does not take)."""
        self._traffic.bytes_in += len(data)
        if self._lingering:                # after a protocol error: read and dropped (see abort), to a bound
            if self._conduct.dropped(len(data)):
                self._transport.pause_reading()
            return
        if self._held is None and len(self._streams) > 1:   # answers of several streams made on this turn
            self._hold()                                      # are gathered (with the steady path's, if held)
        buf = self._buf
        try:
            if self._part is not None:     # a large DATA frame's payload: straight into its message
                data = self._take_part(data)
                if len(data) >= 9 and not buf:          # and so is the next one's, if it is begun and large
                    length, kind, flags, stream = read_head(data)
                    if (kind == DATA and IN_PLACE <= length <= _OUR_FRAME and not flags & PADDED
                            and not self._headers_in.open and len(data) < 9 + length):
                        self._begin_part(flags, stream, length)
                        data = self._take_part(data[9:])
            buf += data
            if not self._preface and not self._check_preface(buf):
                return
            while len(buf) >= 9:
                length, kind, flags, stream = read_head(buf)
                if length > _OUR_FRAME:
                    raise ProtocolError(FRAME_SIZE_ERROR, f"a frame of {length} bytes exceeds our "
                                                          f"SETTINGS_MAX_FRAME_SIZE of {_OUR_FRAME}")
                if kind == HEADERS or kind == CONTINUATION:    # judged before its payload is buffered
                    self._headers_in.admit(kind, flags, length)
                end = 9 + length
                if len(buf) < end:
                    if kind == DATA and length >= IN_PLACE and not flags & PADDED and not self._headers_in.open:
                        self._begin_part(flags, stream, length)      # the rest comes straight into its message
                        with memoryview(buf) as view:
                            self._take_part(view[9:])
                        del buf[:]
                    if self._tick is None:
                        self._watch()          # a frame begun: its deadline applies
                    return
                if kind == DATA and length >= IN_PLACE and not self._headers_in.open:   # copied once, into its message
                    with memoryview(buf) as view:
                        self._on_data(flags, stream, view[9:end])
                else:
                    self._on_frame(kind, flags, stream, bytes(buf[9:end]))
                del buf[:end]
                self._frames_done += 1
            if (buf or self._part is not None or self._headers_in.open) and self._tick is None:
                self._watch()
        except ProtocolError as exc:
            log.info("closing an HTTP/2 connection: %s", exc)
            self._buf = bytearray()
            self._conduct.erred()
            self.abort(exc.code, str(exc), linger=True)
        except Exception as exc:  # noqa: BLE001 - a broken peer loses its connection, nobody else
            log.info("closing an HTTP/2 connection: %s", exc)
            self._buf = bytearray()
            self.abort(PROTOCOL_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            if self._held is not None:
                self._flush_held()

    def _check_preface(self, buf: bytearray) -> bool:
        """Whether the client preface is complete; an HTTP/1.x request is answered and closed at once."""
        head = bytes(buf[:len(PREFACE)])
        if not PREFACE.startswith(head):
            self._buf = bytearray()
            if self._transport is not None and head[:1].isalpha():
                self._transport.write(HTTP1_ANSWER)
                self._transport.close()
                self._closed = True
                return False
            raise ProtocolError(PROTOCOL_ERROR, "the client did not send the HTTP/2 preface")
        if len(buf) < len(PREFACE):
            return False
        del buf[:len(PREFACE)]
        self._preface = True
        settings = ((SETTING_STREAMS, self._limits.max_streams), (SETTING_WINDOW, self._window),
                    (SETTING_FRAME, _OUR_FRAME), (SETTING_HEADER_LIST, self._limits.max_header_list_size))
        self._write(settings_frame(settings)
                    + window_update_frame(0, self._window - DEFAULT_WINDOW))
        return True

    def pause_writing(self) -> None:
        self._writable = False
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._writable = True
        self._can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._connections.discard(self)
        if self._tick is not None:
            self._tick.cancel()
        self._window_open.set()
        self._writable = True
        self._can_write.set()
        for stream in list(self._streams.values()):
            self._end_stream(stream)

    # -- frames --------------------------------------------------------------------
    def _on_frame(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        if kind != DATA or self._headers_in.open:
            check_frame(kind, flags, sid, len(payload))
            if self._headers_in.open and (kind != CONTINUATION or sid != self._headers_in.stream):
                raise ProtocolError(PROTOCOL_ERROR, "a frame interrupted a header block")
        handler = _HANDLERS[kind] if kind < len(_HANDLERS) else None
        if handler is not None:          # PRIORITY and unknown types: ignored
            handler(self, flags, sid, payload)

    def _on_settings(self, flags: int, sid: int, payload: bytes) -> None:
        if flags & ACK:
            return
        self._flow.peer.apply(payload, self._streams.values())
        self._encoder.header_table_size = self._flow.peer.header_table
        self._write(SETTINGS_ACK)
        self._window_open.set()

    def _on_window_update(self, flags: int, sid: int, payload: bytes) -> None:
        increment = U32.unpack(payload)[0] & 0x7FFFFFFF
        stream = self._streams.get(sid)
        if sid and stream is None and sid > self._last_stream:
            raise ProtocolError(PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {sid}")
        try:
            self._flow.window_update(sid, increment, stream)
        except StreamReset as err:
            self._reset(stream, err.code)
        self._window_open.set()

    def _on_continuation(self, flags: int, sid: int, payload: bytes) -> None:
        self._on_headers(flags, sid, payload, CONTINUATION)

    def _on_ping(self, flags: int, sid: int, payload: bytes) -> None:
        if not flags & ACK:
            self._conduct.ping(asyncio.get_running_loop().time(), len(self._streams), payload == KEEPALIVE_PING)
            self._write(ping_frame(payload, ack=True))

    def _on_reset(self, flags: int, sid: int, payload: bytes) -> None:
        if sid > self._last_stream:
            raise ProtocolError(PROTOCOL_ERROR, f"RST_STREAM on idle stream {sid}")
        stream = self._streams.get(sid)
        if stream is not None:
            self._conduct.reset(asyncio.get_running_loop().time())
            self._end_stream(stream)

    def _on_goaway(self, flags: int, sid: int, payload: bytes) -> None:
        self._draining = True            # RFC 9113 6.8: the streams already open run to completion
        self._close_if_done()

    def _on_push(self, flags: int, sid: int, payload: bytes) -> None:
        raise ProtocolError(PROTOCOL_ERROR, "a client sent PUSH_PROMISE")

    def _on_headers(self, flags: int, sid: int, payload: bytes, kind: int = HEADERS) -> None:
        headers = self._headers_in.add(kind, flags, sid, payload, self._decoder)
        if headers is None:
            return
        self._blocks_done += 1
        sid, flags = self._headers_in.stream, self._headers_in.flags
        if sid <= self._last_stream:      # trailers from the client: the end of its requests
            if sid in self._streams and flags & END_STREAM:
                self._client_done(self._streams[sid])
            elif not flags & END_STREAM:
                raise ProtocolError(PROTOCOL_ERROR, f"trailers without END_STREAM on stream {sid}")
            return
        if not sid % 2:
            raise ProtocolError(PROTOCOL_ERROR, f"stream id {sid} is not a client stream (odd)")
        self._last_stream = sid
        if self._draining or len(self._streams) >= self._limits.max_streams:
            if not self._draining:
                self._traffic.refuse("max_streams")
            self._write(rst_stream_frame(sid, REFUSED_STREAM))
            return
        stream = Stream(sid, self._flow.peer.initial_window, self._max_message, self._window)
        refusal = refusal_of(headers, self._token, self._headers_in.size, self._limits.max_header_list_size,
                             self._methods)
        if refusal is not None:
            if self._headers_in.size > self._limits.max_header_list_size:
                self._traffic.refuse("max_header_list_size")
            self._trailers(stream, *refusal)
            if not flags & END_STREAM:
                self._write(rst_stream_frame(sid, NO_ERROR))
            return
        encoding = headers.get("grpc-encoding", "identity")
        if encoding != "identity":
            stream.splitter.decompress = Deflated       # inflated as the session takes it
            stream.compress, stream.encoding = encodings.compressor(encoding), encoding
        method = self._methods[headers[":path"]]
        stream.session = method.handler(headers)
        stream.steady_host = stream.session if hasattr(stream.session, "steady") else None
        stream.many = method.many
        self._streams[sid] = stream
        if flags & END_STREAM:
            self._client_done(stream)

    # -- streams -------------------------------------------------------------------
    def _run(self, stream: Stream) -> None:
        """Answer the stream's waiting requests now, on the loop's turn that read them; a task
        carries on only if one has to wait (:mod:`~dmrpc_gym.transport.server.eager`). While the
        stream is busy, whoever is answering takes the new requests too, in order."""
        if stream.busy:
            return
        stream.busy = True
        stream.task = eager.start(self._serve(stream))

    def _finish(self, stream: Stream) -> None:
        """The stream is over: close its session (once) and forget it; what it held is given back."""
        if stream.held:
            self._credit_connection(stream.held)
            stream.held = 0
        session, stream.session, stream.steady_host = stream.session, None, None
        if session is not None:
            session.close()
        self._streams.pop(stream.id, None)
        if not self._streams and not self._closed:     # idle from now, even while a tick already runs
            self._conduct.idle_from(asyncio.get_running_loop().time())
            self._watch()
        self._close_if_done()

    # -- output --------------------------------------------------------------------
    def _close_if_done(self) -> None:
        if self._draining and not self._streams and not self._closed and self._transport is not None:
            self._closed = True
            self._transport.close()

    def go_away(self) -> None:
        """Graceful close (RFC 9113 6.8): GOAWAY NO_ERROR; the open streams go on, no new ones start."""
        if self._closed or self._transport is None or self._draining:
            return
        self._draining = True
        self._transport.write(goaway_frame(self._last_stream, NO_ERROR))
        self._close_if_done()

    def stop(self) -> None:
        """The server stops (after any grace): each open stream ends with gRPC status UNAVAILABLE
        "server shutting down", which clients treat as a reason to reconnect, then GOAWAY and close.

        A stream whose client may still send is reset NO_ERROR after its trailers (RFC 9113 8.1, as
        ``_refuse`` and gRPC's own servers end a call the client has not finished): the client's stream
        is then closed by the frames, before the connection's end, which a client reading both at once
        could otherwise take as the stream's end (grpcio once reported "Socket closed")."""
        for stream in list(self._streams.values()):
            open_in = stream.inbound is Inbound.OPEN
            self._trailers(stream, GrpcStatus.UNAVAILABLE, "server shutting down")
            if open_in:
                self._write(rst_stream_frame(stream.id, NO_ERROR))
        self.abort(linger=True)          # closed with the peer's bytes unread, the kernel could reset
                                         # the connection, and the peer lose the trailers

    def abort(self, code: int = NO_ERROR, debug: str = "", linger: bool = False) -> None:
        """Say GOAWAY (``code``, ``debug`` text) and drop the connection; its streams end and their sessions close.

        ``linger`` (a peer's protocol error): shut our side, and read and drop what the peer
        still sends for a moment before closing. Closing with its bytes unread would make
        the kernel reset the connection, and the peer could lose the GOAWAY that says why.
        After the peer's own error the reading stops past a bound (:meth:`Conduct.dropped
        <dmrpc_gym.transport.server.conduct.Conduct.dropped>`): a flood is not read on.
        """
        self._flush_held()
        if self._closed or self._transport is None:
            return
        transport = self._transport
        transport.write(goaway_frame(self._last_stream, code, debug.encode("utf-8", "replace")[:256]))
        self._closed = True
        if not linger:
            transport.close()
            return
        self._lingering = True
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(_LINGER, transport.close)


#: The server's handler of each frame type it acts on, indexed by type
#: (``handler(protocol, flags, stream, payload)``; None: ignored).
_HANDLERS = tuple({
    DATA: GrpcProtocol._on_data, HEADERS: GrpcProtocol._on_headers, CONTINUATION: GrpcProtocol._on_continuation,
    SETTINGS: GrpcProtocol._on_settings, PING: GrpcProtocol._on_ping, WINDOW_UPDATE: GrpcProtocol._on_window_update,
    RST_STREAM: GrpcProtocol._on_reset, GOAWAY: GrpcProtocol._on_goaway, PUSH_PROMISE: GrpcProtocol._on_push,
}.get(kind) for kind in range(CONTINUATION + 1))
GrpcProtocol.data_received = GrpcProtocol._frames_received   # the general path (the steady one: per connection)
