"""The client's state of its HTTP/2 connection, free of I/O: bytes in, events and bytes to send out.

:class:`ClientState` is the client's :class:`~dmrpc_gym.transport.connection_state.ConnectionState`:
the server's settings, the windows and the credit policy (a client gives credit back as it
receives), the stream table (each :class:`~dmrpc_gym.transport.client.stream.GrpcStream` with its
two halves' states), the header block being received, the counters, and the client's duties in
return: the ACK of every SETTINGS and PING the server sends (:meth:`~ClientState.data_to_send`).
The connection (:class:`~dmrpc_gym.transport.client.connection.GrpcConnection`) reads from its
socket into :attr:`~ClientState.buf` (as much as :meth:`~ClientState.need` says the frame begun
needs) and takes the events of the whole frames there from :meth:`~ClientState.receive`; DATA is
admitted and credited at once (``received``: the WINDOW_UPDATEs owed). A large DATA frame whose
payload is not all here is read by the connection from the socket straight into its message
(``part``: the stream, the flags, the length, what is left): the state counts it as it goes
(:meth:`~ClientState.part_read`) and admits it whole at its end.

>>> from dmrpc_gym.transport.frames import PING, SETTINGS, frame
>>> state = ClientState()
>>> state.frame(SETTINGS, 0, 0, bytes.fromhex("000300000008")), state.peer.max_streams
(SettingsChanged(), 8)
>>> state.frame(PING, 0, 0, b"12345678"); state.data_to_send().hex()     # the SETTINGS ACK, the PING ACK
'0000000401000000000000080601000000003132333435363738'
>>> state.frame(2, 0, 1, bytes(5)) is None           # PRIORITY: ignored
True
>>> state.buf += frame(PING, 1, 0, b"abcdefgh")[:12]
>>> state.need(), list(state.receive())                # 17 bytes wanted: nothing taken yet
(17, [])
>>> state.buf += b"defgh"; list(state.receive()), state.frames
([PingAcked()], 1)
"""
from __future__ import annotations

from typing import Iterator

from dmrpc_gym.transport.connection_state import ConnectionState, Data, Event
from dmrpc_gym.transport.frames import (DATA, END_STREAM, IN_PLACE, MAX_WINDOW, PADDED, PROTOCOL_ERROR, SETTINGS,
                                        ProtocolError, read_head, unpad)

__all__ = ["ClientState", "CREDIT_AT"]

#: Received bytes that earn the server a WINDOW_UPDATE (connection and stream): half our window, past it.
CREDIT_AT = MAX_WINDOW // 2 + 1


