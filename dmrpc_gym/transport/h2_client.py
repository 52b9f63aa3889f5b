"""One gRPC bidirectional stream over a dedicated HTTP/2 connection, in one thread.

grpcio's Python layers hand every message between threads or through an event
loop (``grpc.aio``), and for a dm_env_rpc step (one small request, one answer)
that hand-off dominates a round trip. A dm_env_rpc connection is one stream, so
a blocking socket speaking just the HTTP/2 that one client stream needs does the
same work with one ``send`` and one ``recv``: no threads, no event loop, so it
works unchanged inside Jupyter (:class:`~dmrpc_gym.transport.h2_transport.H2Transport`
opens the socket). Only while the connection sits idle does a watcher thread
(:mod:`~dmrpc_gym.transport.keepalive`) answer the server's PINGs, and send ours.

What is spoken: the client preface and SETTINGS, one request stream (HEADERS
and CONTINUATION, DATA carrying length-prefixed gRPC messages, gzip/deflate
encodings), flow control both ways, PING and SETTINGS acknowledgements,
trailers (``grpc-status``), RST_STREAM and GOAWAY, over TCP or TLS (ALPN
``h2``). Malformed frames end the connection with GOAWAY, as RFC 9113 says.
"""
from __future__ import annotations

import socket
import struct
import threading
import urllib.parse
from collections import deque

import hpack

from dmrpc_gym.transport import compression as encodings
from dmrpc_gym.transport.base import StreamEnded
from dmrpc_gym.transport.frames import (ACK, CANCEL, DEFAULT_MAX_MESSAGE, CONTINUATION, DATA, END_STREAM, FLOW_CONTROL_ERROR,
                                        GOAWAY, HEADER, HEADERS, MAX_WINDOW, PADDED, PING, PREFACE, PROTOCOL_ERROR, PUSH_PROMISE,
                                        RST_STREAM, SETTING_FRAME, SETTING_PUSH, SETTING_STREAMS, SETTING_WINDOW, SETTINGS, U32,
                                        WINDOW_UPDATE, HeaderBlock, MessageSplitter, ProtocolError, StreamError, check_frame,
                                        frame, grpc_frame, grpc_status, header_frames, parse_settings, unpad)
from dmrpc_gym.transport.h2_clock import _Clock
from dmrpc_gym.transport.h2_idle import RECV_CHUNK, _Idle
from dmrpc_gym.transport.h2_large import _LargeMessages
from dmrpc_gym.transport.keepalive import IdleWatcher

__all__ = ["GrpcStream", "DEFAULT_MAX_MESSAGE"]

_STREAM = 1                      # the one stream this connection carries
_OUR_FRAME = 2**24 - 1           # largest frame we accept
_DIRECT = 1 << 16                # DATA frames at least this large are read straight into their message


