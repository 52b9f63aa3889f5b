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

from dmrpc_gym.transport import compression as encodings
from dmrpc_gym.transport.codes import GrpcStatus
from dmrpc_gym.transport.base import STEADY_STEP_ENV
from dmrpc_gym.transport.server import eager
from dmrpc_gym.transport.server.steady import Steady
from dmrpc_gym.transport.connection_state import (Data, GoAway, Headers, PeerReset, PingAcked, ResetOwed,
                                                  SettingsChanged, WindowsOpened)
from dmrpc_gym.transport.frames import (DEFAULT_MAX_MESSAGE, END_STREAM, NO_ERROR, PROTOCOL_ERROR, WRITE_CHUNK,
                                        Deflated, ProtocolError, goaway_frame, rst_stream_frame)
from dmrpc_gym.transport.server.stream import HTTP1_ANSWER, Inbound, Stream, StreamHandler, refusal_of
from dmrpc_gym.transport.server.replies import Replies
from dmrpc_gym.transport.server.requests import Requests
from dmrpc_gym.transport.server.deadlines import Watching
from dmrpc_gym.transport.server.answering import Answering
from dmrpc_gym.transport.server.methods import Method
from dmrpc_gym.transport.server.state import Http1Request, ServerState, StreamRefused
from dmrpc_gym.transport.server.traffic import Traffic
from dmrpc_gym.protocol.wire import METHOD_PATH
from dmrpc_gym.transport.limits import ConnectionLimits

__all__ = ["StreamHandler", "GrpcProtocol"]   # StreamHandler: re-exported from server.stream

