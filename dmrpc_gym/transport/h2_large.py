"""Large gRPC messages on the client: sent without joining their pieces, received in place.

A 16 MiB observation or action is most of a step's cost when copied around,
so a large message is written frame by frame straight from the caller's
buffer (one ``sendmsg`` per frame on plain TCP), and a large DATA frame is
read from the socket straight into the message it carries
(:meth:`~dmrpc_gym.transport.frames.MessageSplitter.room`): one copy each way.
"""
from __future__ import annotations

import ssl

from dmrpc_gym.transport.frames import DATA, HEADER, MessageParts, StreamError
from dmrpc_gym.transport.h2_idle import RECV_CHUNK

__all__: list[str] = []          # a part of GrpcStream, not an interface of its own

_STREAM = 1


class _LargeMessages:
    """The large-message paths of :class:`~dmrpc_gym.transport.h2_client.GrpcStream` (a mixin)."""

    def _write_large(self, parts: tuple) -> None:
        """Send the message ``parts`` in DATA frames, as the peer's windows allow."""
        if self._compress:
            message = MessageParts([self._compress(b"".join(parts))], b"\x01")
        else:
            message = MessageParts(parts)
        self.broken = True               # until the last frame of this message is committed
        self.messages_sent += 1
        while message.left:
            while min(self._send_stream, self._send_conn) <= 0:
                self._read_frame()
                if self._ended is not None:
                    raise self._ended
            n = min(message.left, self._send_stream, self._send_conn, self._peer_frame)
            if self._deadline is not None:
                self._arm()
            self._send_stream -= n
            self._send_conn -= n
            self._send_parts([HEADER.pack(n >> 16, n & 0xFFFF, DATA, 0, _STREAM), *message.take(n)])
        self.broken = False

    def _send_parts(self, parts: list) -> None:
        """Send ``parts`` back to back without joining them (one ``sendmsg`` per frame on plain TCP)."""
        if self._unsent:
            self._send(b"")
        parts = [memoryview(p) for p in parts]
        try:
            while parts:
                if isinstance(self._sock, ssl.SSLSocket):
                    sent = self._sock.send(parts[0])
                else:
                    sent = self._sock.sendmsg(parts)
                while parts and sent >= len(parts[0]):
                    sent -= len(parts.pop(0))
                if parts:
                    parts[0] = parts[0][sent:]
        finally:
            if parts:
                self._unsent = b"".join(parts)

    def _read_data_direct(self, flags: int, length: int, left: int | None = None) -> None:
        """A large DATA frame straight from the socket into the message it carries (one copy).

        Resumable: a timeout or an interrupt leaves ``_partial`` saying what is left to read.
        """
        splitter, messages = self._splitter, self._messages
        if left is None:                      # its header (and maybe a first part) is buffered
            buf = self._buf
            got = len(buf) - 9
            self._partial = (flags, length, length - got)
            del buf[:9]
            if got:
                self._feed(bytes(buf))
            del buf[:]
            left = length - got
        while left:
            self._partial = (flags, length, left)
            room = splitter.room() if self._ended is None else None
            if self._deadline is not None:
                self._arm()
            if room is None:
                chunk = self._sock.recv(min(left, RECV_CHUNK))
                n = len(chunk)
                if n and self._ended is None:
                    self._feed(chunk)
            else:
                n = self._sock.recv_into(room, min(left, len(room)))
                del room
                if n:
                    try:
                        splitter.advance(n, messages)
                    except StreamError as err:     # too large, or does not decompress: refuse it
                        self._reset(err)
            if not n:
                self._dead = ConnectionResetError("the server closed the connection in the middle of a frame")
                raise self._dead
            left -= n
        self._partial = None
        self._data_done(flags, length)
