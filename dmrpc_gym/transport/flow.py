"""Flow control and the peer's settings, by RFC 9113's rules, for both ends of a connection.

Each end keeps, per connection, what the peer said in SETTINGS (:class:`PeerSettings`) and how much
it may still send, on the connection and on each stream (its *send windows*). The rules that bind
them are written once, here:

- a WINDOW_UPDATE opens one window (:meth:`~dmrpc_gym.transport.windows.Window.opened`:
  section 6.9.1's errors, of the connection or of the stream only);
- SETTINGS_INITIAL_WINDOW_SIZE moves every open stream's send window by the change
  (:meth:`~dmrpc_gym.transport.windows.Window.moved`, section 6.9.2);
- SETTINGS values are validated as :func:`~dmrpc_gym.transport.frames.parse_settings` reads
  them, and every SETTINGS frame that is not an ACK is answered with :data:`SETTINGS_ACK`.

Windows are :class:`~dmrpc_gym.transport.windows.Window` objects: the connection's two on the
:class:`Flow`, each stream's two on the stream (``send`` and ``recv``).
"""
from __future__ import annotations

from typing import Iterable, Protocol, Sequence

from dmrpc_gym.transport.frames import (ACK, DEFAULT_WINDOW, FLOW_CONTROL_ERROR, MAX_WINDOW, MIN_FRAME,
                                        SETTING_FRAME, SETTING_HEADER_LIST, SETTING_HEADER_TABLE, SETTING_STREAMS,
                                        SETTING_WINDOW, SETTINGS, SETTINGS_SAME_HOST, ProtocolError, frame, parse_settings,
                                        window_update_frame)
from dmrpc_gym.transport.windows import StreamReset, Window

__all__ = ["StreamReset", "Window", "PeerSettings", "HasSendWindow", "FlowStream", "Flow", "SETTINGS_ACK"]

#: The answer to every SETTINGS frame that is not itself an ACK (RFC 9113 6.5.3).
SETTINGS_ACK = frame(SETTINGS, ACK, 0)


class HasSendWindow(Protocol):
    """A stream as :meth:`PeerSettings.apply` sees it: its id and what may still be sent on it."""

    id: int
    send: Window


class PeerSettings:
    """What the peer said in its SETTINGS frames so far (RFC 9113's defaults until it says otherwise).

    ``max_streams`` and ``max_header_list`` are None while the peer has set no limit.

    >>> peer = PeerSettings()
    >>> payload = bytes.fromhex("0004" "00010000" "0005" "00008000")   # initial window 65536, frames 32 KiB
    >>> class S: id, send = 1, Window(65535)
    >>> stream = S()
    >>> peer.apply(payload, [stream])
    >>> peer.initial_window, peer.max_frame, stream.send.size
    (65536, 32768, 65536)
    """

    __slots__ = ("initial_window", "max_frame", "max_streams", "max_header_list", "header_table", "same_host")

    def __init__(self) -> None:
        self.initial_window = DEFAULT_WINDOW
        self.max_frame = MIN_FRAME
        self.max_streams: int | None = None
        self.max_header_list: int | None = None
        self.header_table = 4096
        #: The private settings of a dmrpc_gym server's same-host socket (:mod:`~dmrpc_gym.transport.same_host`).
        self.same_host: dict[int, int] = {}

    def apply(self, payload: bytes, streams: Iterable[HasSendWindow]) -> None:
        """Take a SETTINGS frame's ``payload``, moving the open ``streams``' send windows by a new
        initial window (``ProtocolError`` for a value RFC 9113 forbids or a window past 2**31-1)."""
        for key, value in parse_settings(payload):
            if key == SETTING_WINDOW:
                delta, self.initial_window = value - self.initial_window, value
                for stream in streams:
                    stream.send.moved(delta, stream.id)
            elif key == SETTING_FRAME:
                self.max_frame = value
            elif key == SETTING_STREAMS:
                self.max_streams = value
            elif key == SETTING_HEADER_LIST:
                self.max_header_list = value
            elif key == SETTING_HEADER_TABLE:
                self.header_table = value
            elif SETTINGS_SAME_HOST <= key < SETTINGS_SAME_HOST + 4:
                self.same_host[key] = value


