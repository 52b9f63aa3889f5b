"""One end's state of one HTTP/2 connection, free of I/O, in the manner of h2's ``H2Connection``.

:class:`ConnectionState` is what an end knows of its connection: the peer's settings and the
windows with their credit policy (it is a :class:`~dmrpc_gym.transport.flow.Flow`, whose methods
are its flow-control operations), the stream table (each stream's state by the tables of
:mod:`~dmrpc_gym.transport.stream_states`), the header block being received, the frame and header
block counters, and the bytes it owes the peer (:meth:`data_to_send`). It never touches a socket,
an event loop or a clock: times are passed in. Each end derives its own
(:class:`~dmrpc_gym.transport.server.state.ServerState`,
:class:`~dmrpc_gym.transport.client.state.ClientState`); the I/O classes feed it and act on the
events it gives back (:class:`Event` and its kinds below).

Named operations, used by every path of both ends (the general path, large messages, the steady
paths): :meth:`ConnectionState.receive` (the one frame loop: bytes as read in, the events of every
whole frame out; each end says what differs by its hooks ``start``, ``in_place``, ``data``,
``admit_part`` and ``part_done``; :meth:`~ConnectionState.part_read` for a large DATA frame the I/O
class reads in place), ``received`` (admit a whole small DATA frame and get the WINDOW_UPDATE owed),
``admit`` / ``consumed`` (the same in two steps), ``take`` / ``room`` / ``spend`` (spend send window for a
message), :meth:`~ConnectionState.frame_headers` (frame a header block: HPACK, HEADERS and
CONTINUATION) and :func:`~dmrpc_gym.transport.frames.grpc_frame` (frame a message),
:meth:`ConnectionState.frame` (one whole control or header frame: SETTINGS applied and acknowledged,
a PING answered, a WINDOW_UPDATE taken, a header block decoded).

>>> from dmrpc_gym.transport.frames import PING, frame
>>> state = ConnectionState(window=65535, threshold=32768)
>>> state.frame(PING, 0, 0, b"12345678") is None, state.data_to_send() == frame(PING, 1, 0, b"12345678")
(True, True)
"""
from __future__ import annotations

import struct
from typing import Any, Iterator, Sequence

import hpack

from dmrpc_gym.transport.flow import SETTINGS_ACK, Flow, StreamReset
from dmrpc_gym.transport.frames import (ACK, CONTINUATION, DATA, DEFAULT_WINDOW, END_STREAM, FRAME_SIZE_ERROR,
                                        GOAWAY, HEADERS, IN_PLACE, MAX_WINDOW, PADDED, PING, PROTOCOL_ERROR,
                                        PUSH_PROMISE, RST_STREAM, SETTINGS, U32, WINDOW_UPDATE, ProtocolError,
                                        check_frame, header_frames, ping_frame, read_head)
from dmrpc_gym.transport.headers import HeaderBlock

__all__ = ["ConnectionState", "Event", "Headers", "Data", "PeerReset", "ResetOwed", "WindowsOpened",
           "SettingsChanged", "GoAway", "PingAcked"]


class Event:
    """Something the connection's I/O class acts on, given by the state as it takes frames."""

    __slots__ = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


class Headers(Event):
    """A whole header block on ``stream_id``, decoded: ``headers``; ``flags`` its HEADERS frame's (END_STREAM);
    ``size`` the list's size as RFC 9113 counts it."""

    __slots__ = ("stream_id", "flags", "headers", "size")

    def __init__(self, stream_id: int, flags: int, headers: dict, size: int):
        self.stream_id, self.flags, self.headers, self.size = stream_id, flags, headers, size


class Data(Event):
    """DATA for ``stream`` (in the table), admitted by the windows: ``data`` (a view, valid until the
    next event) with the frame's ``flags`` (END_STREAM only on a frame's last piece)."""

    __slots__ = ("stream", "flags", "data")

    def __init__(self, stream: Any, flags: int, data: Any):
        self.stream, self.flags, self.data = stream, flags, data


class PeerReset(Event):
    """The peer reset ``stream`` (RST_STREAM ``code``)."""

    __slots__ = ("stream", "code")

    def __init__(self, stream: Any, code: int):
        self.stream, self.code = stream, code


class ResetOwed(Event):
    """A stream error of ``stream``: RST_STREAM ``code`` is to be sent and the stream ended; ``why``: what the peer did."""

    __slots__ = ("stream", "code", "why")

    def __init__(self, stream: Any, code: int, why: str = ""):
        self.stream, self.code, self.why = stream, code, why


class WindowsOpened(Event):
    """A WINDOW_UPDATE opened a send window: senders waiting for room may go on."""

    __slots__ = ()


