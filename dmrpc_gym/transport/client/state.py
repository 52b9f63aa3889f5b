"""The client's state of its HTTP/2 connection, free of I/O: bytes in, events and bytes to send out.

:class:`ClientState` is the client's :class:`~dmrpc_gym.transport.connection_state.ConnectionState`: the
server's settings, the windows and the credit policy (a client gives credit back as it receives), the
stream table (each :class:`~dmrpc_gym.transport.client.stream.GrpcStream` with its two halves' states),
the header block being received, the counters, and the client's duties in return: the ACK of every
SETTINGS and PING the server sends
(:meth:`~dmrpc_gym.transport.connection_state.ConnectionState.data_to_send`). The connection
(:class:`~dmrpc_gym.transport.client.connection.GrpcConnection`) gives it what each ``recv`` returned
(:meth:`~dmrpc_gym.transport.connection_state.ConnectionState.receive`, the frame loop both ends share)
and acts on the events of every whole frame in it; the rest waits in its ``buf``. The server's first
frame must be its SETTINGS (:meth:`~ClientState.start`). DATA is admitted and credited at once
(``received``: the WINDOW_UPDATEs owed). A large DATA frame whose payload is not all here is read by the
connection from the socket straight into its message (``part``: the stream, the flags, the length, what
is left): the state counts it as it goes
(:meth:`~dmrpc_gym.transport.connection_state.ConnectionState.part_read`) and admits it whole at its
end.

>>> from dmrpc_gym.transport.frames import PING, SETTINGS, frame
>>> state = ClientState()
>>> chunk = frame(SETTINGS, 0, 0, bytes.fromhex("000300000008")) + frame(PING, 0, 0, b"12345678")[:12]
>>> list(state.receive(chunk)), state.peer.max_streams, len(state.buf)    # the PING is not whole yet
([SettingsChanged()], 8, 12)
>>> list(state.receive(b"45678")), state.frames, state.data_to_send().hex()   # the SETTINGS ACK, the PING ACK
([], 2, '0000000401000000000000080601000000003132333435363738')
>>> state.frame(2, 0, 1, bytes(5)) is None           # PRIORITY: ignored
True
"""
from __future__ import annotations

from typing import Any

from dmrpc_gym.transport.connection_state import ConnectionState, Data, Event
from dmrpc_gym.transport.frames import MAX_WINDOW, PADDED, PROTOCOL_ERROR, SETTINGS, ProtocolError, read_head, unpad

__all__ = ["ClientState", "CREDIT_AT"]

#: Received bytes that earn the server a WINDOW_UPDATE (connection and stream): half our window, past it.
CREDIT_AT = MAX_WINDOW // 2 + 1


class ClientState(ConnectionState):
    """The client's I/O-free state of one connection (see the module's docstring). ``next_id``: the id
    of the next stream this client opens (odd ids, RFC 9113 5.1.1)."""

    __slots__ = ("next_id",)

    PUSH_REFUSED = "the server pushed a stream we disabled"

    def __init__(self, threshold: int | None = None):
        super().__init__(MAX_WINDOW, CREDIT_AT if threshold is None else threshold)
        self.next_id = 1

    def frame_request(self, fields: list[tuple[str, str]]) -> tuple[int, bytes]:
        """Open the next stream: its id and its request headers framed (HEADERS, CONTINUATION as the
        server's frame size needs: before its SETTINGS, the default 16384). ``ValueError`` for headers past
        the server's SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 6.5.2: names and values plus 32 bytes each),
        as gRPC's clients refuse them, instead of a stream the server ends (no id is taken then)."""
        limit = self.peer.max_header_list
        if limit is not None:
            size = sum(len(k) + len(v.encode() if isinstance(v, str) else v) + 32 for k, v in fields)
            if size > limit:
                raise ValueError(f"the request's headers (metadata= and the token included) are {size} bytes, "
                                 f"more than the server's SETTINGS_MAX_HEADER_LIST_SIZE of {limit}: send less metadata")
        sid = self.next_id
        self.next_id += 2
        return sid, self.frame_headers(sid, fields)

    def start(self, buf: bytearray) -> bool:
        """The server's first 9 bytes (in ``buf``) must begin its SETTINGS: True once they do, False before
        they have come. Text (an HTTP/1.x answer) is a ``ConnectionError`` quoting its first line; another
        frame a ``ProtocolError``."""
        if len(buf) < 9:
            return False
        head = bytes(buf[:9])
        if head.isascii() and all(c >= 9 for c in head):     # text, not a frame header: HTTP/1.x
            line = bytes(buf).split(b"\n", 1)[0].strip().decode("latin-1")[:100]
            raise ConnectionError(f"the server speaks HTTP/1.x (or another text protocol), not HTTP/2: "
                                  f"it answered {line!r}")
        kind = read_head(buf)[1]
        if kind != SETTINGS:
            raise ProtocolError(PROTOCOL_ERROR, f"the server's first frame is of type {kind}, not SETTINGS")
        self.started = True
        return True

    def in_place(self, length: int, kind: int, flags: int, sid: int) -> bool:
        return super().in_place(length, kind, flags, sid) and sid in self.streams

    def data(self, flags: int, sid: int, payload: Any) -> Event | None:
        """A whole DATA frame: admitted and credited at once (a client gives credit back as it receives);
        its event, padding taken off, or None for a stream we no longer keep."""
        n = len(payload)
        stream = self.streams.get(sid)
        if stream is None:
            if not sid:
                raise ProtocolError(PROTOCOL_ERROR, "a DATA frame on stream 0")
            self.admit(n)                  # a stream we closed: its bytes still count
            self.credit_connection(n)
            return None
        owed = self.received(stream, n)
        if owed:
            self.outbox.append(owed)
        return Data(stream, flags, unpad(payload) if flags & PADDED else payload)

    def part_done(self, stream: Any, length: int) -> None:
        """The large DATA frame read in place is whole: admitted and credited whole now (past a window:
        ``ProtocolError``), as a client credits what it receives."""
        owed = self.received(stream, length)
        if owed:
            self.outbox.append(owed)

    def opening(self, sid: int) -> None:
        if not sid & 1 or sid >= self.next_id:    # a stream we never opened (RFC 9113 5.1)
            raise ProtocolError(PROTOCOL_ERROR, f"HEADERS on stream {sid}, which this client did not open")
