"""What the server sends on a stream: response headers, messages (large ones in chunks), trailers, resets.

A mixin of :class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol`: it writes
(``_write``, which also gathers the small writes of one turn) and honours the peer's flow-control windows
and the socket's back-pressure (``_can_write``).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
import urllib.parse

from dmrpc_gym.transport import compression as encodings
from dmrpc_gym.transport import frames
from dmrpc_gym.transport.frames import (DATA, GATHER_SECONDS, NO_ERROR, WRITE_CHUNK,
                                        MessageTooLarge, StreamError, rst_stream_frame)
from dmrpc_gym.transport.server.stream import Inbound, Outbound, Stream

__all__ = ["Replies"]

log = logging.getLogger("dmrpc_gym.server")

#: Bytes of answers to control frames and refusals that may wait in the write buffer while the
#: client reads nothing; past it, the connection is dropped (a GOAWAY would not be read either).
_MAX_BACKLOG = 4 << 20
#: The longest ``grpc-message`` we send, in characters: it may echo a peer's text (an unknown
#: ``:path``), so an echo never costs more than this, and it is written without Huffman coding
#: (hpack's encoder is quadratic in a value's length: a 60 KB path cost 246 ms of CPU).
MAX_STATUS_MESSAGE = 1 << 14

#: The response headers of every stream, before the application's own (``GrpcProtocol``'s ``app_headers``).
_REPLY_HEADERS = ((":status", "200"), ("content-type", "application/grpc"),
                  ("grpc-accept-encoding", encodings.ACCEPT_ENCODING))


class Replies:
    """The sending half of the server's HTTP/2 protocol.

    What it needs of its host: :class:`~dmrpc_gym.transport.server.contracts.RepliesHost`.
    """

    _held_since = 0.0       # when the small writes now held began to be gathered (``time.perf_counter``)

    def _write(self, data: bytes) -> None:
        """Write ``data``. Answers wait while the write buffer is full (see :meth:`_send`); what
        is written anyway (ACKs, refusals) is bounded: past ``_MAX_BACKLOG`` the connection is dropped.

        Inside ``data_received`` (``_held`` is a list) small writes are gathered, and go out
        together every :data:`~dmrpc_gym.transport.frames.GATHER_SECONDS`, and when it returns.
        """
        held = self._held
        if held is not None:
            if len(data) < WRITE_CHUNK:
                held.append(data)
                if time.perf_counter() - self._held_since < GATHER_SECONDS:
                    return
                data = b""
            self._flush_held()
            self._hold()
            if not data:
                return
        transport = self._transport
        if not self._closed and transport is not None and not transport.is_closing():   # a peer gone: not written
            transport.write(data)
            self._traffic.bytes_out += len(data)
            if not self._writable and self._transport.get_write_buffer_size() > _MAX_BACKLOG:
                log.info("dropping an HTTP/2 connection: its client left %d bytes of answers unread",
                         self._transport.get_write_buffer_size())
                self._closed = True
                self._transport.abort()  # what it did not read is dropped, not kept to flush

    def _hold(self) -> None:
        """Gather small writes from now until :meth:`_flush_held`."""
        self._held, self._held_since = [], time.perf_counter()

    def _flush_held(self) -> None:
        held, self._held = self._held, None
        if held:
            self._write(held[0] if len(held) == 1 else b"".join(held))

    def _headers(self, stream: Stream) -> list[tuple[str, str]]:
        stream.outbound = stream.outbound.to(Outbound.OPEN)
        fields = [*_REPLY_HEADERS, *self._app_headers]
        if stream.encoding:
            fields.append(("grpc-encoding", stream.encoding))
        return fields

    async def _send(self, stream: Stream, message: bytes | list) -> None:
        """Send one message: bytes, or a list of pieces (:class:`~dmrpc_gym.protocol.large_tensors.Pieces`) not joined."""
        self.state.answered = True    # HEADERS or DATA out: the next PING is no strike (gRPC's rule)
        if stream.outbound is not Outbound.OPEN:
            if stream.outbound is Outbound.ENDED:
                raise asyncio.CancelledError()    # trailers or a reset went: no more answers on it
            self._write(self.state.frame_headers(stream.id, self._headers(stream)))
        if type(message) is list:
            n = sum(map(len, message)) + 5
            if n <= WRITE_CHUNK or stream.compress is not None:
                message = b"".join(message)
        else:
            n = len(message) + 5
        flow = self.state
        if n <= WRITE_CHUNK and stream.compress is None and self._writable and flow.take(stream, n):
            self._write(frames.grpc_frame(message, stream.id))
            return
        if stream.compress is not None:
            parts = frames.MessageParts([stream.compress(message)], b"\x01")
        else:
            parts = frames.MessageParts(message if type(message) is list else [message])
        # A large message goes out in chunks, each written only while the socket keeps
        # up (pause_writing / resume_writing): asyncio's write buffer then stays small,
        # where one huge write would be moved down its buffer once per partial send.
        while parts.left:
            if self._closed or self._transport is None or self._transport.is_closing():
                raise asyncio.CancelledError()    # the peer is gone: the rest of the answer is not sent
            while flow.room(stream, WRITE_CHUNK) <= 0 or not self._writable:
                if self._closed or stream.outbound is Outbound.ENDED:
                    raise asyncio.CancelledError()
                if self._writable:
                    self._window_open.clear()
                    await self._window_open.wait()
                else:
                    await self._can_write.wait()
            n = flow.room(stream, min(parts.left, WRITE_CHUNK))
            flow.spend(stream, n)
            self.state.answered = True
            self._write_frame([frames.pack_head(n, DATA, 0, stream.id), *parts.take(n)])

    def _write_frame(self, pieces: list) -> None:
        """A large answer's DATA frame (its header, then pieces that may be an env's own array): while
        nothing waits in asyncio's write buffer, one ``writev`` straight from the pieces (no copy but
        the kernel's); only what the socket did not take is joined into bytes, because asyncio keeps
        it (Python 3.12+ keeps memoryviews as they are) and the env's next step may change its array."""
        fd, transport = self._fd, self._transport
        if self._held:
            self._flush_held()
            self._hold()
        if (fd is not None and not self._closed and transport is not None and not transport.is_closing()
                and not transport.get_write_buffer_size()):
            try:
                sent = os.writev(fd, pieces)
            except OSError:              # full (BlockingIOError), or gone: asyncio's write finds out which
                sent = 0
            self._traffic.bytes_out += sent
            while sent:
                if sent >= len(pieces[0]):
                    sent -= len(pieces.pop(0))
                else:
                    pieces[0], sent = memoryview(pieces[0])[sent:], 0
            if not pieces:
                return
        self._write(b"".join(pieces))

    def _trailers(self, stream: Stream, code: int, message: str, extra: tuple = ()) -> None:
        if stream.outbound is Outbound.ENDED or self._closed:
            return
        self.state.answered = True
        if code:
            self._traffic.ended(code)
        fields = [] if stream.outbound is Outbound.OPEN else self._headers(stream)
        stream.end()
        fields.append(("grpc-status", str(code)))
        if message:
            if len(message) > MAX_STATUS_MESSAGE:
                message = f"{message[:MAX_STATUS_MESSAGE]}... ({len(message) - MAX_STATUS_MESSAGE} more characters)"
            fields.append(("grpc-message", urllib.parse.quote(message, safe=" !#$&'()*+,/:;=?@[]~")))
        fields.extend(extra)
        self._write(self.state.frame_headers(stream.id, fields, end_stream=True, huffman=len(message) < 256))

    def _refuse(self, stream: Stream, err: StreamError, client_done: bool) -> None:
        """End one stream with ``err``'s status; the client need send no more (RST_STREAM NO_ERROR)."""
        log.info("ending stream %d: %s", stream.id, err)
        if isinstance(err, MessageTooLarge):
            self._traffic.refuse("max_message_size")
        self._trailers(stream, err.status, str(err))
        if not client_done and stream.inbound is Inbound.OPEN:
            self._write(rst_stream_frame(stream.id, NO_ERROR))
        self._end_stream(stream)

    def _reset(self, stream: Stream, code: int) -> None:
        self._write(rst_stream_frame(stream.id, code))
        self._end_stream(stream)

    def _end_stream(self, stream: Stream) -> None:
        stream.end()
        self.state.streams.pop(stream.id, None)
        if not stream.busy:
            self._finish(stream)
        elif stream.task is not None:
            stream.task.cancel()         # its end finishes the stream