class GrpcStream(_LargeMessages, _Clock, _Idle):
    """A client-side gRPC bidi stream: ``write`` messages, ``read`` answers in order.

    Args:
        sock: a connected socket (TLS-wrapped with ALPN ``h2`` for https).
        path: the gRPC method path.
        authority: the ``:authority`` header (``host:port``).
        metadata: extra request headers (lower-case names).
        scheme: ``"http"`` or ``"https"``.
        compression: ``"gzip"`` / ``"deflate"`` to compress our messages (answers are
            decoded in whatever encoding the server picks).
        max_message_size: the largest answer accepted, in bytes.

    The constructor sends the preface and the request headers; ``handshake``
    waits for the server's SETTINGS so that a peer which is not an HTTP/2
    server is found at once. Every call holds ``lock``; ``keepalive()``
    starts the watcher of the idle connection.
    """

    def __init__(self, sock: socket.socket, path: str, authority: str,
                 metadata: tuple[tuple[str, str], ...] = (), scheme: str = "http",
                 compression: str | None = None, max_message_size: int = DEFAULT_MAX_MESSAGE):
        self._sock = sock
        self.lock = threading.Lock()
        self._buf = bytearray()
        self._rbuf = bytearray(RECV_CHUNK)
        self._rview = memoryview(self._rbuf)
        self._splitter = MessageSplitter(max_message_size)
        self._max_message = max_message_size
        self._messages: deque[bytes] = deque()
        self._decoder = hpack.Decoder()
        self._headers_in = HeaderBlock()
        self._ended: StreamEnded | None = None
        #: The server's response headers (initial metadata), once they have come.
        self.initial_metadata: dict[str, str] = {}
        self._dead: Exception | None = None
        self._settled, self._unsent = False, b""
        self._timeout = sock.gettimeout()        # the socket's timeout now
        self._per_call = self._timeout           # seconds a whole call may take (see h2_clock)
        self._watcher: IdleWatcher | None = None
        self._compress = compression and encodings.compressor(compression)
        self.messages_sent, self.broken = 0, False
        self._send_conn = self._send_stream = 65535
        self._peer_window = 65535       # the peer's SETTINGS_INITIAL_WINDOW_SIZE
        self._peer_frame = 16384
        self._received = 0              # bytes received since our last WINDOW_UPDATE
        self._goaway: str | None = None
        self._partial: tuple[int, int, int] | None = None   # a large DATA frame being read in place
        headers = [(":method", "POST"), (":scheme", scheme), (":path", path),
                   (":authority", authority), ("content-type", "application/grpc"),
                   ("te", "trailers"), ("user-agent", "dmrpc-gym"),
                   ("grpc-accept-encoding", encodings.ACCEPT_ENCODING)]
        if compression:
            headers.append(("grpc-encoding", compression))
        headers += [(k.lower(), v) for k, v in metadata]
        block = hpack.Encoder().encode(headers)
        settings = b"".join(struct.pack(">HL", k, v) for k, v in (
            (SETTING_PUSH, 0), (SETTING_WINDOW, MAX_WINDOW), (SETTING_FRAME, _OUR_FRAME)))
        # Before the server's SETTINGS arrive its frame limit is the default 16384.
        self._sock.sendall(
            PREFACE + frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, U32.pack(MAX_WINDOW - 65535))
            + header_frames(_STREAM, 0, block, self._peer_frame))

    # -- public ----------------------------------------------------------------
    def handshake(self) -> None:
        """Block until the server's first SETTINGS frame arrives (within the socket's timeout, as a whole).

        An HTTP/1.x server (its answer starts ``HTTP/``) is a ``ConnectionError`` at once.
        """
        self._begin()
        self._fill(9)
        head = bytes(self._buf[:9])
        if head.isascii() and all(c >= 9 for c in head):     # text, not a frame header: HTTP/1.x
            line = bytes(self._buf).split(b"\n", 1)[0].strip().decode("latin-1")[:100]
            raise ConnectionError(f"the server speaks HTTP/1.x (or another text protocol), not HTTP/2: "
                                  f"it answered {line!r}")
        if self._buf[3] != SETTINGS:
            raise ProtocolError(PROTOCOL_ERROR, f"the server's first frame is of type {self._buf[3]}, not SETTINGS")
        while not self._settled:
            self._read_frame()
        self._end_call()

    def keepalive(self, ping_every: float | None = None) -> None:
        """Answer the server's PINGs (and other control frames) while no call is running; with
        ``ping_every``, also PING a connection quiet that long (see :mod:`~dmrpc_gym.transport.h2_idle`)."""
        if self._watcher is None:
            self._ping_every = ping_every
            self._watcher = IdleWatcher(self._sock, self.lock, lambda: self.messages_sent, self._pump,
                                        self._tick if ping_every else None)

    def write(self, *parts: bytes | memoryview) -> None:
        """Send the concatenation of ``parts`` as one gRPC message (blocks only while the peer's window is full).

        ``messages_sent`` counts the messages committed to the stream. A
        message is committed before its first byte is sent: if an interrupt
        (Ctrl-C) stops the send, its remaining bytes go out before anything
        else, so the stream stays whole. Only an interrupt between the frames
        of a message too large for one frame leaves it ``broken``.
        """
        with self.lock:
            if self._ended is not None or self._dead is not None:
                raise self._ended or self._dead
            n = sum(map(len, parts)) + 5 if len(parts) > 1 else len(parts[0]) + 5
            if n <= self._send_stream and n <= self._send_conn and n <= self._peer_frame and not self._compress:
                self._send_stream -= n
                self._send_conn -= n
                self._send(grpc_frame(parts[0] if len(parts) == 1 else b"".join(parts), _STREAM), message=True)
                return
            self._begin()
            try:
                self._write_large(parts)
            finally:
                self._end_call()

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

    def read(self, timeout: float | None | bool = False) -> bytes:
        """The next gRPC message; ``StreamEnded`` once the server has ended the stream.

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
                messages = self._messages
                if self._unsent:
                    self._send(b"")
                while not messages:
                    if self._ended is not None:
                        raise self._ended
                    self._read_frame()
                return messages.popleft()
            finally:
                if timed:
                    self._end_call()

    def close(self) -> None:
        """Half-close our side politely, then close the socket. Never blocks for long."""
        if self._watcher is not None:
            self._watcher.stop()
        # END_STREAM only when no other thread is mid-send (its bytes must not be cut into).
        if self.lock.acquire(blocking=False):
            try:
                if not self._unsent:
                    self._sock.settimeout(0.0)
                    self._sock.send(frame(DATA, END_STREAM, _STREAM))
            except OSError:
                pass
            finally:
                self.lock.release()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)    # wakes a thread blocked reading this socket
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
            if self._dead is not None:
                raise self._dead
            if self._deadline is not None:
                self._arm()
            # Into a buffer kept for the purpose: recv(n) would allocate n bytes every call.
            got = self._sock.recv_into(self._rbuf)
            if not got:
                why = f" after GOAWAY ({self._goaway})" if self._goaway else ""
                self._dead = ConnectionResetError(f"the server closed the connection{why}")
                raise self._dead
            buf += self._rview[:got]

    def _read_frame(self) -> None:
        if self._partial:
            return self._read_data_direct(*self._partial)
        buf = self._buf
        if len(buf) < 9:
            self._fill(9)
        hi, lo, kind, flags, stream = HEADER.unpack_from(buf)
        length = (hi << 16) | lo
        end = 9 + length
        stream &= 0x7FFFFFFF
        if (kind == DATA and length >= _DIRECT and stream == _STREAM and not flags & PADDED and len(buf) < end
                and not self._headers_in.open):
            return self._read_data_direct(flags, length)      # not buffered first: read into the message
        if len(buf) < end:
            self._fill(end)
        if kind == WINDOW_UPDATE and length == 4:   # grpcio servers send two with every answer: read in place
            increment = U32.unpack_from(buf, 9)[0] & 0x7FFFFFFF
            del buf[:end]
            try:
                self._on_window_update(stream, increment)
            except ProtocolError as err:
                self._fail(err)
            return
        payload = bytes(memoryview(buf)[9:end]) if length >= _DIRECT else bytes(buf[9:end])
        del buf[:end]
        try:
            if kind != DATA or self._headers_in.open:
                check_frame(kind, flags, stream, length)
                if self._headers_in.open and kind != CONTINUATION:
                    raise ProtocolError(PROTOCOL_ERROR, "a frame interrupted a header block")
            if kind == DATA:
                if stream == _STREAM:
                    self._on_data(flags, payload)
                elif not stream:
                    raise ProtocolError(PROTOCOL_ERROR, "a DATA frame on stream 0")
            elif kind in (HEADERS, CONTINUATION):
                if stream != _STREAM:    # a stream we never opened: its trailers are not ours (RFC 9113 5.1)
                    raise ProtocolError(PROTOCOL_ERROR, f"HEADERS on stream {stream}, which this client did not open")
                self._on_headers(kind, flags, payload)
            elif kind == SETTINGS:
                if not flags & ACK:
                    self._on_settings(payload)
            elif kind == PING:
                if not flags & ACK:
                    self._send(frame(PING, ACK, 0, payload))
                else:
                    self._pong()
            elif kind == RST_STREAM and stream == _STREAM:
                code = U32.unpack(payload)[0]
                self._end(None, f"the server reset the stream (HTTP/2 error code {code})")
            elif kind == GOAWAY:
                last, code = struct.unpack_from(">LL", payload)
                debug = payload[8:].decode("utf-8", "replace")
                self._goaway = f"HTTP/2 error code {code}{': ' + debug if debug else ''}"
                if debug == "too_many_pings" and self._ping_every:
                    self._goaway += f"; keepalive={self._ping_every:g} s pings more often than this server allows"
                if (last & 0x7FFFFFFF) < _STREAM:
                    self._end(None, f"the server is going away ({self._goaway})")
            elif kind == WINDOW_UPDATE:
                raise ProtocolError(6, f"a WINDOW_UPDATE frame of {length} bytes (must be 4)")
            elif kind == PUSH_PROMISE:
                raise ProtocolError(PROTOCOL_ERROR, "the server pushed a stream we disabled")
        except ProtocolError as err:
            self._fail(err)
        # PRIORITY and unknown frame types are ignored, as HTTP/2 requires.

    def _fail(self, err: ProtocolError) -> None:
        """A connection error: tell the server with GOAWAY, then raise a ``ConnectionError``."""
        try:
            self._sock.send(frame(GOAWAY, 0, 0, struct.pack(">LL", 0, err.code) + str(err).encode()[:200]))
        except OSError:
            pass
        self._dead = ConnectionError(f"HTTP/2 protocol error from the server (error code {err.code}): {err}")
        raise self._dead

    def _on_window_update(self, stream: int, increment: int) -> None:
        if not increment:
            raise ProtocolError(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
        if stream == 0:
            self._send_conn += increment
            if self._send_conn > MAX_WINDOW:
                raise ProtocolError(3, "a WINDOW_UPDATE took the connection window past 2**31-1")
        elif stream == _STREAM:
            self._send_stream += increment

    def _on_settings(self, payload: bytes) -> None:
        for key, value in parse_settings(payload):
            if key == SETTING_WINDOW:
                self._send_stream += value - self._peer_window
                if self._send_stream > MAX_WINDOW:          # RFC 9113 6.9.2: a connection error
                    raise ProtocolError(FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE {value} took our "
                                        "stream's window past 2**31-1")
                self._peer_window = value
            elif key == SETTING_FRAME:
                self._peer_frame = value
            elif key == SETTING_STREAMS and value == 0:   # our one stream is over the peer's limit
                self._end(14, "the server allows no streams now (SETTINGS_MAX_CONCURRENT_STREAMS 0)")
        self._send(frame(SETTINGS, ACK, 0))
        self._settled = True

    def _feed(self, payload) -> None:
        try:
            self._splitter.feed(payload, self._messages)
        except StreamError as err:
            self._reset(err)

    def _on_data(self, flags: int, payload: bytes) -> None:
        try:
            if self._ended is None:          # after a refused answer the rest of it is dropped
                self._splitter.feed(unpad(payload) if flags & PADDED else payload, self._messages)
        except StreamError as err:
            self._reset(err)
        self._received += len(payload)
        if self._received > MAX_WINDOW // 2 or flags & END_STREAM:
            self._data_done(flags, 0)

    def _data_done(self, flags: int, length: int) -> None:
        self._received += length
        if self._received > MAX_WINDOW // 2:
            update = U32.pack(self._received)
            self._send(frame(WINDOW_UPDATE, 0, 0, update) + frame(WINDOW_UPDATE, 0, _STREAM, update))
            self._received = 0
        if flags & END_STREAM:
            self._end(None, "the server ended the stream without trailers")

    def _reset(self, err: StreamError) -> None:
        """End our stream over an answer we refuse (too large, badly encoded): RST_STREAM CANCEL."""
        self._end(err.status, f"refused an answer from the server: {err}")
        self._splitter.limit = -1            # drop whatever else arrives
        self._send(frame(RST_STREAM, 0, _STREAM, U32.pack(CANCEL)))

    def _on_headers(self, kind: int, flags: int, payload: bytes) -> None:
        headers = self._headers_in.add(kind, flags, _STREAM, payload, self._decoder)
        if headers is None:
            return
        if not self.initial_metadata and not self._headers_in.flags & END_STREAM:
            self.initial_metadata = headers
        if headers.get(":status", "200") != "200":
            self._end(None, f"the server answered HTTP status {headers[':status']}")
        elif self._headers_in.flags & END_STREAM:
            status = grpc_status(headers)
            message = urllib.parse.unquote(headers.get("grpc-message", ""))
            self._end(status, message or f"the server ended the stream with gRPC status {status}")
        elif headers.get("grpc-encoding", "identity") != "identity":
            try:
                self._splitter.decompress = encodings.decompressor(headers["grpc-encoding"], self._max_message)
            except KeyError:
                self._reset(StreamError(12, f"the server answers in grpc-encoding {headers['grpc-encoding']!r}, "
                                            f"which we did not offer"))

    def _end(self, status: int | None, message: str) -> None:
        if self._ended is None:
            self._ended = StreamEnded(status, message)
