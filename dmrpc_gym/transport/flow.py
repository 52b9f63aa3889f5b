"""Flow control and the peer's settings, by RFC 9113's rules, for both ends of a connection.

Each end keeps, per connection, what the peer said in SETTINGS (:class:`PeerSettings`) and how much
it may still send, on the connection and on each stream (its *send windows*). The rules that bind
them are written once, here:

- a WINDOW_UPDATE of 0 is a PROTOCOL_ERROR, and one that takes a window past 2**31-1 a
  FLOW_CONTROL_ERROR (section 6.9.1): on the connection (stream 0) these end the connection
  (:class:`~dmrpc_gym.transport.frames.ProtocolError`), on a stream they reset that stream
  only (:class:`StreamReset`, answered with RST_STREAM);
- SETTINGS_INITIAL_WINDOW_SIZE moves every open stream's send window by the change, and a
  window taken past 2**31-1 that way ends the connection (section 6.9.2);
- SETTINGS values are validated as :func:`~dmrpc_gym.transport.frames.parse_settings` reads
  them, and every SETTINGS frame that is not an ACK is answered with :data:`SETTINGS_ACK`.

>>> credited(65535, 100, stream_id=0)
65635
>>> try:
...     credited(65535, 0, stream_id=3)
... except StreamReset as err:
...     print(err.code.name, err)
PROTOCOL_ERROR a WINDOW_UPDATE of 0 on stream 3
"""
from __future__ import annotations

from typing import Iterable, Protocol

from dmrpc_gym.transport.codes import ErrorCode
from dmrpc_gym.transport.frames import (ACK, DEFAULT_WINDOW, FLOW_CONTROL_ERROR, MAX_WINDOW, MIN_FRAME,
                                        PROTOCOL_ERROR, SETTING_FRAME, SETTING_HEADER_LIST, SETTING_HEADER_TABLE,
                                        SETTING_STREAMS, SETTING_WINDOW, SETTINGS, ProtocolError, frame,
                                        parse_settings, window_update_frame)

__all__ = ["StreamReset", "credited", "PeerSettings", "HasSendWindow", "FlowStream", "Flow", "SETTINGS_ACK"]

#: The answer to every SETTINGS frame that is not itself an ACK (RFC 9113 6.5.3).
SETTINGS_ACK = frame(SETTINGS, ACK, 0)


