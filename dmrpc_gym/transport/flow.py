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
                                        parse_settings)

__all__ = ["StreamReset", "credited", "PeerSettings", "HasSendWindow", "SETTINGS_ACK"]

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
