"""Large gRPC messages on the client: sent without joining their pieces, received in place.

A 16 MiB observation or action is most of a step's cost when copied around,
so a large message is written frame by frame straight from the caller's
buffer (one ``sendmsg`` per frame on plain TCP), and a large DATA frame is
read from the socket straight into the message it carries
(:meth:`~dmrpc_gym.transport.frames.MessageSplitter.room`): one copy each way.
"""
from __future__ import annotations

import ssl

from dmrpc_gym.transport.client import interrupts
from dmrpc_gym.transport.frames import DATA, MessageParts, ProtocolError, StreamError, pack_head
from dmrpc_gym.transport.client.keepalive import RECV_CHUNK

__all__: list[str] = []          # a part of GrpcConnection, not an interface of its own


class LargeMessages:
    """The large-message paths of :class:`~dmrpc_gym.transport.client.connection.GrpcConnection` (a mixin).

    What it needs of its host: :class:`~dmrpc_gym.transport.client.contracts.LargeMessagesHost`.
    """

    def _write_large(self, stream, parts: tuple) -> None:
        """Send the message ``parts`` on ``stream`` in DATA frames, as the peer's windows allow."""
        if stream.compress:
            message = MessageParts([stream.compress(b"".join(parts))], b"\x01")
        else:
            message = MessageParts(parts)
        stream.broken = True               # until the last frame of this message is committed
        stream.messages_sent += 1
        self.messages_sent += 1
        flow = self.state
        while message.left:
            while flow.room(stream, message.left) <= 0:
                self._read_frame()
                if stream.ended is not None:
                    raise stream.ended
            n = flow.room(stream, message.left)
            if self._deadline is not None:
                self._arm()
            flow.spend(stream, n)
            self._send_parts([pack_head(n, DATA, 0, stream.id), *message.take(n)])
        stream.broken = False

    def _send_parts(self, parts: list) -> None:
        """Send ``parts`` back to back without joining them (one ``sendmsg`` per frame on plain TCP)."""
        if self._kernel and interrupts.guarded():     # where a Ctrl-C must not send bytes twice
            return self.send(b"".join(parts))
        if self._unsent:
            self.send(b"")
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

    def _read_data_direct(self) -> None:
        """The rest of the large DATA frame the state has begun (its ``part``) straight from the socket into
        the message it carries (one copy; none in user space). Resumable: a timeout or an interrupt leaves
        the state's ``part`` saying what is left to read.
        """
        state = self.state
        stream, flags, length, left = state.part
        splitter, messages = stream.splitter, stream.messages
        silent_from = None
        while left:
            room = splitter.room() if stream.ended is None else None
            guard = self._kernel and interrupts.guarded()    # a Ctrl-C must not lose what was read
            if self._ping_every is not None and (self._timeout is not None or guard or self._timeout_by_select):
                self._await_peer()                # waiting on the server (by select): is it there?
            if self._deadline is not None:
                self._arm()
            if guard:
                interrupts.wait_ready(self._sock, self._timeout)
            try:
                if guard:
                    interrupts.hold()
                if room is None:
                    try:
                        chunk = self._sock.recv(min(left, RECV_CHUNK))
                    except (BlockingIOError, ssl.SSLWantReadError):   # keepalive on: a second with nothing
                        silent_from = self._heard_nothing(silent_from)
                        continue
                    n = len(chunk)
                    if n and stream.ended is None:
                        stream.feed(chunk)
                else:
                    try:
                        n = self._sock.recv_into(room, min(left, len(room)))
                    except (BlockingIOError, ssl.SSLWantReadError):
                        del room
                        silent_from = self._heard_nothing(silent_from)
                        continue
                    del room
                    if n:
                        try:
                            splitter.advance(n, messages)
                        except StreamError as err:     # too large, or does not decompress: refuse it
                            stream.refuse(err)
                if not n:
                    self._dead = ConnectionResetError("the server closed the connection in the middle of a frame")
                    raise self._dead
                left -= n
                if left:
                    state.part_read(left)
            finally:
                if guard:
                    interrupts.release()
        # More of the message to come: the next frame's header is read alone, so that its payload
        # comes straight into the message too (not through the read buffer).
        self._header_alone = splitter.large is not None
        try:
            end = state.part_read(0)             # admitted and credited whole (past a window: GOAWAY)
        except ProtocolError as err:
            self._fail(err)
        if state.outbox:
            self._owe(state.data_to_send())
        if end is not None:
            stream.on_data(end.flags, end.data)
