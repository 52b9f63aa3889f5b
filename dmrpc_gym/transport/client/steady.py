"""A client stream's steady-state exchange: one prebuilt DATA frame out, one answer of a known layout in;
and a vector step's, the same for several streams of one connection at once.

The steady path of :class:`~dmrpc_gym.transport.client.connection.GrpcConnection`'s ``write`` and ``read``
for a request whose answer is expected to have the same bytes as an earlier one except in known slots
(:class:`ByteLayout`). :meth:`SteadyTrips.round_trip` (a part of the connection) holds its lock once, sends the frame
with one ``send`` and takes the answer with one ``recv_into``, checked in place. The general ``write``
and ``read`` stay the reference; this path hands over to them wherever it cannot be sure.

What it assumes (anything else is handed over, with nothing lost):

- **sending**: the request is one uncompressed message that fits one DATA frame and both send windows;
  nothing unsent or corked is ahead of it; the process is no Jupyter kernel (where a send is held
  from Ctrl-C, see :mod:`~dmrpc_gym.transport.client.interrupts`). Otherwise nothing is sent
  (:data:`NOT_SENT`) and the caller takes the general path;
- **receiving**: no deadline (no step timeout, a blocking socket); nothing buffered, no message part
  way through the stream's splitter, no large frame read in place, no header block open; and the answer
  arrives in one ``recv`` as exactly the layout's bytes: one DATA frame on this stream (no flags, no
  padding) holding one uncompressed message, whose fixed parts match. Otherwise whatever was received
  goes to the connection's buffer, and ``None`` says: the request was sent, read its answer the general way;
- **keepalive**: with PINGs on (a receive timeout of a read slice on the socket), a slice that passes
  with nothing received is handed over too; the general read then counts the silence from that moment,
  at most one slice (1 s) late.

A vector step's sub-envs share one connection, a stream each: :meth:`SteadyTrips.send_frames` sends their
frames in one ``send`` (under the same assumptions, every stream's windows taken or none), and
:meth:`SteadyTrips.take_answers` reads until every answer has come, each checked against its stream's layouts
in turn; at the first frame that is none of them (a control frame, another stream's, another layout, one
larger than the read buffer) it hands that frame and all after it to the general read.

Hostile input: only bytes equal to the layout's fixed parts are taken here, and the layout was learned
from an answer the general path accepted (its size under the stream's message limit); everything else
meets the general path's bounds. The connection's state (:class:`~dmrpc_gym.transport.client.state.ClientState`)
moves by the calls the general path makes, one per direction (``take`` for the request, ``received`` for the
answer), and its counters as the general path moves them.
"""
from __future__ import annotations

import ssl
from typing import Any, Callable, Sequence

from dmrpc_gym.protocol.protowire import varint
from dmrpc_gym.transport.frames import CLIENT_MESSAGE_LIMIT, DATA, MessageTooLarge, grpc_frame, read_head, read_prefix

__all__ = ["ByteLayout", "SteadyLink", "SteadyTrips", "NOT_SENT", "SENDING", "RECEIVING", "TAKEN"]

#: :meth:`SteadyTrips.round_trip`'s answer when it sent nothing (the general path must send).
NOT_SENT = False
#: :attr:`SteadyLink.phase`: where the latest round trip got to.
SENDING, RECEIVING, TAKEN = 0, 1, 2
_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError)


