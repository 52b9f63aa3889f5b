"""A client's HTTP/2 connection carrying gRPC bidi streams, in the caller's thread.

grpcio's Python layers hand every message between threads or through an event
loop (``grpc.aio``), and for a dm_env_rpc step (one small request, one answer)
that hand-off dominates a round trip. A blocking socket speaking just the
HTTP/2 that client streams need does the same work with one ``send`` and one
``recv``: no threads, no event loop, so it works unchanged inside Jupyter
(:func:`~dmrpc_gym.transport.client.h2_transport.open_connection` opens the socket).
Each dm_env_rpc connection is one :class:`~dmrpc_gym.transport.client.stream.GrpcStream`;
the sub-envs of a vector env share one connection (:mod:`~dmrpc_gym.transport.client.pool`),
so one ``send`` carries all their steps and one ``recv`` takes what has come
for any of them. Only while the connection sits idle does a watcher thread
(:mod:`~dmrpc_gym.transport.client.idle_watcher`) answer the server's PINGs, and send ours.

What is spoken: the client preface and SETTINGS, request streams (HEADERS
and CONTINUATION, DATA carrying length-prefixed gRPC messages, gzip/deflate
encodings), flow control both ways, PING and SETTINGS acknowledgements,
trailers (``grpc-status``), RST_STREAM and GOAWAY, over TCP, TLS (ALPN
``h2``) or a Unix socket. Malformed frames end the connection with GOAWAY, as RFC 9113 says.
"""
from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time
from typing import Iterator

import hpack

from dmrpc_gym.transport import compression as encodings
from dmrpc_gym.transport.client import interrupts
from dmrpc_gym.transport.flow import Flow
from dmrpc_gym.transport.frames import (CONTINUATION, DATA, DEFAULT_MAX_MESSAGE, DEFAULT_WINDOW, END_STREAM,
                                        GATHER_SECONDS, GOAWAY, HEADERS, IN_PLACE, MAX_WINDOW, PADDED, PING,
                                        PREFACE, PROTOCOL_ERROR, PUSH_PROMISE, RST_STREAM, SETTINGS, SETTING_FRAME,
                                        SETTING_PUSH, SETTING_WINDOW, U32, WINDOW_UPDATE, ProtocolError, check_frame,
                                        frame, grpc_frame, header_frames, read_head, settings_frame,
                                        window_update_frame)
from dmrpc_gym.transport.headers import HeaderBlock
from dmrpc_gym.transport.client.clock import CallClock
from dmrpc_gym.transport.client.control import ControlFrames
from dmrpc_gym.transport.client.keepalive import RECV_CHUNK, IdleConnection
from dmrpc_gym.transport.client.large_messages import LargeMessages
from dmrpc_gym.transport.client.steady import SteadyTrips
from dmrpc_gym.transport.client.stream import GrpcStream
from dmrpc_gym.transport.client.idle_watcher import IdleWatcher

__all__ = ["GrpcConnection", "GrpcStream", "DEFAULT_MAX_MESSAGE"]

#: Seconds a connection's last stream waits, once half-closed, for the server's status.
CLOSE_WAIT = 0.5

_OUR_FRAME = 2**24 - 1           # largest frame we accept
#: Received bytes that earn the server a WINDOW_UPDATE (connection and stream): half our window, past it.
CREDIT_AT = MAX_WINDOW // 2 + 1