class StreamReset(Exception):
    """An HTTP/2 *stream* error (RFC 9113 5.4.2): the stream is reset with ``code``; the connection goes on."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class HasSendWindow(Protocol):
    """A stream as :meth:`PeerSettings.apply` sees it: its id and what may still be sent on it."""

    id: int
    send_window: int


def credited(window: int, increment: int, stream_id: int) -> int:
    """The send window after a WINDOW_UPDATE of ``increment`` on ``stream_id`` (0: the connection).

    Raises ``ProtocolError`` on the connection and :class:`StreamReset` on a stream, for an
    increment of 0 (PROTOCOL_ERROR) or a window past 2**31-1 (FLOW_CONTROL_ERROR).
    """
    where = f"stream {stream_id}" if stream_id else "the connection"
    if not increment:
        code, message = PROTOCOL_ERROR, f"a WINDOW_UPDATE of 0 on {where}"
    else:
        window += increment
        if window <= MAX_WINDOW:
            return window
        code, message = FLOW_CONTROL_ERROR, f"a WINDOW_UPDATE took {where}'s window past 2**31-1"
    if stream_id:
        raise StreamReset(code, message)
    raise ProtocolError(code, message)


class PeerSettings:
    """What the peer said in its SETTINGS frames so far (RFC 9113's defaults until it says otherwise).

    ``max_streams`` and ``max_header_list`` are None while the peer has set no limit.

    >>> peer = PeerSettings()
    >>> payload = bytes.fromhex("0004" "00010000" "0005" "00008000")   # initial window 65536, frames 32 KiB
    >>> class S: id, send_window = 1, 65535
    >>> stream = S()
    >>> peer.apply(payload, [stream])
    >>> peer.initial_window, peer.max_frame, stream.send_window
    (65536, 32768, 65536)
    """

    __slots__ = ("initial_window", "max_frame", "max_streams", "max_header_list", "header_table")

    def __init__(self) -> None:
        self.initial_window = DEFAULT_WINDOW
        self.max_frame = MIN_FRAME
        self.max_streams: int | None = None
        self.max_header_list: int | None = None
        self.header_table = 4096

    def apply(self, payload: bytes, streams: Iterable[HasSendWindow]) -> None:
        """Take a SETTINGS frame's ``payload``, moving the open ``streams``' send windows by a new
        initial window (``ProtocolError`` for a value RFC 9113 forbids or a window past 2**31-1)."""
        for key, value in parse_settings(payload):
            if key == SETTING_WINDOW:
                delta, self.initial_window = value - self.initial_window, value
                for stream in streams:
                    stream.send_window += delta
                    if stream.send_window > MAX_WINDOW:
                        raise ProtocolError(FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE {value} took "
                                                                f"stream {stream.id}'s window past 2**31-1")
            elif key == SETTING_FRAME:
                self.max_frame = value
            elif key == SETTING_STREAMS:
                self.max_streams = value
            elif key == SETTING_HEADER_LIST:
                self.max_header_list = value
            elif key == SETTING_HEADER_TABLE:
                self.header_table = value


class FlowStream(HasSendWindow, Protocol):
    """A stream as :class:`Flow` sees it: both its windows and the credit it has earned the peer."""

    recv_window: int
    credit: int


class Flow:
    """One end's flow control of one connection, free of I/O: the peer's settings, the send windows
    (the connection's here, each stream's on the stream), the receive windows and the credit policy.

    Every rule of RFC 9113's flow control that a path of either end applies is a method here, and
    every path (the general frame readers and senders, large messages, both steady paths) calls it:

    - :meth:`fits` / :meth:`take` / :meth:`room` / :meth:`spend`: what may be sent now, and its debit;
    - :meth:`window_update`: a WINDOW_UPDATE received (:func:`credited`'s errors);
    - :meth:`admit`: DATA received, within both receive windows (else FLOW_CONTROL_ERROR);
    - :meth:`consumed`: bytes the application took, and the WINDOW_UPDATE frames owed for them: credit
      is given back once ``threshold`` bytes have gathered, on the connection and on the stream;
    - :meth:`received`: :meth:`admit` and :meth:`consumed` at once (a client credits what it receives;
      a server's steady path consumes a request as it reads it): one call for a small DATA frame.

    ``window``: the receive window we advertise (connection and streams); ``threshold``: the credit
    that earns a WINDOW_UPDATE.

    >>> class S: id, send_window, recv_window, credit = 1, 65535, 100, 0
    >>> flow, stream = Flow(window=100, threshold=50), S()
    >>> flow.take(stream, 10), flow.send_window, stream.send_window
    (True, 65525, 65525)
    >>> flow.received(stream, 60).hex()    # 60 >= 50: the connection's and the stream's credit back
    '0000040800000000000000003c0000040800000000010000003c'
    >>> flow.recv_window, stream.recv_window, flow.credit, stream.credit
    (100, 100, 0, 0)
    >>> flow.admit(101)
    Traceback (most recent call last):
    ...
    dmrpc_gym.transport.frames.ProtocolError: DATA past the connection's flow-control window
    """

    __slots__ = ("peer", "send_window", "recv_window", "credit", "threshold")

    def __init__(self, window: int = DEFAULT_WINDOW, threshold: int = MAX_WINDOW // 2 + 1):
        self.peer = PeerSettings()
        self.send_window = DEFAULT_WINDOW   # what we may still send on the connection
        self.recv_window = window           # what the peer may still send on the connection
        self.credit = 0                     # bytes consumed since our last connection WINDOW_UPDATE
        self.threshold = threshold

    # -- sending -----------------------------------------------------------------------------------
    def fits(self, stream: HasSendWindow, n: int) -> bool:
        """Whether a frame of ``n`` payload bytes may go on ``stream`` now (windows and the peer's frame size)."""
        return n <= stream.send_window and n <= self.send_window and n <= self.peer.max_frame

    def take(self, stream: HasSendWindow, n: int) -> bool:
        """Spend ``n`` bytes of the send windows for one frame on ``stream`` if it :meth:`fits` (else nothing)."""
        if n <= stream.send_window and n <= self.send_window and n <= self.peer.max_frame:
            stream.send_window -= n
            self.send_window -= n
            return True
        return False

    def room(self, stream: HasSendWindow, cap: int) -> int:
        """The largest frame that may go on ``stream`` now, at most ``cap`` bytes (0 or less: wait)."""
        return min(cap, stream.send_window, self.send_window, self.peer.max_frame)

    def spend(self, stream: HasSendWindow, n: int) -> None:
        """``n`` bytes sent on ``stream``: debited from its window and the connection's."""
        stream.send_window -= n
        self.send_window -= n

    def window_update(self, stream_id: int, increment: int, stream: HasSendWindow | None = None) -> None:
        """A WINDOW_UPDATE of ``increment`` on ``stream_id`` (0: the connection; ``stream``: that stream,
        None: one we no longer keep). ``ProtocolError`` / :class:`StreamReset` as :func:`credited` says."""
        if not stream_id:
            self.send_window = credited(self.send_window, increment, 0)
        elif stream is not None:
            stream.send_window = credited(stream.send_window, increment, stream_id)

    # -- receiving ---------------------------------------------------------------------------------
    def admit(self, n: int, stream: FlowStream | None = None) -> None:
        """A DATA frame of ``n`` bytes (padding included) came, on ``stream`` (None: one we do not keep):
        debited from the receive windows; past one, ``ProtocolError`` FLOW_CONTROL_ERROR (nothing debited)."""
        if n > self.recv_window or (stream is not None and n > stream.recv_window):
            raise self._past(n, stream)
        self.recv_window -= n
        if stream is not None:
            stream.recv_window -= n

    def consumed(self, n: int, stream: FlowStream | None = None) -> bytes:
        """``n`` received bytes are done with (on ``stream``; None: the connection's credit only): the
        WINDOW_UPDATE frames now owed to the peer (b"" while the credit is under ``threshold``)."""
        self.credit += n
        if stream is not None:
            stream.credit += n
            if self.credit >= self.threshold or stream.credit >= self.threshold:
                return self._owed(stream)
        elif self.credit >= self.threshold:
            return self._owed(None)
        return b""

    def received(self, stream: FlowStream, n: int) -> bytes:
        """A DATA frame of ``n`` bytes on ``stream``, admitted and consumed at once: the WINDOW_UPDATE
        frames owed. Nothing changes where it would pass a receive window (``ProtocolError``)."""
        if n > self.recv_window or n > stream.recv_window:
            raise self._past(n, stream)
        self.recv_window -= n
        stream.recv_window -= n
        self.credit += n
        stream.credit += n
        if self.credit >= self.threshold or stream.credit >= self.threshold:
            return self._owed(stream)
        return b""

    def _past(self, n: int, stream: FlowStream | None) -> ProtocolError:
        """The FLOW_CONTROL_ERROR of ``n`` bytes past a receive window (nothing was debited)."""
        where = "the connection's" if n > self.recv_window else f"stream {stream.id}'s"
        return ProtocolError(FLOW_CONTROL_ERROR, f"DATA past {where} flow-control window")

    def refund(self, stream: FlowStream, n: int) -> None:
        """Undo :meth:`received` of ``n`` bytes on ``stream`` (a steady path that declined the frame after
        all: the general path admits it again). Credit already owed stays given: it counts against the
        next bytes consumed, so that both ends' view of the windows stays the same."""
        self.recv_window += n
        stream.recv_window += n
        self.credit -= n
        stream.credit -= n

    def _owed(self, stream: FlowStream | None) -> bytes:
        """The WINDOW_UPDATE frames for the credit at or past ``threshold``; that credit is given back."""
        update = b""
        if self.credit >= self.threshold:
            update = window_update_frame(0, self.credit)
            self.recv_window += self.credit
            self.credit = 0
        if stream is not None and stream.credit >= self.threshold:
            update += window_update_frame(stream.id, stream.credit)
            stream.recv_window += stream.credit
            stream.credit = 0
        return update