class ByteLayout:
    """The bytes a DATA frame carrying one gRPC message on stream ``stream_id`` must have: those of
    ``message``, framed, except in ``slots`` (``(start, stop)`` offsets into ``message``, in order):
    a frame of :attr:`total` bytes whose :attr:`checks` (``(start, stop, bytes)``) hold.

    ``tail``: where a part of varying length begins (an offset into ``message``, after every slot), for
    answers whose last entries change in size (a served env's ``info``); None: the message is of one
    size. With a tail, :attr:`total` and :attr:`checks` are those of the message without it (its lengths
    made so), and :meth:`fitting` gives the checks of a frame with one: its lengths (the frame's, the gRPC
    prefix's and the varint after the message's first byte, a tag) must agree with its size, the varint
    keep its width, and ``check_tail(view, start, stop)`` take the tail.

    >>> layout = ByteLayout(b"ab1234cd", 1, [(2, 6)])
    >>> layout.total, [(a, b) for a, b, _ in layout.checks]
    (22, [(0, 16), (20, 22)])
    >>> tailed = ByteLayout(b"\\x2a\\x07ab1234c", 1, [(4, 8)], tail=7, check_tail=lambda view, a, b: True)
    >>> tailed.total, tailed.checks[0][2][10:16]     # without the tail: a message of 7 bytes, 5 after its head
    (21, b'\\x00\\x00\\x00\\x07*\\x05')
    >>> checks = tailed.fitting(memoryview(grpc_frame(b"\\x2a\\x09ab9999cxy", 1)), 25)
    >>> [(a, b) for a, b, _ in checks]
    [(3, 10), (14, 15), (16, 18)]
    """

    __slots__ = ("total", "checks", "tail", "check_tail", "_width", "_tailed")

    def __init__(self, message: bytes, stream_id: int, slots: list[tuple[int, int]], tail: int | None = None,
                 check_tail: Callable[[Any, int, int], bool] | None = None):
        self.tail, self.check_tail, self._width, self._tailed = tail, check_tail, 0, ()
        if tail is not None:                 # the lengths vary: the frame's, the prefix's, the head's varint
            width = self._width = _width(message)
            self._tailed = _checks(message, stream_id, [(-14, -11), (-4, 0), (1, 1 + width), *slots,
                                                        (tail, len(message))])
            bare = message[:1] + varint(tail - 1 - width) + message[1 + width:tail]
            message = bare if len(bare) == tail else None    # (None: without a tail its varint is narrower)
        self.total = -1 if message is None else len(message) + 14
        self.checks = () if message is None else _checks(message, stream_id, slots)

    def matches(self, view: Any, got: int) -> bool:
        """Whether the frame ``view`` (``got`` bytes) has this layout: its fixed bytes, and with a tail its
        lengths (:meth:`fitting`)."""
        checks = self.checks if got == self.total else self.fitting(view, got)
        if checks is None:
            return False
        for a, b, piece in checks:
            if view[a:b] != piece:
                return False
        return True

    def fitting(self, view: Any, got: int) -> tuple | None:
        """The checks of a frame of ``got`` bytes (``view``), not :attr:`total` bytes: with a tail, where the
        frame's lengths agree with its size and ``check_tail`` takes its tail; else None."""
        tail = self.tail
        if tail is None or got < tail + 14:
            return None
        n, width = got - 9, self._width
        try:
            declared = read_prefix(view, 9, n - 5, CLIENT_MESSAGE_LIMIT)[1]
        except MessageTooLarge:
            return None
        if (read_head(view)[0] == n and declared == n - 5
                and view[15:15 + width] == varint(n - 6 - width)
                and self.check_tail(view, tail + 14, got)):
            return self._tailed
        return None


def _checks(message: bytes, stream_id: int, cuts: list[tuple[int, int]]) -> tuple:
    """``(start, stop, bytes)`` of ``message`` framed, around ``cuts`` (offsets into the message)."""
    framed = grpc_frame(message, stream_id)
    checks, at = [], 0
    for start, stop in cuts:
        checks.append((at, start + 14, framed[at:start + 14]))
        at = stop + 14
    checks.append((at, len(framed), framed[at:]))
    return tuple((a, b, piece) for a, b, piece in checks if b > a)


def _width(message: bytes) -> int:
    """The width of the varint after ``message``'s first byte (a tag)."""
    width = 1
    while message[width] & 0x80:
        width += 1
    return width