class FlowStream(HasSendWindow, Protocol):
    """A stream as :class:`Flow` sees it: both its windows and the credit it has earned the peer."""

    recv: Window


class Flow:
    """One end's flow control of one connection, free of I/O: the peer's settings, the windows (the
    connection's here, ``send`` and ``recv``; each stream's on the stream) and the credit policy.

    Every rule of RFC 9113's flow control that a path of either end applies is a method here, and
    every path (the general frame readers and senders, large messages, both steady paths) calls it:

    - :meth:`fits` / :meth:`take` / :meth:`room` / :meth:`spend`: what may be sent now, and its debit;
    - :meth:`window_update`: a WINDOW_UPDATE received (:meth:`Window.opened`'s errors);
    - :meth:`admit`: DATA received, within both receive windows (else FLOW_CONTROL_ERROR);
    - :meth:`consumed`: bytes the application took, and the WINDOW_UPDATE frames owed for them: credit
      is given back once ``threshold`` bytes have gathered, on the connection and on the stream;
    - :meth:`received`: :meth:`admit` and :meth:`consumed` at once (a client credits what it receives;
      a server's steady path consumes a request as it reads it): one call for a small DATA frame.

    ``window``: the receive window we advertise (connection and streams); ``threshold``: the credit
    that earns a WINDOW_UPDATE. ``answered`` is set whenever DATA is debited (:meth:`take`,
    :meth:`spend`): the server's PING policing reads it.

    >>> class S: id, send, recv = 1, Window(65535), Window(100)
    >>> flow, stream = Flow(window=100, threshold=50), S()
    >>> flow.take(stream, 10), flow.send, stream.send
    (True, Window(size=65525, credit=0), Window(size=65525, credit=0))
    >>> flow.received(stream, 60).hex()    # 60 >= 50: the connection's and the stream's credit back
    '0000040800000000000000003c0000040800000000010000003c'
    >>> flow.recv, stream.recv
    (Window(size=100, credit=0), Window(size=100, credit=0))
    >>> flow.admit(101)
    Traceback (most recent call last):
    ...
    dmrpc_gym.transport.frames.ProtocolError: DATA past the connection's flow-control window
    """

    __slots__ = ("peer", "send", "recv", "threshold", "answered")

    def __init__(self, window: int = DEFAULT_WINDOW, threshold: int = MAX_WINDOW // 2 + 1):
        self.peer = PeerSettings()
        self.send = Window(DEFAULT_WINDOW)   # what we may still send on the connection
        self.recv = Window(window)           # what the peer may still send on it, and the credit we owe
        self.threshold = threshold
        self.answered = False                # DATA went out since the server's PING policing last looked

    # -- sending -----------------------------------------------------------------------------------
    def fits(self, stream: HasSendWindow, n: int) -> bool:
        """Whether a frame of ``n`` payload bytes may go on ``stream`` now (windows and the peer's frame size)."""
        return n <= stream.send.size and n <= self.send.size and n <= self.peer.max_frame

    def take(self, stream: HasSendWindow, n: int) -> bool:
        """Spend ``n`` bytes of the send windows for one frame on ``stream`` if it :meth:`fits` (else nothing)."""
        own, conn = stream.send, self.send
        if n <= own.size and n <= conn.size and n <= self.peer.max_frame:
            own.size -= n
            conn.size -= n
            self.answered = True
            return True
        return False

    def take_all(self, streams: Sequence[HasSendWindow], sizes: Sequence[int]) -> bool:
        """:meth:`take` for one frame on each of ``streams`` (``sizes[i]`` payload bytes), all or none: nothing is
        spent unless every frame :meth:`fits` and together they fit the connection's window; then each is
        :meth:`spend`-ed."""
        if sum(sizes) > self.send.size:
            return False
        for stream, n in zip(streams, sizes):
            if not self.fits(stream, n):
                return False
        for stream, n in zip(streams, sizes):
            self.spend(stream, n)
        return True

    def room(self, stream: HasSendWindow, cap: int) -> int:
        """The largest frame that may go on ``stream`` now, at most ``cap`` bytes (0 or less: wait)."""
        return min(cap, stream.send.size, self.send.size, self.peer.max_frame)

    def spend(self, stream: HasSendWindow, n: int) -> None:
        """``n`` bytes sent on ``stream`` (a frame :meth:`room` allowed): debited from its window and the connection's."""
        stream.send.size -= n
        self.send.size -= n
        self.answered = True

    def window_update(self, stream_id: int, increment: int, stream: HasSendWindow | None = None) -> None:
        """A WINDOW_UPDATE of ``increment`` on ``stream_id`` (0: the connection; ``stream``: that stream,
        None: one we no longer keep). ``ProtocolError`` / :class:`StreamReset` as :meth:`Window.opened` says."""
        if not stream_id:
            self.send.opened(increment, 0)
        elif stream is not None:
            stream.send.opened(increment, stream_id)

    # -- receiving ---------------------------------------------------------------------------------
    def admit(self, n: int, stream: FlowStream | None = None) -> None:
        """A DATA frame of ``n`` bytes (padding included) came, on ``stream`` (None: one we do not keep):
        debited from the receive windows; past one, ``ProtocolError`` FLOW_CONTROL_ERROR (nothing debited)."""
        if n > self.recv.size or (stream is not None and n > stream.recv.size):
            raise self._past(n, stream)
        self.recv.size -= n
        if stream is not None:
            stream.recv.size -= n

    def consumed(self, n: int, stream: FlowStream | None = None) -> bytes:
        """``n`` received bytes are done with (on ``stream``; None: the connection's credit only): the
        WINDOW_UPDATE frames now owed to the peer (b"" while the credit is under ``threshold``)."""
        conn = self.recv
        conn.credit += n
        if stream is not None:
            stream.recv.credit += n
            if conn.credit >= self.threshold or stream.recv.credit >= self.threshold:
                return self._owed(stream)
        elif conn.credit >= self.threshold:
            return self._owed(None)
        return b""

    def received(self, stream: FlowStream, n: int) -> bytes:
        """A DATA frame of ``n`` bytes on ``stream``, admitted and consumed at once: the WINDOW_UPDATE
        frames owed. Nothing changes where it would pass a receive window (``ProtocolError``)."""
        conn, own = self.recv, stream.recv
        if n > conn.size or n > own.size:
            raise self._past(n, stream)
        conn.size -= n
        own.size -= n
        conn.credit += n
        own.credit += n
        if conn.credit >= self.threshold or own.credit >= self.threshold:
            return self._owed(stream)
        return b""

    def _past(self, n: int, stream: FlowStream | None) -> ProtocolError:
        """The FLOW_CONTROL_ERROR of ``n`` bytes past a receive window (nothing was debited)."""
        where = "the connection's" if n > self.recv.size else f"stream {stream.id}'s"
        return ProtocolError(FLOW_CONTROL_ERROR, f"DATA past {where} flow-control window")

    def refund(self, stream: FlowStream, n: int) -> None:
        """Undo :meth:`received` of ``n`` bytes on ``stream`` (a steady path that declined the frame after
        all: the general path admits it again). Credit already owed stays given: it counts against the
        next bytes consumed, so that both ends' view of the windows stays the same."""
        for window in (self.recv, stream.recv):
            window.size += n
            window.credit -= n

    def _owed(self, stream: FlowStream | None) -> bytes:
        """The WINDOW_UPDATE frames for the credit at or past ``threshold``; that credit is given back."""
        update, conn = b"", self.recv
        if conn.credit >= self.threshold:
            update = window_update_frame(0, conn.credit)
            conn.size += conn.credit
            conn.credit = 0
        own = stream.recv if stream is not None else None
        if own is not None and own.credit >= self.threshold:
            update += window_update_frame(stream.id, own.credit)
            own.size += own.credit
            own.credit = 0
        return update