class ClientState(ConnectionState):
    """The client's I/O-free state of one connection (see the module's docstring). ``next_id``: the id
    of the next stream this client opens (odd ids, RFC 9113 5.1.1)."""

    __slots__ = ("next_id", "buf", "part")

    PUSH_REFUSED = "the server pushed a stream we disabled"

    def __init__(self, threshold: int | None = None):
        super().__init__(MAX_WINDOW, CREDIT_AT if threshold is None else threshold)
        self.next_id = 1
        self.buf = bytearray()             # what was read and is not a whole frame yet
        self.part: list | None = None      # a large DATA frame read in place: [stream, flags, length, left]

    def check_first_frame(self) -> None:
        """The server's first 9 bytes are in :attr:`buf`: they must begin its SETTINGS. Text (an HTTP/1.x
        answer) is a ``ConnectionError`` quoting its first line; another frame a ``ProtocolError``."""
        buf = self.buf
        head = bytes(buf[:9])
        if head.isascii() and all(c >= 9 for c in head):     # text, not a frame header: HTTP/1.x
            line = bytes(buf).split(b"\n", 1)[0].strip().decode("latin-1")[:100]
            raise ConnectionError(f"the server speaks HTTP/1.x (or another text protocol), not HTTP/2: "
                                  f"it answered {line!r}")
        kind = read_head(buf)[1]
        if kind != SETTINGS:
            raise ProtocolError(PROTOCOL_ERROR, f"the server's first frame is of type {kind}, not SETTINGS")

    def need(self) -> int:
        """How many bytes :attr:`buf` must hold for the next frame to be taken: 0 when it can be now (whole,
        or a large DATA frame whose payload is to be read in place)."""
        buf = self.buf
        if len(buf) < 9:
            return 9
        length, kind, flags, sid = read_head(buf)
        if len(buf) >= 9 + length or self._in_place(length, kind, flags, sid):
            return 0
        return 9 + length

    def _in_place(self, length: int, kind: int, flags: int, sid: int) -> bool:
        return (kind == DATA and length >= IN_PLACE and not flags & PADDED and self.headers_in.data is None
                and sid in self.streams)

    def receive(self, data: bytes = b"", parts: bool = True, one: bool = False) -> Iterator[Event]:
        """The events of the whole frames in :attr:`buf` after ``data``, in order (``ProtocolError``: the
        connection ends); ``one``: of the first frame only (the rest waits: a handshake takes the
        server's SETTINGS, not what follows them). With ``parts``, a large DATA frame begun is given as
        far as it came, and :attr:`part` says what is left of it to read in place. Handle each event
        before asking for the next: a DATA payload may be a view into the buffer."""
        buf = self.buf
        if data:
            buf += data
        while len(buf) >= 9:
            length, kind, flags, sid = read_head(buf)
            end = 9 + length
            if len(buf) < end:
                if parts and self._in_place(length, kind, flags, sid):
                    stream = self.streams[sid]
                    self.part = [stream, flags, length, end - len(buf)]
                    if len(buf) > 9:
                        with memoryview(buf) as view:
                            event = Data(stream, flags & ~END_STREAM, view[9:])
                            yield event
                            event.data.release()
                    del buf[:]
                return
            payload = bytes(memoryview(buf)[9:end]) if length >= IN_PLACE else bytes(buf[9:end])
            del buf[:end]
            self.frames += 1
            if kind == DATA and self.headers_in.data is None:
                event = self._data(flags, sid, payload)
            else:
                event = self.frame(kind, flags, sid, payload)
            if event is not None:
                yield event
            if one:
                return

    def _data(self, flags: int, sid: int, payload: bytes) -> Event | None:
        """A whole DATA frame: admitted and credited at once (a client gives credit back as it receives);
        its event, padding taken off, or None for a stream we no longer keep."""
        stream = self.streams.get(sid)
        if stream is None:
            if not sid:
                raise ProtocolError(PROTOCOL_ERROR, "a DATA frame on stream 0")
            self.admit(len(payload))          # a stream we closed: its bytes still count
            owed = self.consumed(len(payload))
        else:
            owed = self.received(stream, len(payload))
        if owed:
            self.outbox.append(owed)
        if stream is None:
            return None
        return Data(stream, flags, unpad(payload) if flags & PADDED else payload)

    def part_read(self, left: int) -> Event | None:
        """The large DATA frame read in place has ``left`` bytes to come: at 0 it is admitted and credited
        whole (the WINDOW_UPDATEs owed in :meth:`data_to_send`), counted, and its END_STREAM given
        (an empty :class:`~dmrpc_gym.transport.connection_state.Data`) where it had one."""
        part = self.part
        part[3] = left
        if left:
            return None
        self.part = None
        self.frames += 1
        stream, flags, length, _ = part
        owed = self.received(stream, length)
        if owed:
            self.outbox.append(owed)
        return Data(stream, END_STREAM, b"") if flags & END_STREAM else None

    def opening(self, sid: int) -> None:
        if not sid & 1 or sid >= self.next_id:    # a stream we never opened (RFC 9113 5.1)
            raise ProtocolError(PROTOCOL_ERROR, f"HEADERS on stream {sid}, which this client did not open")
