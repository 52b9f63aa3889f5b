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

from dmrpc_gym.transport import busy_poll, compression as encodings
from dmrpc_gym.transport.client import interrupts
from dmrpc_gym.transport.connection_state import (Data, GoAway, Headers, PeerReset, PingAcked, ResetOwed,
                                                  SettingsChanged, WindowsOpened)
from dmrpc_gym.transport.frames import (DATA, DEFAULT_MAX_MESSAGE, DEFAULT_WINDOW, END_STREAM, GATHER_SECONDS,
                                        MAX_WINDOW, PREFACE, SETTING_FRAME, SETTING_PUSH, SETTING_WINDOW, ProtocolError,
                                        frame, grpc_frame, settings_frame, window_update_frame)
from dmrpc_gym.transport.client.state import CREDIT_AT, ClientState
from dmrpc_gym.transport.stream_states import Outbound
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
        self._rbuf = bytearray(RECV_CHUNK)
        self._rview = memoryview(self._rbuf)
        #: The connection's I/O-free state (:class:`~dmrpc_gym.transport.client.state.ClientState`): the
        #: server's settings, the windows both ways and the credit given back once half our window is
        #: received, the stream table, the header block being received, the ACKs owed.
        self.state = ClientState(CREDIT_AT)
        #: The open streams by id (the state's stream table).
        self.streams: dict[int, GrpcStream] = self.state.streams
        self._closing: set[int] = set()           # streams we half-closed, kept until the server's status
        self.closed = False
        self._dead: Exception | None = None
        self._settled, self._unsent, self._corked = False, b"", 0.0
        self._kernel = interrupts.in_kernel()     # reads hold Ctrl-C back (see interrupts)
        self._timeout = sock.gettimeout()        # the socket's timeout now
        self._per_call = self._timeout           # seconds a whole call may take (see clock)
        self._watcher: IdleWatcher | None = None
        self.messages_sent = 0                    # on all streams (the idle watcher's sign of activity)
        self._goaway: str | None = None
        self._header_alone = False           # the next frame header is read by itself (see large_messages)
        #: Whether this connection is the move of a TCP one to the server's Unix socket (transport.same_host).
        self.same_host = False
        #: How the steady path reads an answer (``recv_answer(buf)``): polling first where busy polling is on
        #: (:mod:`~dmrpc_gym.transport.busy_poll`), but over TLS, whose reads cannot poll.
        self.recv_answer = sock.recv_into if isinstance(sock, ssl.SSLSocket) else busy_poll.reader(sock)
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
            state = self.state
            sid, opening = state.frame_request(headers)
            stream = GrpcStream(self, sid, compression, max_message_size, state.peer.initial_window)
            try:
                self.send(opening)
            except OSError as err:
                self._dead = err
                raise ConnectionError(f"the connection was lost as a stream opened: {err}") from None
            self.streams[stream.id] = stream
            return stream

    @property
    def usable(self) -> bool:
        """Whether another stream may be opened here: open, alive, not going away, under the peer's limit."""
        return (not self.closed and self._dead is None and self._goaway is None
                and (self.state.peer.max_streams is None or len(self.streams) < self.state.peer.max_streams))

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
            if not stream.compress and self.state.take(stream, n):
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
                messages, state = stream.messages, self.state
                if self._unsent:
                    self.send(b"")
                while not messages:
                    if stream.ended is not None:
                        raise stream.ended
                    if len(state.buf) < 9 and len(self.streams) > 1 and state.part is None:
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
                        if stream.outbound is not Outbound.ENDED:
                            stream.outbound = stream.outbound.to(Outbound.ENDED)
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

    def close(self) -> None:
        """Close a connection that carries no stream (one opened and left for another, as a move to the same
        host's Unix socket leaves it: :mod:`~dmrpc_gym.transport.same_host`); one with streams closes with its
        last (:meth:`close_stream`)."""
        with self._members:
            if self.streams:
                raise RuntimeError(f"this connection carries {len(self.streams)} streams: close them")
            if self.closed:
                return
            self.closed = True
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
    def _recv(self, limit: int = 0) -> None:
        """One ``recv`` (``limit``: at most that many bytes; 0: what the socket holds, to a chunk) into the
        state's buffer; an EOF is a ``ConnectionError``."""
        buf, silent_from = self.state.buf, None
        while True:
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
                    got = self._sock.recv_into(self._rbuf, limit)
                    buf += self._rview[:got]
                finally:
                    interrupts.release()
            else:      # into a buffer kept for the purpose: recv(n) would allocate n bytes every call
                try:
                    got = self._sock.recv_into(self._rbuf, limit)
                except (BlockingIOError, ssl.SSLWantReadError):   # keepalive on: a second with nothing
                    silent_from = self._heard_nothing(silent_from)
                    continue
                buf += self._rview[:got]
            if not got:
                why = f" after GOAWAY ({self._goaway})" if self._goaway else ""
                self._dead = ConnectionResetError(f"the server closed the connection{why}")
                raise self._dead
            return

    def _read_frame(self, one: bool = False) -> None:
        """Read once (unless the state can take something of what it holds already), and act on the
        events of every whole frame the state then holds (``one``: of the first only); a large DATA frame
        begun is read in place, straight into its message."""
        state = self.state
        if state.part is None:
            if not state.ready():     # after a large message's frame, a header is read alone (large_messages)
                self._recv(9 - len(state.buf) if self._header_alone and len(state.buf) < 9 else 0)
            self._header_alone = False
            self._take_frames(one=one)
        if state.part is not None:
            self._read_data_direct()

    def _take_frames(self, one: bool = False, whole: bool = False) -> None:
        """Act on the events of the whole frames the state holds (``one``: of the first only; ``whole``: not
        of a large DATA frame begun); what it owes the server in return (ACKs, WINDOW_UPDATEs) goes
        without waiting."""
        state = self.state
        try:
            for event in state.receive(one=one, whole=whole):
                if state.outbox:
                    self._owe(state.data_to_send())
                _ACTIONS[type(event)](self, event)
            if state.outbox:
                self._owe(state.data_to_send())
        except ProtocolError as err:
            self._fail(err)

    def _on_data(self, event: Data) -> None:
        event.stream.on_data(event.flags, event.data)

    def _on_headers(self, event: Headers) -> None:
        stream = self.streams.get(event.stream_id)
        if stream is not None:
            stream.on_headers(event.headers, bool(event.flags & END_STREAM))


#: What the connection does with each event of its state (``action(connection, event)``).
_ACTIONS = {
    Data: GrpcConnection._on_data, Headers: GrpcConnection._on_headers, SettingsChanged: GrpcConnection._on_settings,
    PingAcked: GrpcConnection._on_ping_ack, PeerReset: GrpcConnection._on_reset, GoAway: GrpcConnection._on_goaway,
    ResetOwed: GrpcConnection._on_reset_owed, WindowsOpened: lambda connection, event: None,
}