class SettingsChanged(Event):
    """The peer's SETTINGS were applied (and acknowledged): its header table size, stream limit and
    initial window may have changed."""

    __slots__ = ()


class GoAway(Event):
    """The peer is going away: streams above ``last_stream`` will not be answered."""

    __slots__ = ("last_stream", "code", "debug")

    def __init__(self, last_stream: int, code: int, debug: str):
        self.last_stream, self.code, self.debug = last_stream, code, debug


class PingAcked(Event):
    """The peer acknowledged our PING."""

    __slots__ = ()


_WINDOWS_OPENED, _SETTINGS_CHANGED, _PING_ACKED = WindowsOpened(), SettingsChanged(), PingAcked()


class ConnectionState(Flow):
    """One end's I/O-free state of one connection (see the module's docstring).

    ``window`` / ``threshold``: our receive window and the credit that earns a WINDOW_UPDATE
    (:class:`~dmrpc_gym.transport.flow.Flow`); ``headers_in``: the bounds of header blocks received.
    ``streams``: the stream table, by id; ``frames`` / ``blocks``: frames and header blocks taken whole
    (how a stall is told, and what tests compare between paths).
    """

    __slots__ = ("streams", "frames", "blocks", "headers_in", "decoder", "encoder", "outbox", "buf", "part",
                 "started", "now")

    #: The largest frame this end accepts (what it advertises; here, the largest there is).
    MAX_FRAME_IN = (1 << 24) - 1

    def __init__(self, window: int = DEFAULT_WINDOW, threshold: int = MAX_WINDOW // 2 + 1,
                 headers_in: HeaderBlock | None = None):
        super().__init__(window, threshold)
        self.streams: dict[int, Any] = {}
        self.frames = 0
        self.blocks = 0
        self.headers_in = headers_in if headers_in is not None else HeaderBlock()
        self.decoder = self.headers_in.decoder()
        self.encoder = hpack.Encoder()  # our header blocks (its table sized by the peer's SETTINGS)
        self.outbox: list[bytes] = []
        self.buf = bytearray()          # what was received and is not a whole frame yet
        #: A large DATA frame whose payload goes straight into its message, not through :attr:`buf`:
        #: ``[stream (or what admit_part gave), flags, length, bytes left]``.
        self.part: list | None = None
        self.started = False            # the peer's opening (a server: the client preface) has come
        self.now = 0.0                  # the time of the bytes being taken (as :meth:`receive` was given it)

    # -- bytes in: the one frame loop of both ends ---------------------------------------------------
    def receive(self, data: Any = b"", now: float = 0.0, one: bool = False, whole: bool = False) -> Iterator[Event]:
        """The events of the frames ``data`` (any bytes received, after what :attr:`buf` holds) completes, in order;
        what is left of a frame waits in :attr:`buf` (``ProtocolError``: the connection ends with that
        GOAWAY). ``now``: when the bytes came; ``one``: the first whole frame only (the rest waits);
        ``whole``: whole frames only (a large DATA frame begun waits in :attr:`buf`). A large DATA frame
        (:meth:`in_place`) is given as far as it came, and :attr:`part` then says what is left: the next
        bytes given go straight to its message, or the I/O class reads them in place and says so
        (:meth:`part_read`). Handle each event before asking for the next: a DATA payload may be a view
        into the buffer."""
        self.now = now
        buf = self.buf
        if self.part is not None:       # a large DATA frame's payload: straight into its message
            data = yield from self._take_part(data)
            if len(data) >= 9 and not buf:          # and so is the next one's, if it is begun and large
                length, kind, flags, sid = read_head(data)
                if len(data) < 9 + length and self.in_place(length, kind, flags, sid):
                    self._begin_part(flags, sid, length)
                    data = yield from self._take_part(data[9:])
        if data:
            buf += data
        if not self.started:
            begun = self.start(buf)      # True: frames follow; False: wait; an event: it, then wait
            if begun is not True:
                if begun:
                    yield begun
                return
        headers_in = self.headers_in
        while len(buf) >= 9:
            length, kind, flags, sid = read_head(buf)
            if length > self.MAX_FRAME_IN:
                raise ProtocolError(FRAME_SIZE_ERROR, f"a frame of {length} bytes exceeds our "
                                                      f"SETTINGS_MAX_FRAME_SIZE of {self.MAX_FRAME_IN}")
            if kind == HEADERS or kind == CONTINUATION:    # judged before its payload is buffered
                headers_in.admit(kind, flags, length)
            end = 9 + length
            if len(buf) < end:
                if not whole and self.in_place(length, kind, flags, sid):     # the rest comes straight into its message
                    self._begin_part(flags, sid, length)
                    with memoryview(buf) as view:
                        yield from self._take_part(view[9:])
                    del buf[:]
                return
            if kind == DATA and headers_in.data is None:
                if length >= IN_PLACE:                    # copied once, into its message
                    with memoryview(buf) as view:
                        event = self.data(flags, sid, view[9:end])
                        if event is not None:
                            yield event
                            _release(event)           # (the buffer shrinks next: no view may outlive it)
                else:
                    event = self.data(flags, sid, bytes(buf[9:end]))
                    if event is not None:
                        yield event
            else:
                event = self.frame(kind, flags, sid, bytes(buf[9:end]))
                if event is not None:
                    yield event
            del buf[:end]
            self.frames += 1
            if one:
                return

    def ready(self) -> bool:
        """Whether :meth:`receive` can take something of :attr:`buf` without more bytes: the peer's opening
        to check, a whole frame, or the beginning of a large DATA frame to go straight into its message."""
        buf = self.buf
        if len(buf) < 9:
            return False
        if not self.started:
            return True
        length, kind, flags, sid = read_head(buf)
        return len(buf) >= 9 + length or self.in_place(length, kind, flags, sid)

    def in_place(self, length: int, kind: int, flags: int, sid: int) -> bool:
        """Whether a frame so announced, not all received, is a large DATA frame whose payload is to go
        straight into its message (not padded, no header block open, within :attr:`MAX_FRAME_IN`)."""
        return (kind == DATA and IN_PLACE <= length <= self.MAX_FRAME_IN and not flags & PADDED
                and self.headers_in.data is None)

    def _begin_part(self, flags: int, sid: int, length: int) -> None:
        self.part = [self.admit_part(sid, length), flags, length, length]

    def _take_part(self, data: Any) -> Iterator[Event]:
        """The events of the next bytes of the large DATA frame begun, taken from ``data``; returns what
        follows the frame in ``data``."""
        part = self.part
        stream, flags, length, left = part
        view = memoryview(data)
        n = min(left, len(view))
        left -= n
        if left:
            part[3] = left
        else:
            self.part = None
            self.frames += 1
        if type(stream) is ResetOwed:            # DATA after END_STREAM: reset once, the rest dropped
            part[0] = None
            yield stream
        elif stream is None:
            pass                                   # dropped, and credited when admitted
        elif n and self.streams.get(stream.id) is stream:    # (ended meanwhile: its bytes dropped)
            event = Data(stream, flags if not left else flags & ~END_STREAM, view[:n])
            yield event
            _release(event)
        if not left:
            self.part_done(stream, length)
        return view[n:]

    def part_read(self, left: int) -> Event | None:
        """The I/O class read the large DATA frame begun in place, straight into its message: ``left``
        bytes are still to come. At 0 it is whole: counted, done with (:meth:`part_done`), and its
        END_STREAM given (an empty :class:`Data`) where it had one."""
        part = self.part
        part[3] = left
        if left:
            return None
        self.part = None
        self.frames += 1
        stream, flags, length, _ = part
        self.part_done(stream, length)
        return Data(stream, END_STREAM, b"") if flags & END_STREAM else None

    def credit_connection(self, n: int) -> None:
        """``n`` bytes of no open stream are done with: the connection's credit only (the WINDOW_UPDATE
        owed, if any, in :meth:`data_to_send`)."""
        owed = self.consumed(n)
        if owed:
            self.outbox.append(owed)

    # -- bytes out --------------------------------------------------------------------------------------
    def frame_headers(self, sid: int, fields: Sequence[tuple[str, str]], end_stream: bool = False,
                      huffman: bool = True) -> bytes:
        """Frame a header block (request or response headers, trailers with ``end_stream``): ``fields``
        HPACK-encoded by the connection's encoder, in a HEADERS frame and as many CONTINUATION frames as
        the peer's SETTINGS_MAX_FRAME_SIZE needs; the bytes to send, in this order (the encoder's table
        follows what it encoded)."""
        block = self.encoder.encode(fields, huffman=huffman)
        return header_frames(sid, END_STREAM if end_stream else 0, block, self.peer.max_frame)

    def data_to_send(self) -> bytes:
        """The bytes the state owes the peer (acknowledgements, WINDOW_UPDATEs), taken: b"" when none."""
        out = self.outbox
        if not out:
            return b""
        self.outbox = []
        return out[0] if len(out) == 1 else b"".join(out)

    def frame(self, kind: int, flags: int, sid: int, payload: bytes) -> Event | None:
        """One whole frame other than DATA: checked (RFC 9113's shapes; nothing may interrupt a header
        block) and taken; the event for the I/O class, or None. ``ProtocolError``: the connection ends."""
        check_frame(kind, flags, sid, len(payload))
        headers_in = self.headers_in
        if headers_in.data is not None and (kind != CONTINUATION or sid != headers_in.stream):
            raise ProtocolError(PROTOCOL_ERROR, "a frame interrupted a header block")
        if kind == HEADERS or kind == CONTINUATION:
            self.opening(sid)
            headers = headers_in.add(kind, flags, sid, payload, self.decoder)
            if headers is None:
                return None
            self.blocks += 1
            return self.header_block(headers_in.stream, headers_in.flags, headers, headers_in.size)
        if kind == SETTINGS:
            if flags & ACK:
                return None
            self.peer.apply(payload, list(self.streams.values()))
            self.encoder.header_table_size = self.peer.header_table
            self.outbox.append(SETTINGS_ACK)
            return _SETTINGS_CHANGED
        if kind == WINDOW_UPDATE:
            return self.window_opened(sid, U32.unpack(payload)[0] & 0x7FFFFFFF)
        if kind == PING:
            if flags & ACK:
                return _PING_ACKED
            self.pinged(payload)
            self.outbox.append(ping_frame(payload, ack=True))
            return None
        if kind == RST_STREAM:
            return self.peer_reset(sid, U32.unpack(payload)[0])
        if kind == GOAWAY:
            last, code = struct.unpack_from(">LL", payload)
            return GoAway(last & 0x7FFFFFFF, code, payload[8:].decode("utf-8", "replace"))
        if kind == PUSH_PROMISE:
            raise ProtocolError(PROTOCOL_ERROR, self.PUSH_REFUSED)
        return None                       # PRIORITY and unknown types: ignored, as RFC 9113 requires

    def window_opened(self, sid: int, increment: int) -> Event | None:
        """A WINDOW_UPDATE of ``increment`` on ``sid``: a window opened (:class:`WindowsOpened`); a stream
        error resets only that stream (:class:`ResetOwed`); on the connection, ``ProtocolError``."""
        stream = self.streams.get(sid) if sid else None
        self.window_unknown(sid, stream)
        try:
            self.window_update(sid, increment, stream)
        except StreamReset as err:
            return ResetOwed(stream, err.code, str(err))
        return _WINDOWS_OPENED

    # -- what each end says for itself --------------------------------------------------------------
    #: The debug text of the connection error for a PUSH_PROMISE received.
    PUSH_REFUSED = "a PUSH_PROMISE, which this end disabled"

    def start(self, buf: bytearray) -> bool | Event:
        """Before the first frame: whether the peer's opening in ``buf`` is whole (True: frames follow;
        False: more is to come; an event: it, and nothing more is read). Here: nothing to wait for."""
        self.started = True
        return True

    def data(self, flags: int, sid: int, payload: Any) -> Event | None:
        """A whole DATA frame, admitted by this end's rules: its event (padding off), or None."""
        raise NotImplementedError

    def admit_part(self, sid: int, length: int) -> Any:
        """A large DATA frame of ``length`` bytes on ``sid`` begins, its payload to go straight into its
        message: what :attr:`part` holds for it (the stream; None: its bytes are dropped)."""
        return self.streams.get(sid)

    def part_done(self, stream: Any, length: int) -> None:
        """The large DATA frame read straight into its message is whole (``stream`` as admitted)."""

    def opening(self, sid: int) -> None:
        """A header frame on ``sid`` is about to be taken: ``ProtocolError`` where this end forbids it."""

    def header_block(self, sid: int, flags: int, headers: dict, size: int) -> Event | None:
        """A whole header block was decoded: its event (here: :class:`Headers`)."""
        return Headers(sid, flags, headers, size)

    def window_unknown(self, sid: int, stream: Any) -> None:
        """A WINDOW_UPDATE on ``sid`` whose stream is not in the table (``stream`` None): a check of this end."""

    def pinged(self, payload: bytes) -> None:
        """A PING (not an ACK) came: this end's policing, before its ACK is owed."""

    def peer_reset(self, sid: int, code: int) -> Event | None:
        """RST_STREAM ``code`` on ``sid``: :class:`PeerReset` for a stream in the table, else None."""
        stream = self.streams.get(sid)
        return None if stream is None else PeerReset(stream, code)


def _release(event: Event) -> None:
    """A DATA event's view into the read buffer is let go once the event was handled (the buffer is then
    resized; the handler copied what it keeps, as ``MessageSplitter.feed`` does)."""
    if type(event) is Data and type(event.data) is memoryview:
        event.data.release()