class SteadyLink:
    """The steady-state exchange of one :class:`~dmrpc_gym.transport.client.stream.GrpcStream`
    (see the module's docstring for what it assumes): the stream, its connection, whose
    :meth:`~SteadyTrips.round_trip` makes the exchange, and how far the latest one got.

    >>> from dmrpc_gym.transport.client.h2_transport import open_connection
    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> conn = open_connection(embedded_server("catch").address, 5.0)
    >>> link = SteadyLink(conn.open_stream())
    >>> link.stream.id, link.connection is conn, link.phase == SENDING
    (1, True, True)
    >>> link.stream.close()
    """

    __slots__ = ("stream", "connection", "phase", "matched")

    def __init__(self, stream: Any):
        self.stream = stream
        self.connection = stream.connection
        #: How far the latest round trip got: :data:`SENDING`, :data:`RECEIVING` (its send was
        #: through) or :data:`TAKEN` (its answer was taken here).
        self.phase = SENDING
        #: Which of its layouts the answer :meth:`~SteadyTrips.take_answers` took last has (an index).
        self.matched = -1

    def answer(self) -> bytearray:
        """The answer :meth:`~SteadyTrips.take_answers` took for this stream, taken off the stream as its
        ``read`` takes a message (it lies there till then: an interrupt leaves it to the general read)."""
        stream = self.stream
        stream.messages_read += 1
        return stream.messages.popleft()


