"""The server's state of one client connection, free of I/O: bytes in, events and bytes to send out.

:class:`ServerState` is the server's :class:`~dmrpc_gym.transport.connection_state.ConnectionState`.
Beyond what both ends keep (settings, windows and credit, the stream table, header blocks, counters)
it holds what a server adds: the client's preface (its :meth:`~ServerState.start`), DATA admitted to
the stream it feeds and held there until consumed, the highest stream id begun, whether the
connection drains (a GOAWAY either way), and the connection's *policing*: what a client can make
the server do without a request (answer PINGs, reset streams, hold a frame, a header block or a
preface it never finishes), held against its :class:`~dmrpc_gym.transport.limits.ConnectionLimits`.

:meth:`~dmrpc_gym.transport.connection_state.ConnectionState.receive` (the frame loop both ends share)
takes the bytes of one read and gives, one at a time, the events of the frames they complete (a
generator: a DATA payload may be a view into the read buffer, valid until the next event);
:meth:`~dmrpc_gym.transport.connection_state.ConnectionState.data_to_send` gives the bytes owed in
return (SETTINGS, their ACKs, PING ACKs, WINDOW_UPDATEs, refusals). Times are passed in (``now``),
never read.

>>> from dmrpc_gym.transport.frames import PREFACE, PING, frame
>>> from dmrpc_gym.transport.limits import ConnectionLimits
>>> state = ServerState(ConnectionLimits(min_ping_interval=1, max_ping_strikes=1), max_message=1 << 20, now=0.0)
>>> list(state.receive(PREFACE + frame(PING, 0, 0, b"12345678"), now=0.0)), state.started, state.frames
([], True, 1)
>>> state.data_to_send()[-17:] == frame(PING, 1, 0, b"12345678")     # after our SETTINGS: the PING's ACK
True
>>> _ = list(state.receive(frame(PING, 0, 0, b"12345678"), now=0.5)); state.strikes   # too soon: a strike
1
>>> state.answered = True                        # DATA went out: the next PING is free
>>> _ = list(state.receive(frame(PING, 0, 0, b"12345678"), now=0.6)); state.strikes
0
"""
from __future__ import annotations

from typing import Any

from dmrpc_gym.transport.connection_state import ConnectionState, Data, Event, Headers, ResetOwed
from dmrpc_gym.transport.frames import (DEFAULT_WINDOW, END_STREAM, ENHANCE_YOUR_CALM, MAX_WINDOW, PADDED, PREFACE,
                                        PROTOCOL_ERROR, REFUSED_STREAM, SETTING_FRAME, SETTING_HEADER_LIST,
                                        SETTING_STREAMS, SETTING_WINDOW, STREAM_CLOSED, ProtocolError,
                                        rst_stream_frame, settings_frame, unpad, window_update_frame)
from dmrpc_gym.transport.headers import HeaderBlock
from dmrpc_gym.transport.limits import IDLE_PING_INTERVAL, KEEPALIVE_PING, LINGER_BYTES, MIN_KEEPALIVE, ConnectionLimits
from dmrpc_gym.transport.server.stream import HEADER_LIMIT
from dmrpc_gym.transport.stream_states import Inbound, Outbound

__all__ = ["ServerState", "Http1Request", "StreamRefused", "OUR_FRAME", "receive_window", "CREDIT_AT"]

#: The largest frame we accept (we advertise it).
OUR_FRAME = 1 << 20
#: Beyond the largest message, what a connection's receive window holds: one largest message
#: always fits, with room for small ones beside it. Consumed bytes are given back in WINDOW_UPDATEs
#: once half of this has gathered (:data:`CREDIT_AT`).
_SLACK = 1 << 20
#: Consumed bytes are given back (a WINDOW_UPDATE) once this many have gathered, on the stream or the connection.
CREDIT_AT = _SLACK // 2


