"""One gRPC bidi stream of a client's HTTP/2 connection: what the stream holds, and its frames.

A :class:`GrpcStream` is a :class:`~dmrpc_gym.transport.base.Transport` for one
dm_env_rpc connection (one agent). The socket, the connection's windows, HPACK
state and the reading of frames belong to its
:class:`~dmrpc_gym.transport.client.connection.GrpcConnection`, which may carry many
streams (the sub-envs of a vector env, see :mod:`~dmrpc_gym.transport.client.pool`);
each stream keeps its own answers, window, response headers and end.
"""
from __future__ import annotations

import urllib.parse
from collections import deque
from typing import Any

from dmrpc_gym.transport import compression as encodings
from dmrpc_gym.transport.base import StreamEnded
from dmrpc_gym.transport.codes import GrpcStatus
from dmrpc_gym.transport.frames import (CANCEL, END_STREAM, MAX_WINDOW, MessageSplitter, StreamError, grpc_status,
                                        rst_stream_frame)
from dmrpc_gym.transport.stream_states import Inbound, Outbound
from dmrpc_gym.transport.windows import Window

__all__ = ["GrpcStream"]


class GrpcStream:
    """A client-side gRPC bidi stream: ``write`` messages, ``read`` answers in order.

    Made by :meth:`GrpcConnection.open_stream
    <dmrpc_gym.transport.client.connection.GrpcConnection.open_stream>`, which sends its
    request headers. Every call holds the connection's ``lock``; while one
    stream reads, the answers of the others are put aside for them.

    >>> from dmrpc_gym.transport.client.h2_transport import open_connection
    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> conn = open_connection(embedded_server("catch").address, 5.0)
    >>> a, b = conn.open_stream(), conn.open_stream()
    >>> (a.id, b.id), len(conn.streams)
    ((1, 3), 2)
    >>> a.close(); b.close(); conn.closed
    True
    """

    def __init__(self, conn: Any, stream_id: int, compression: str | None, max_message_size: int,
                 send_window: int):
        self.id = stream_id
        #: The :class:`~dmrpc_gym.transport.client.connection.GrpcConnection` that carries this stream
        #: (not imported here: that module imports this one).
        self.connection = conn
        self.lock = conn.lock
        self.splitter = MessageSplitter(max_message_size)
        self.max_message = max_message_size
        self.messages: deque[bytes] = deque()
        self.ended: StreamEnded | None = None
        #: The server's response headers (initial metadata), once they have come.
        self.initial_metadata: dict[str, str] = {}
        self.compress = compression and encodings.compressor(compression)
        self.send = Window(send_window)  # what we may still send on it (the server's flow control)
        self.recv = Window(MAX_WINDOW)   # what the server may still send on it (we advertise 2**31-1), and credit
        #: The stream's state (transport.stream_states): our HEADERS went as it was opened.
        self.inbound, self.outbound = Inbound.FRESH, Outbound.OPEN
        #: Messages committed to the stream (see :meth:`GrpcConnection.write`), and answers read.
        self.messages_sent = self.messages_read = 0
        #: An interrupt fell between the frames of a message too large for one frame.
        self.broken = False

    # -- the Transport interface -------------------------------------------------------
    def write(self, *parts: bytes | memoryview) -> None:
        """Send the concatenation of ``parts`` as one gRPC message (see :meth:`GrpcConnection.write`)."""
        self.connection.write(self, *parts)

    def read(self, timeout: float | None | bool = False) -> bytes:
        """The next gRPC message; ``StreamEnded`` once the server has ended the stream.

        ``timeout`` (seconds, None: no limit) bounds the whole read, however the
        answer trickles in (``socket.timeout`` past it); False keeps the last one given.
        """
        return self.connection.read(self, timeout)

    def answer_ready(self) -> bool:
        """Whether ``read`` would return at once (see :meth:`GrpcConnection.answer_ready`)."""
        return self.connection.answer_ready(self)

    def fileno(self) -> int:
        """The connection's socket, to wait on with ``select`` (streams of one connection share it)."""
        return self.connection.fileno()

    def close(self) -> None:
        """End this stream; the connection closes with its last stream. Never blocks for long."""
        self.connection.close_stream(self)

    # -- frames for this stream (the connection's lock is held) ------------------------------
    def on_data(self, flags: int, payload) -> None:
        """A DATA frame's payload, or a part of one (admitted and credited by the connection's state):
        into the stream's messages (after a refused answer, the rest of it is dropped); END_STREAM
        without trailers ends the stream."""
        if self.ended is None:
            self.feed(payload)
        if flags & END_STREAM:
            self.end(None, "the server ended the stream without trailers")

    def feed(self, payload) -> None:
        try:
            self.splitter.feed(payload, self.messages)
        except StreamError as err:
            self.refuse(err)

    def on_headers(self, headers: dict[str, str], end_stream: bool) -> None:
        if not end_stream and self.inbound is Inbound.FRESH:
            self.inbound = self.inbound.to(Inbound.OPEN)
        if not self.initial_metadata and not end_stream:
            self.initial_metadata = headers
        if headers.get(":status", "200") != "200":
            self.end(None, f"the server answered HTTP status {headers[':status']}")
        elif end_stream:
            status = grpc_status(headers)
            message = urllib.parse.unquote(headers.get("grpc-message", ""))
            self.end(status, message or f"the server ended the stream with gRPC status {status}")
        elif headers.get("grpc-encoding", "identity") != "identity":
            try:
                self.splitter.decompress = encodings.decompressor(headers["grpc-encoding"], self.max_message)
            except KeyError:
                self.refuse(StreamError(GrpcStatus.UNIMPLEMENTED, "the server answers in grpc-encoding "
                                        f"{headers['grpc-encoding']!r}, which we did not offer"))

    def refuse(self, err: StreamError) -> None:
        """End this stream over an answer we refuse (too large, badly encoded): RST_STREAM CANCEL."""
        self.reset(CANCEL, err.status, f"refused an answer from the server: {err}")

    def reset(self, code: int, status: int | None, message: str) -> None:
        """End this stream with ``message`` and tell the server so with RST_STREAM ``code``; whatever
        else arrives on it is dropped."""
        self.end(status, message)
        self.splitter.limit = -1
        self.connection.send(rst_stream_frame(self.id, code))
        if self.outbound is not Outbound.ENDED:
            self.outbound = self.outbound.to(Outbound.ENDED)

    def end(self, status: int | None, message: str) -> None:
        """The stream is over for us (trailers, a reset, the connection's end): ``read`` raises ``StreamEnded``."""
        if self.ended is None:
            self.ended = StreamEnded(status, message)
            self.inbound = self.inbound.to(Inbound.DONE)