log = logging.getLogger("dmrpc_gym.server")

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
    :class:`~dmrpc_gym.transport.server.traffic.Traffic` per server; None: its own);
    ``settings``: ``(identifier, value)`` pairs our SETTINGS frame carries after HTTP/2's own (the
    application's private ones: :mod:`~dmrpc_gym.transport.same_host`).
    """

    def __init__(self, methods: Union[Mapping[str, Method], Callable[[Mapping[str, str]], StreamHandler]],
                 connections: set, *, token: str | None = None, max_message_size: int = DEFAULT_MAX_MESSAGE,
                 limits: ConnectionLimits | None = None, app_headers: Sequence[tuple[str, str]] = (),
                 traffic: Traffic | None = None, settings: Sequence[tuple[int, int]] = ()):
        self._methods = {METHOD_PATH: Method(methods)} if callable(methods) else dict(methods)
        self._traffic = traffic if traffic is not None else Traffic()
        self._app_headers = tuple(app_headers)   # the application's response headers (name, version, features)
        self._limits = limits or ConnectionLimits()
        self._connections = connections
        self._token = token
        self._max_message = max_message_size
        self._transport: asyncio.Transport | None = None
        if os.environ.get(STEADY_STEP_ENV, "1") != "0":    # the steady path (transport.server.steady), per connection
            self.data_received = self._steady_received
        #: The connection's I/O-free state (transport.server.state): settings, windows and credit (inbound,
        #: the client may send what the session has consumed, and one largest message more), the stream
        #: table, the frames being read, the counters and the policing of PINGs, resets and stalls.
        self.state = ServerState(self._limits, max_message_size, 0.0, tuple(settings))
        self._tick: asyncio.TimerHandle | None = None
        self._window_open = asyncio.Event()
        self._can_write = asyncio.Event()  # set while asyncio's write buffer takes more (to wait on)
        self._can_write.set()
        self._writable = True              # the same, read without a call on every answer
        self._closed = False
        self._lingering = False
        self._fd: int | None = None             # the socket, where large answers may be written to it directly
        self._held: list[bytes] | None = None   # small writes of one data_received, sent together

    @property
    def open_streams(self) -> int:
        """The streams open on this connection now."""
        return len(self.state.streams)

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
        self.state.idle_from(loop.time())
        self._tick = loop.call_later(self.state.tick, self._on_tick)
        sock = transport.get_extra_info("socket")
        if sock is not None and transport.get_extra_info("sslcontext") is None and hasattr(os, "writev"):
            self._fd = sock.fileno()    # plain TCP or a Unix socket: large answers are written from their pieces
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def _frames_received(self, data: bytes) -> None:
        """The general path of ``data_received``: the connection's state takes the bytes, and each event
        it gives is acted on in turn (the steady path, when on, is ``data_received`` and hands over what
        it does not take)."""
        self._traffic.bytes_in += len(data)
        state = self.state
        if self._lingering:                # after a protocol error: read and dropped (see abort), to a bound
            if state.dropped(len(data)):
                self._transport.pause_reading()
            return
        if self._held is None and len(state.streams) > 1:   # answers of several streams made on this turn
            self._hold()                                      # are gathered (with the steady path's, if held)
        try:
            for event in state.receive(data, asyncio.get_running_loop().time()):
                if state.outbox:
                    self._write(state.data_to_send())
                _ACTIONS[type(event)](self, event)
            if state.outbox:
                self._write(state.data_to_send())
            if self._tick is None and state.unfinished() is not None:
                self._watch()              # a frame or header block begun: its deadline applies
        except ProtocolError as exc:
            log.info("closing an HTTP/2 connection: %s", exc)
            self._lost_state()
            state.erred()
            self.abort(exc.code, str(exc), linger=True)
        except Exception as exc:  # noqa: BLE001 - a broken peer loses its connection, nobody else
            log.info("closing an HTTP/2 connection: %s", exc)
            self._lost_state()
            self.abort(PROTOCOL_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            if self._held is not None:
                self._flush_held()

    def _lost_state(self) -> None:
        """A connection error: what the state owed goes out before the GOAWAY; nothing more is read."""
        state = self.state
        if state.outbox:
            self._write(state.data_to_send())
        state.buf = bytearray()

    def _on_http1(self, event: Http1Request) -> None:
        """An HTTP/1.x request: answered so, and closed."""
        if self._transport is not None:
            self._transport.write(HTTP1_ANSWER)
            self._transport.close()
        self._closed = True

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
        for stream in list(self.state.streams.values()):
            self._end_stream(stream)

    # -- events (transport.connection_state) ---------------------------------------------
    def _on_settings(self, event: SettingsChanged) -> None:
        self._window_open.set()         # (the state sized its header encoder by them)

    def _on_windows(self, event: WindowsOpened) -> None:
        self._window_open.set()

    def _on_reset_owed(self, event: ResetOwed) -> None:
        self._reset(event.stream, event.code)
        self._window_open.set()

    def _on_peer_reset(self, event: PeerReset) -> None:
        self._end_stream(event.stream)

    def _on_goaway(self, event: GoAway) -> None:
        self.state.draining = True       # RFC 9113 6.8: the streams already open run to completion
        self._close_if_done()

    def _on_refused(self, event: StreamRefused) -> None:
        if event.limit is not None:
            self._traffic.refuse(event.limit)

    def _on_data(self, event: Data) -> None:
        self._feed(event.stream, event.flags, event.data)

    def _on_ping_ack(self, event: PingAcked) -> None:
        pass

    def _on_headers(self, event: Headers) -> None:
        """A new stream's request headers: routed by ``:path`` to a session, or refused."""
        sid, flags, headers = event.stream_id, event.flags, event.headers
        state = self.state
        stream = Stream(sid, state.peer.initial_window, self._max_message, state.window)
        refusal = refusal_of(headers, self._token, event.size, self._limits.max_header_list_size, self._methods)
        if refusal is not None:
            if event.size > self._limits.max_header_list_size:
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
        state.streams[sid] = stream
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
            self.state.release(stream)
            self._write_owed()
        session, stream.session, stream.steady_host = stream.session, None, None
        if session is not None:
            session.close()
        streams = self.state.streams
        streams.pop(stream.id, None)
        if not streams and not self._closed:     # idle from now, even while a tick already runs
            self.state.idle_from(asyncio.get_running_loop().time())
            self._watch()
        self._close_if_done()

    # -- output --------------------------------------------------------------------
    def _close_if_done(self) -> None:
        if self.state.draining and not self.state.streams and not self._closed and self._transport is not None:
            self._closed = True
            self._transport.close()

    def go_away(self) -> None:
        """Graceful close (RFC 9113 6.8): GOAWAY NO_ERROR; the open streams go on, no new ones start."""
        if self._closed or self._transport is None or self.state.draining:
            return
        self.state.draining = True
        self._transport.write(goaway_frame(self.state.last_stream, NO_ERROR))
        self._close_if_done()

    def stop(self) -> None:
        """The server stops (after any grace): each open stream ends with gRPC status UNAVAILABLE
        "server shutting down", which clients treat as a reason to reconnect, then GOAWAY and close.

        A stream whose client may still send is reset NO_ERROR after its trailers (RFC 9113 8.1, as
        ``_refuse`` and gRPC's own servers end a call the client has not finished): the client's stream
        is then closed by the frames, before the connection's end, which a client reading both at once
        could otherwise take as the stream's end (grpcio once reported "Socket closed")."""
        for stream in list(self.state.streams.values()):
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
        After the peer's own error the reading stops past a bound (:meth:`ServerState.dropped
        <dmrpc_gym.transport.server.state.ServerState.dropped>`): a flood is not read on.
        """
        self._flush_held()
        if self._closed or self._transport is None:
            return
        transport = self._transport
        transport.write(goaway_frame(self.state.last_stream, code, debug.encode("utf-8", "replace")[:256]))
        self._closed = True
        if not linger:
            transport.close()
            return
        self._lingering = True
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(_LINGER, transport.close)


#: What the connection does with each event of its state (``action(protocol, event)``).
_ACTIONS = {
    Data: GrpcProtocol._on_data, Headers: GrpcProtocol._on_headers, SettingsChanged: GrpcProtocol._on_settings,
    WindowsOpened: GrpcProtocol._on_windows, ResetOwed: GrpcProtocol._on_reset_owed,
    PeerReset: GrpcProtocol._on_peer_reset, GoAway: GrpcProtocol._on_goaway, StreamRefused: GrpcProtocol._on_refused,
    PingAcked: GrpcProtocol._on_ping_ack, Http1Request: GrpcProtocol._on_http1,
}
GrpcProtocol.data_received = GrpcProtocol._frames_received   # the general path (the steady one: per connection)