class SteadyTrips:
    """The steady path of :class:`~dmrpc_gym.transport.client.connection.GrpcConnection` (a mixin).

    What it needs of its host: :class:`~dmrpc_gym.transport.client.contracts.SteadyHost`.
    """

    def round_trip(self, link: SteadyLink, data: bytes, size: int, layout: ByteLayout | None,
                   timeout: float | None):
        """Send ``data`` (one DATA frame of ``size`` payload bytes, as ``grpc_frame`` builds it) on
        ``link``'s stream and take the answer when it has ``layout``: the message (a ``bytearray``);
        None when the answer is left to the general read; :data:`NOT_SENT` when nothing was sent.
        ``timeout`` is the read's (the general path's ``read(timeout)``); any but None hands the
        receiving over. The windows move by the state's ``take`` and ``received``, as the
        general ``write`` and ``read`` move them."""
        stream, state = link.stream, self.state
        link.phase = SENDING
        with self.lock:
            if (stream.ended is not None or self._dead is not None or self._unsent or self._corked
                    or stream.compress or self._kernel or not state.take(stream, size)):
                return NOT_SENT
            # As write and send: the windows (taken above), then the message committed before a byte goes.
            self._unsent, stream.messages_sent, self.messages_sent = (
                data, stream.messages_sent + 1, self.messages_sent + 1)
            sock, end, sent = self._sock, size + 9, 0
            try:
                while sent < end:
                    sent += sock.send(data[sent:] if sent else data)
            finally:
                self._unsent = data[sent:] if sent < end else b""
            link.phase = RECEIVING
            self._per_call = timeout
            splitter = stream.splitter
            if (layout is None or timeout is not None or self._timeout is not None or state.buf
                    or state.part is not None or stream.messages or state.headers_in.data is not None
                    or splitter.buffered or splitter.large is not None or self._timeout_by_select):
                return None
            try:                                 # (polling first for a peer on this host: busy_poll)
                got = self.recv_answer(self._rbuf)
            except _WOULD_BLOCK:                 # keepalive's read slice passed: the general read goes on
                return None
            except OSError as err:               # the general read raises it (and says so) the same way
                self._dead = err
                return None
            view = self._rview
            if layout.matches(view, got):
                message = self._rbuf[14:got]
                stream.messages_read += 1
                link.phase = TAKEN
                owed = state.received(stream, got - 9)   # as the state's receive: the windows earned back
                state.frames += 1
                if owed:
                    self.send(owed)
                return message
            state.buf += view[:got]              # handed over: the general read takes it from the state
            return None

    def send_frames(self, links: Sequence[SteadyLink], frames: Sequence[tuple[bytes, int]]) -> bool:
        """Send ``frames[i]`` (a DATA frame and its payload size, as ``grpc_frame`` builds them) on ``links[i]``'s
        stream, all in one ``send`` (a vector env's step: one request per sub-env): True; :data:`NOT_SENT`
        where the general ``write`` would not send each at once or their windows do not all fit (nothing sent:
        the general path sends them). The windows move by the state's ``take_all``, as ``write`` moves them."""
        state, streams = self.state, [link.stream for link in links]
        with self.lock:
            if self._dead is not None or self._unsent or self._corked or self._kernel:
                return NOT_SENT
            for stream in streams:
                if stream.ended is not None or stream.compress:
                    return NOT_SENT
            if not state.take_all(streams, [size for _, size in frames]):
                return NOT_SENT
            data = b"".join([framed for framed, _ in frames])
            try:                                 # committed before a byte goes, as write commits one message
                self._unsent = data
                for link in links:
                    link.phase = SENDING
                    link.stream.messages_sent += 1
                self.messages_sent += len(links)
            except BaseException:                # interrupted part way: which streams owe an answer is lost
                self._dead = ConnectionError("a vector step was interrupted as its requests were committed")
                raise
            sock, end, sent = self._sock, len(data), 0
            try:
                while sent < end:
                    sent += sock.send(data[sent:] if sent else data)
            finally:
                self._unsent = data[sent:] if sent < end else b""
            for link in links:
                link.phase = RECEIVING
            return True

    def take_answers(self, links: Sequence[SteadyLink], layouts: Sequence[Sequence[ByteLayout]],
                     timeout: float | None) -> int:
        """Read the answers to :meth:`send_frames`' requests, as many ``recv`` calls as they take to come: each
        that is one DATA frame with one of ``layouts[i]`` (tried in turn) is taken (its stream's next message,
        :meth:`SteadyLink.answer`; ``links[i].phase`` :data:`TAKEN`, ``.matched`` the layout's index). At the
        first frame that is none of them (another layout, a control frame, a frame larger than the read
        buffer), it and all after it go to the state's buffer, for the general read, which reads the answers
        not taken. Returns how many were taken (0: nothing read, where the general read would not read from a
        fresh ``recv``, as :meth:`round_trip` says)."""
        state = self.state
        with self.lock:
            if (timeout is not None or self._timeout is not None or self._timeout_by_select or self._unsent
                    or state.buf or state.part is not None or state.headers_in.data is not None):
                return 0
            waiting = {}
            for link, candidates in zip(links, layouts):
                stream = link.stream
                if (link.phase != RECEIVING or stream.messages or stream.splitter.buffered
                        or stream.splitter.large is not None):
                    return 0
                waiting[stream.id] = link, candidates
            self._per_call = timeout
            rbuf, view, size, recv = self._rbuf, self._rview, len(self._rbuf), self.recv_answer
            have = taken = 0
            while waiting:
                try:
                    got = recv(view[have:] if have else rbuf)
                except _WOULD_BLOCK:             # keepalive's read slice passed: the general read goes on
                    break
                except OSError as err:           # the general read raises it (and says so)
                    self._dead = err
                    break
                if not got:                      # the server closed: the general read says so
                    break
                have += got
                at = 0
                while have - at >= 9:
                    length, kind, flags, sid = read_head(view, at)
                    end = at + 9 + length
                    entry = waiting.get(sid) if kind == DATA and not flags and end <= size else None
                    if entry is None:            # not an answer of the batch: handed over, with all after it
                        state.buf += view[at:have]
                        return taken
                    if end > have:
                        break
                    link, candidates = entry
                    frame, n, matched = view[at:end], end - at, -1
                    for k, layout in enumerate(candidates):       # the first layout the frame has
                        if layout.matches(frame, n):
                            matched = k
                            break
                    if matched < 0:
                        state.buf += view[at:have]
                        return taken
                    stream = link.stream
                    stream.messages.append(rbuf[at + 14:end])
                    link.phase, link.matched = TAKEN, matched
                    owed = state.received(stream, end - at - 9)    # as the state's receive: the windows earned back
                    state.frames += 1
                    if owed:
                        self.send(owed)
                    del waiting[sid]
                    taken += 1
                    at = end
                if at:                           # a frame part way: moved to the front, the rest read after it
                    rbuf[:have - at] = rbuf[at:have]
                    have -= at
            if have:
                state.buf += view[:have]
            return taken