class GrpcConnection(SteadyTrips, ControlFrames, LargeMessages, CallClock, IdleConnection):
    """A client's HTTP/2 connection: :meth:`open_stream` gives the gRPC streams it carries.

    Args:
        sock: a connected socket (TLS-wrapped with ALPN ``h2`` for https).
        path: the gRPC method path every stream calls.
        authority: the ``:authority`` header (``host:port``).
        scheme: ``"http"`` or ``"https"``.

    The constructor sends the preface and our SETTINGS; :meth:`handshake`
    waits for the server's SETTINGS so that a peer which is not an HTTP/2
    server is found at once. Every call holds ``lock``; ``keepalive()``
    starts the watcher of the idle connection. The connection closes with
    its last stream (see :class:`~dmrpc_gym.transport.client.stream.GrpcStream`
    for an example).
    """

    def __init__(self, sock: socket.socket, path: str, authority: str, scheme: str = "http"):
        self._sock = sock
        self.lock = threading.Lock()
        self._members = threading.Lock()         # guards streams and closed, for close_stream without lock
        self._buf = bytearray()
        self._rbuf = bytearray(RECV_CHUNK)
        self._rview = memoryview(self._rbuf)
        self._decoder, self._encoder = hpack.Decoder(), hpack.Encoder()
        self._headers_in = HeaderBlock()
        #: The open streams by id.
        self.streams: dict[int, GrpcStream] = {}
        self._closing: set[int] = set()           # streams we half-closed, kept until the server's status
        self._next_id = 1
        self.closed = False
        self._dead: Exception | None = None
        self._settled, self._unsent, self._corked = False, b"", 0.0
        self._kernel = interrupts.in_kernel()     # reads hold Ctrl-C back (see interrupts)
        self._timeout = sock.gettimeout()        # the socket's timeout now
        self._per_call = self._timeout           # seconds a whole call may take (see clock)
        self._watcher: IdleWatcher | None = None
        self.messages_sent = 0                    # on all streams (the idle watcher's sign of activity)
        #: The connection's flow control (:class:`~dmrpc_gym.transport.flow.Flow`): the server's settings,
        #: the windows both ways, and the credit given back once half our window is received.
        self.flow = Flow(MAX_WINDOW, CREDIT_AT)
        self._goaway: str | None = None
        self._partial: tuple | None = None   # a large DATA frame being read in place
        self._header_alone = False           # the next frame header is read by itself (see large_messages)
        self._request = [(":method", "POST"), (":scheme", scheme), (":path", path), (":authority", authority),
                         ("content-type", "application/grpc"), ("te", "trailers"), ("user-agent", "dmrpc-gym"),
                         ("grpc-accept-encoding", encodings.ACCEPT_ENCODING)]
        settings = ((SETTING_PUSH, 0), (SETTING_WINDOW, MAX_WINDOW), (SETTING_FRAME, _OUR_FRAME))
        self._sock.sendall(PREFACE + settings_frame(settings)
                           + window_update_frame(0, MAX_WINDOW - DEFAULT_WINDOW))

    # -- public ----------------------------------------------------------------
    def open_stream(self, metadata: tuple[tuple[str, str], ...] = (), compression: str | None = None,
                    max_message_size: int = DEFAULT_MAX_MESSAGE) -> GrpcStream:
        """A new stream, its request headers sent: ``metadata`` (lower-cased names) goes in
        them; ``compression`` (``"gzip"`` / ``"deflate"``) compresses our messages (answers are
        decoded in whatever encoding the server picks); answers over ``max_message_size`` bytes
        are refused. ``ConnectionError`` once the connection is closed or dead."""
        with self.lock, self._members:
            if self.closed or self._dead is not None or self._goaway is not None:
                raise ConnectionError(f"this HTTP/2 connection is {'closed' if self.closed else 'lost'}; "
                                      f"open another")
            headers = list(self._request)
            if compression:
                headers.append(("grpc-encoding", compression))
            headers += [(k.lower(), v) for k, v in metadata]
            self._check_header_list(headers)
            stream = GrpcStream(self, self._next_id, compression, max_message_size, self.flow.peer.initial_window)
            self._next_id += 2
            try:     # before the server's SETTINGS arrive its frame limit is the default 16384
                self.send(header_frames(stream.id, 0, self._encoder.encode(headers), self.flow.peer.max_frame))
            except OSError as err:
                self._dead = err
                raise ConnectionError(f"the connection was lost as a stream opened: {err}") from None
            self.streams[stream.id] = stream
            return stream

    @property
    def usable(self) -> bool:
        """Whether another stream may be opened here: open, alive, not going away, under the peer's limit."""
        return (not self.closed and self._dead is None and self._goaway is None
                and (self.flow.peer.max_streams is None or len(self.streams) < self.flow.peer.max_streams))

    def keepalive(self, ping_every: float | None = None) -> None:
        """Answer the server's PINGs (and other control frames) while no call is running; with
        ``ping_every``, also PING a connection quiet that long (see :mod:`~dmrpc_gym.transport.client.keepalive`),
        from now on where the watcher already runs without."""
        if self._watcher is None:
            self._ping_every = ping_every
            self._watcher = IdleWatcher(self._sock, self.lock, lambda: self.messages_sent, self._pump,
                                        self._tick if ping_every else None)
        elif ping_every and self._ping_every is None:
            with self.lock:
                self._ping_every = ping_every
                self._watcher.tick = self._tick
        if ping_every:
            self._wake_reads()

    def write(self, stream: GrpcStream, *parts: bytes | memoryview) -> None:
        """Send the concatenation of ``parts`` as one gRPC message on ``stream`` (blocks only while
        the peer's window is full).

        ``stream.messages_sent`` counts the messages committed to the stream. A
        message is committed before its first byte is sent: if an interrupt
        (Ctrl-C) stops the send, its remaining bytes go out before anything
        else, so the connection stays whole. Only an interrupt between the frames
        of a message too large for one frame leaves the stream ``broken``.
        """
        with self.lock:
            if stream.ended is not None or self._dead is not None:
                raise stream.ended or self._dead
            n = sum(map(len, parts)) + 5 if len(parts) > 1 else len(parts[0]) + 5
            if not stream.compress and self.flow.take(stream, n):
                self.send(grpc_frame(parts[0] if len(parts) == 1 else b"".join(parts), stream.id), stream)
                return
            self._begin()
            try:
                self._write_large(stream, parts)
            finally:
                self._end_call()

    def send(self, data: bytes, stream: GrpcStream | None = None) -> None:
        """Send ``data`` after any bytes an interrupted (or corked) send left behind; with ``stream``,
        ``data`` is one of its messages. While :meth:`corked`, it waits for the others."""
        pending = self._unsent + data if self._unsent else data
        # One straight-line step (no call, no loop): an interrupt lands before or after it.
        if stream is None:
            self._unsent = pending
        else:
            self._unsent, stream.messages_sent, self.messages_sent = (
                pending, stream.messages_sent + 1, self.messages_sent + 1)
        if self._corked:
            if time.perf_counter() < self._corked:
                return
            self._corked = time.perf_counter() + GATHER_SECONDS
        if self._kernel and interrupts.guarded():
            return self._send_held()
        sent = 0
        try:
            while sent < len(pending):
                sent += self._sock.send(pending[sent:])
        finally:
            self._unsent = pending[sent:]

    def _send_held(self) -> None:
        """``send`` where a Ctrl-C must not send bytes twice (see interrupts): each piece leaves
        with SIGINT held until ``_unsent`` has let it go; the waits between pieces can be interrupted."""
        while self._unsent:
            try:
                interrupts.hold()
                n = self._at_once(lambda flags: self._sock.send(self._unsent, flags))
                self._unsent = self._unsent[n or 0:]
            finally:
                interrupts.release()
            if self._unsent:
                interrupts.wait_ready(self._sock, self._timeout, select.POLLOUT)

    @contextlib.contextmanager
    def corked(self) -> Iterator[None]:
        """Small messages written inside are gathered and go out together: every
        :data:`~dmrpc_gym.transport.frames.GATHER_SECONDS`, and when it ends."""
        with self.lock:
            self._corked = time.perf_counter() + GATHER_SECONDS
        try:
            yield
        finally:
            with self.lock:
                self._corked = 0.0
                try:
                    if self._unsent and self._dead is None:
                        self.send(b"")
                except OSError as err:          # the next call on any stream says so
                    self._dead = err

    def read(self, stream: GrpcStream, timeout: float | None | bool = False) -> bytes:
        """``stream``'s next gRPC message; ``StreamEnded`` once the server has ended it.

        ``timeout`` (seconds, None: no limit) bounds the whole read, however the
        answer trickles in (``socket.timeout`` past it); False keeps the last one given.
        """
        with self.lock:
            if timeout is not False:
                self._per_call = timeout
            # No limit, and the socket already blocks: nothing for the clock to do (most steps).
            timed = self._per_call is not None or self._timeout is not None
            if timed:
                self._begin()
            try:
                messages = stream.messages
                if self._unsent:
                    self.send(b"")
                while not messages:
                    if stream.ended is not None:
                        raise stream.ended
                    if len(self._buf) < 9 and len(self.streams) > 1 and not self._partial:
                        self._await_bytes()         # the lock let go meanwhile: the other streams go on
                    else:
                        self._read_frame()
                stream.messages_read += 1
                return messages.popleft()
            finally:
                if timed:
                    self._end_call()

    def close_stream(self, stream: GrpcStream) -> None:
        """Half-close ``stream`` politely. One that owes no answer stays, half-closed, until the server's
        status comes; when the last open stream closes, the socket closes after at most
        :data:`CLOSE_WAIT` seconds of waiting for the statuses still to come (a server then sees each
        call finish, not cancelled, as with gRPC's clients). Never blocks for long."""
        # END_STREAM only when no other thread is mid-call (its bytes must not be cut into): the lock is
        # waited for briefly (the idle watcher holds it while it takes in what arrived), never for long.
        sent = False
        if self.lock.acquire(timeout=CLOSE_WAIT / 5):
            try:
                if stream.id in self.streams and self._dead is None and not self.closed:
                    self._set_timeout(0.0)      # never blocks: what a full socket does not take waits in _unsent
                    try:
                        self.send(frame(DATA, END_STREAM, stream.id))
                        sent = True
                    finally:
                        self._set_timeout(self._per_call)
            except OSError:
                pass
            finally:
                self.lock.release()
        # dm_env_rpc answers each request once: with none owed, the call is over and the server's status is
        # awaited (the stream kept, half-closed); with answers owed, the socket's close cancels the call.
        owes_nothing = stream.messages_read + len(stream.messages) >= stream.messages_sent
        with self._members:
            if sent and owes_nothing and stream.ended is None:
                self._closing.add(stream.id)
            else:
                self.streams.pop(stream.id, None)
                self._closing.discard(stream.id)
            for sid in [sid for sid in self._closing if self.streams[sid].ended is not None]:
                self._closing.discard(sid)           # its status came meanwhile
                self.streams.pop(sid, None)
            last = not self.closed and self._closing.issuperset(self.streams)
            if last:
                self.closed = True
        if last:
            self._await_statuses()
            self._close_socket()

    def _await_statuses(self) -> None:
        """Read until the server has ended every half-closed stream, or :data:`CLOSE_WAIT` seconds pass
        (answers are dropped): a server then sees each call finish, not cancelled by the socket's close."""
        deadline = time.monotonic() + CLOSE_WAIT
        for sid in sorted(self._closing):
            stream = self.streams[sid]
            try:
                while stream.ended is None and time.monotonic() < deadline:
                    self.read(stream, timeout=max(deadline - time.monotonic(), 1e-3))
            except Exception:  # noqa: BLE001 - the stream ended (StreamEnded), timed out or died: closing goes on
                pass

    def _close_socket(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)    # wakes a thread blocked reading this socket
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass

    # -- frames ----------------------------------------------------------------
    def _fill(self, n: int, exact: bool = False) -> None:
        """Receive until ``n`` bytes are buffered (``exact``: not a byte more); an EOF is a ``ConnectionError``."""
        buf, silent_from = self._buf, None
        while len(buf) < n:
            if self._dead is not None:
                raise self._dead
            guard = self._kernel and interrupts.guarded()
            if self._ping_every is not None and (self._timeout is not None or guard or self._timeout_by_select):
                self._await_peer()                # waiting on the server (by select): is it there?
            if self._deadline is not None:
                self._arm()
            if guard:                             # a Ctrl-C must not lose what was read
                interrupts.wait_ready(self._sock, self._timeout)
                try:
                    interrupts.hold()
                    got = self._sock.recv_into(self._rbuf, n - len(buf) if exact else 0)
                    buf += self._rview[:got]
                finally:
                    interrupts.release()
            else:      # into a buffer kept for the purpose: recv(n) would allocate n bytes every call
                try:
                    got = self._sock.recv_into(self._rbuf, n - len(buf) if exact else 0)
                except (BlockingIOError, ssl.SSLWantReadError):   # keepalive on: a second with nothing
                    silent_from = self._heard_nothing(silent_from)
                    continue
                buf += self._rview[:got]
            if not got:
                why = f" after GOAWAY ({self._goaway})" if self._goaway else ""
                self._dead = ConnectionResetError(f"the server closed the connection{why}")
                raise self._dead

    def _read_frame(self) -> None:
        if self._partial:
            return self._read_data_direct(*self._partial)
        buf = self._buf
        if len(buf) < 9:
            self._fill(9, self._header_alone)
        self._header_alone = False
        length, kind, flags, sid = read_head(buf)
        end = 9 + length
        if kind == DATA and length >= IN_PLACE and not flags & PADDED and len(buf) < end \
                and not self._headers_in.open and sid in self.streams:
            return self._read_data_direct(self.streams[sid], flags, length)   # read into the message
        if len(buf) < end:
            self._fill(end)
        if kind == WINDOW_UPDATE and length == 4:   # grpcio servers send two with every answer: read in place
            increment = U32.unpack_from(buf, 9)[0] & 0x7FFFFFFF
            del buf[:end]
            try:
                self._on_window_update(sid, increment)
            except ProtocolError as err:
                self._fail(err)
            return
        # (through a view: one copy, not a slice's and then bytes'; below 4 KiB two small copies cost less than it)
        payload = bytes(memoryview(buf)[9:end]) if length >= 4096 else bytes(buf[9:end])
        del buf[:end]
        try:
            if kind == DATA and not self._headers_in.open:
                stream = self.streams.get(sid)
                if stream is not None:
                    return stream.on_data(flags, payload)
                if not sid:
                    raise ProtocolError(PROTOCOL_ERROR, "a DATA frame on stream 0")
                self.flow.admit(length)          # a stream we closed: its bytes still count
                owed = self.flow.consumed(length)
                if owed:
                    self.send(owed)
                return
            check_frame(kind, flags, sid, length)
            if self._headers_in.open and (kind != CONTINUATION or sid != self._headers_in.stream):
                raise ProtocolError(PROTOCOL_ERROR, "a frame interrupted a header block")
            handler = _HANDLERS[kind] if kind < len(_HANDLERS) else None
            if handler is not None:      # PRIORITY and unknown frame types: ignored, as HTTP/2 requires
                handler(self, flags, sid, payload)
        except ProtocolError as err:
            self._fail(err)

    def _on_headers(self, flags: int, sid: int, payload: bytes, kind: int = HEADERS) -> None:
        if not sid & 1 or sid >= self._next_id:    # a stream we never opened (RFC 9113 5.1)
            raise ProtocolError(PROTOCOL_ERROR, f"HEADERS on stream {sid}, which this client did not open")
        headers = self._headers_in.add(kind, flags, sid, payload, self._decoder)
        stream = self.streams.get(sid)
        if headers is not None and stream is not None:
            stream.on_headers(headers, bool(self._headers_in.flags & END_STREAM))

    def _on_continuation(self, flags: int, sid: int, payload: bytes) -> None:
        self._on_headers(flags, sid, payload, CONTINUATION)


#: The client's handler of each frame type other than DATA, indexed by type
#: (``handler(connection, flags, stream, payload)``; None: ignored).
_HANDLERS = tuple({
    HEADERS: GrpcConnection._on_headers, CONTINUATION: GrpcConnection._on_continuation,
    SETTINGS: GrpcConnection._on_settings, PING: GrpcConnection._on_ping, RST_STREAM: GrpcConnection._on_reset,
    GOAWAY: GrpcConnection._on_goaway, WINDOW_UPDATE: GrpcConnection._on_long_window_update,
    PUSH_PROMISE: GrpcConnection._on_push,
}.get(kind) for kind in range(CONTINUATION + 1))