def receive_window(max_message_size: int) -> int:
    """The receive window (connection and stream) that lets one largest message through: memory follows
    what the application consumes, not what arrives. Two streams of one connection that each send half
    of a message larger than half the window wait for each other (a client sending such messages in
    parallel should use a connection for each).

    >>> receive_window(64 << 20) - (64 << 20)    # one largest message (and its prefix), and 1 MiB
    1048581
    """
    return min(MAX_WINDOW, max_message_size + 5 + _SLACK)


class Http1Request(Event):
    """The client speaks HTTP/1.x: it is answered so in plain HTTP/1.1, and the connection closed."""

    __slots__ = ()


class StreamRefused(Event):
    """A new stream was refused (RST_STREAM REFUSED_STREAM owed) past ``limit`` (None: the connection drains)."""

    __slots__ = ("limit",)

    def __init__(self, limit: str | None):
        self.limit = limit


class ServerState(ConnectionState):
    """The server's I/O-free state of one connection (see the module's docstring).

    ``limits``: the connection's bounds; ``max_message``: the largest request (it sizes the receive
    window, :func:`receive_window`); ``now``: when it began; ``settings``: private settings our SETTINGS
    frame carries too.
    """

    __slots__ = ("limits", "window", "settings", "last_stream", "draining", "tick",
                 "strikes", "last_ping", "resets", "reset_second", "since", "stall", "drop_left")

    PUSH_REFUSED = "a client sent PUSH_PROMISE"
    MAX_FRAME_IN = OUR_FRAME

    def __init__(self, limits: ConnectionLimits, max_message: int, now: float,
                 settings: tuple[tuple[int, int], ...] = ()):
        self.window = receive_window(max_message)
        self.settings = settings
        super().__init__(self.window, CREDIT_AT, HeaderBlock(limits.max_header_list_size, HEADER_LIMIT))
        self.limits = limits
        self.last_stream = 0
        self.draining = False         # a GOAWAY went either way: no new streams
        self.now = now
        #: How often (seconds) :meth:`overdue` should be asked: a quarter of the shortest timeout, at most 1 s.
        self.tick = min(1.0, limits.handshake_timeout / 4, limits.frame_timeout / 4, limits.idle_timeout / 4)
        self.strikes = 0              # PINGs too close together (see :meth:`pinged`)
        self.last_ping: float | None = None
        self.resets, self.reset_second = 0, 0.0
        self.since = now              # since when the connection is idle (or waits for its preface)
        self.stall: tuple | None = None   # (what is unfinished, since when)
        self.drop_left: int | None = None   # what the linger after the peer's error may still read

    # -- bytes in (the frame loop is the shared state's receive) ------------------------------------
    def start(self, buf: bytearray) -> bool | Event:
        """Whether the client preface is complete (our SETTINGS are then owed); an HTTP/1.x request
        is :class:`Http1Request` (and leaves a new, empty ``buf``); anything else is a ``ProtocolError``."""
        head = bytes(buf[:len(PREFACE)])
        if not PREFACE.startswith(head):
            self.buf = bytearray()
            if head[:1].isalpha():
                return Http1Request()
            raise ProtocolError(PROTOCOL_ERROR, "the client did not send the HTTP/2 preface")
        if len(buf) < len(PREFACE):
            return False
        del buf[:len(PREFACE)]
        self.started = True
        settings = ((SETTING_STREAMS, self.limits.max_streams), (SETTING_WINDOW, self.window),
                    (SETTING_FRAME, OUR_FRAME), (SETTING_HEADER_LIST, self.limits.max_header_list_size),
                    *self.settings)
        self.outbox.append(settings_frame(settings) + window_update_frame(0, self.window - DEFAULT_WINDOW))
        return True

    # -- DATA ----------------------------------------------------------------------------------------
    def data(self, flags: int, sid: int, payload: Any) -> Event | None:
        """A whole DATA frame: its event, padding taken off (and consumed), or None when dropped."""
        stream = self.admit_data(sid, len(payload))
        if stream is None or type(stream) is ResetOwed:
            return stream
        if flags & PADDED:
            n = len(payload)
            payload = unpad(payload)
            self.consume(stream, n - len(payload))
        return Data(stream, flags, payload)

    def admit_data(self, sid: int, n: int) -> Any:
        """A DATA frame of ``n`` bytes on ``sid`` is admitted (both receive windows): the stream it feeds, which
        holds them (``stream.held``) until the session consumes them (:meth:`consume`) or the stream ends
        (:meth:`release`); None when its bytes are dropped (credited: the WINDOW_UPDATE owed is in
        :meth:`data_to_send`); :class:`ResetOwed` (STREAM_CLOSED) for DATA after the client's END_STREAM
        (credited too)."""
        stream = self.streams.get(sid)
        self.admit(n, stream)
        if stream is None:
            if sid > self.last_stream or not sid:
                raise ProtocolError(PROTOCOL_ERROR, f"DATA on idle stream {sid}")
            self.credit_connection(n)    # a stream we already ended: dropped, and so consumed
            return None
        if stream.inbound is Inbound.DONE:
            self.credit_connection(n)
            return ResetOwed(stream, STREAM_CLOSED)     # DATA after the client's END_STREAM
        stream.held += n
        return stream

    #: A large DATA frame is admitted whole as it begins (and held whole: what of it comes after its
    #: stream ended is given back with the rest the stream held, by :meth:`release`).
    admit_part = admit_data

    def release(self, stream: Any) -> None:
        """``stream`` is over: what it held and the session did not consume is given back to the
        connection (the WINDOW_UPDATE owed, if any, in :meth:`data_to_send`)."""
        if stream.held:
            self.credit_connection(stream.held)
            stream.held = 0

    def consume(self, stream: Any, n: int) -> None:
        """The session took ``n`` bytes of ``stream``'s requests: the client may send as many more (the
        WINDOW_UPDATE owed, if any, in :meth:`data_to_send`; the stream's own while it may still send)."""
        stream.held -= n
        open_in = stream.inbound is Inbound.OPEN and stream.outbound is not Outbound.ENDED
        owed = self.consumed(n, stream if open_in else None)
        if owed:
            self.outbox.append(owed)

    # -- frames other than DATA ----------------------------------------------------------------------
    def header_block(self, sid: int, flags: int, headers: dict, size: int) -> Event | None:
        """A whole header block: trailers end the client's half; a new stream is :class:`Headers`, or
        refused (:class:`StreamRefused`) past ``max_streams`` or while draining."""
        if sid <= self.last_stream:      # trailers from the client: the end of its requests
            if sid in self.streams and flags & END_STREAM:
                return Data(self.streams[sid], END_STREAM, b"")
            if not flags & END_STREAM:
                raise ProtocolError(PROTOCOL_ERROR, f"trailers without END_STREAM on stream {sid}")
            return None
        if not sid % 2:
            raise ProtocolError(PROTOCOL_ERROR, f"stream id {sid} is not a client stream (odd)")
        self.last_stream = sid
        if self.draining or len(self.streams) >= self.limits.max_streams:
            self.outbox.append(rst_stream_frame(sid, REFUSED_STREAM))
            return StreamRefused(None if self.draining else "max_streams")
        return Headers(sid, flags, headers, size)

    def window_unknown(self, sid: int, stream: Any) -> None:
        if sid and stream is None and sid > self.last_stream:
            raise ProtocolError(PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {sid}")

    def peer_reset(self, sid: int, code: int) -> Event | None:
        if sid > self.last_stream:
            raise ProtocolError(PROTOCOL_ERROR, f"RST_STREAM on idle stream {sid}")
        event = super().peer_reset(sid, code)
        if event is not None:
            self.reset_counted(self.now)
        return event

    # -- policing ------------------------------------------------------------------------------------
    def pinged(self, payload: bytes) -> None:
        """A PING came (``now`` as :meth:`receive` was given it): ``ProtocolError`` ("too_many_pings") past
        ``max_ping_strikes`` PINGs too close together.

        Too close: within ``min_ping_interval`` of the last PING while a stream is open, within
        :data:`~dmrpc_gym.transport.limits.IDLE_PING_INTERVAL` while none is (gRPC's rules); our
        client's keepalive PING (:data:`~dmrpc_gym.transport.limits.KEEPALIVE_PING`) is held to its
        own floor, ``MIN_KEEPALIVE``, when that is shorter. HEADERS or DATA sent since the last PING
        (``answered``) make it no strike and clear the strikes, as grpc-go's ``resetPingStrikes`` and
        C-core's ``ResetPingStrikes`` do: the PINGs a gRPC client sends as data arrives are free.
        """
        now = self.now
        last, self.last_ping = self.last_ping, now
        if self.answered or last is None:
            self.answered, self.strikes = False, 0
            return
        interval = self.limits.min_ping_interval if self.streams else IDLE_PING_INTERVAL
        if payload == KEEPALIVE_PING:
            interval = min(interval, MIN_KEEPALIVE)
        if now - last < interval:
            self.strikes += 1
            if self.strikes > self.limits.max_ping_strikes:
                raise ProtocolError(ENHANCE_YOUR_CALM, "too_many_pings")

    def reset_counted(self, now: float) -> None:
        """The client reset a stream: ``ProtocolError`` past ``max_resets`` in one second (Rapid Reset)."""
        if now - self.reset_second >= 1.0:
            self.resets, self.reset_second = 0, now
        self.resets += 1
        if self.resets > self.limits.max_resets:
            raise ProtocolError(ENHANCE_YOUR_CALM, f"more than {self.limits.max_resets} stream resets in a "
                                                   "second (ConnectionLimits.max_resets)")

    def erred(self) -> None:
        """The connection ends by GOAWAY for the peer's own error: its linger reads at most
        :data:`~dmrpc_gym.transport.limits.LINGER_BYTES` more (:meth:`dropped`)."""
        self.drop_left = LINGER_BYTES

    def dropped(self, n: int) -> bool:
        """``n`` bytes read and dropped while the connection lingers; True when it is to read no more
        (the peer erred, and has sent past its bound since)."""
        if self.drop_left is None:
            return False                  # a server stopping: its clients' bytes are read to the end
        self.drop_left -= n
        return self.drop_left <= 0

    def idle_from(self, now: float) -> None:
        """The connection's last stream has ended: it is idle from ``now``."""
        self.since = now

    def unfinished(self) -> tuple | None:
        """What is begun and not whole, as a key that changes when it does: a header block or a frame."""
        if self.headers_in.data is not None:
            return ("header block", self.blocks)
        if self.buf or self.part is not None:
            return ("frame", self.frames)
        return None

    def overdue(self, now: float) -> str | None:
        """Why the connection is to end at ``now`` (a sentence naming the limit), or None: no preface
        within ``handshake_timeout``, a frame or header block unfinished past ``frame_timeout``, no
        open stream for ``idle_timeout``."""
        limits = self.limits
        if not self.started:
            if now - self.since > limits.handshake_timeout:
                return (f"no HTTP/2 preface within {limits.handshake_timeout:g} s "
                        "(ConnectionLimits.handshake_timeout)")
            return None
        unfinished = self.unfinished()
        if unfinished is None:
            self.stall = None
        elif self.stall is None or self.stall[0] != unfinished:
            self.stall = (unfinished, now)
        elif now - self.stall[1] > limits.frame_timeout:
            return (f"a {unfinished[0]} begun {now - self.stall[1]:.0f} s ago is still unfinished "
                    f"(ConnectionLimits.frame_timeout is {limits.frame_timeout:g} s)")
        if self.streams:
            self.since = now
        elif now - self.since > limits.idle_timeout:
            return f"no open stream for {limits.idle_timeout:g} s (ConnectionLimits.idle_timeout)"
        return None

