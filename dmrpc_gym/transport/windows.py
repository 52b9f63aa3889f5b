"""A flow-control window of HTTP/2 (RFC 9113 5.2, 6.9): what one side may still send, as an object.

Each end keeps four kinds of window per connection: what it may send on the connection and on each
stream (*send windows*, opened by the peer's WINDOW_UPDATEs and moved by its
SETTINGS_INITIAL_WINDOW_SIZE), and what the peer may send (*receive windows*, debited as DATA comes
and given back as credit). A :class:`Window` is one of them: its ``size`` and, on a receive window,
the ``credit`` consumed and not yet given back. The rules that move a window by itself are its
methods; the rules that span the connection's window and a stream's (a DATA frame debits both; the
credit policy) are :class:`~dmrpc_gym.transport.flow.Flow`'s.

>>> window = Window(65535)
>>> window.opened(100, stream_id=0); window.size
65635
>>> try:
...     window.opened(0, stream_id=3)
... except StreamReset as err:
...     print(err.code.name, err)
PROTOCOL_ERROR a WINDOW_UPDATE of 0 on stream 3
"""
from __future__ import annotations

from dmrpc_gym.transport.codes import ErrorCode
from dmrpc_gym.transport.frames import FLOW_CONTROL_ERROR, MAX_WINDOW, PROTOCOL_ERROR, ProtocolError

__all__ = ["Window", "StreamReset"]


class StreamReset(Exception):
    """An HTTP/2 *stream* error (RFC 9113 5.4.2): the stream is reset with ``code``; the connection goes on."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class Window:
    """One flow-control window: ``size`` bytes may still be sent; ``credit``: bytes received and consumed
    since the last WINDOW_UPDATE that gave them back (receive windows only; 0 on send windows).

    >>> w = Window(10)
    >>> w.moved(-20, stream_id=1); w
    Window(size=-10, credit=0)
    """

    __slots__ = ("size", "credit")

    def __init__(self, size: int):
        self.size = size
        self.credit = 0

    def __repr__(self) -> str:
        return f"Window(size={self.size}, credit={self.credit})"

    def opened(self, increment: int, stream_id: int) -> None:
        """A WINDOW_UPDATE of ``increment`` for this window, of ``stream_id`` (0: the connection).

        RFC 9113 6.9.1: an increment of 0 is a PROTOCOL_ERROR, and one that takes the window past
        2**31-1 a FLOW_CONTROL_ERROR; on the connection they end it (``ProtocolError``), on a
        stream they reset that stream only (:class:`StreamReset`). Nothing changes on an error.
        """
        where = f"stream {stream_id}" if stream_id else "the connection"
        if not increment:
            code, message = PROTOCOL_ERROR, f"a WINDOW_UPDATE of 0 on {where}"
        elif self.size + increment <= MAX_WINDOW:
            self.size += increment
            return
        else:
            code, message = FLOW_CONTROL_ERROR, f"a WINDOW_UPDATE took {where}'s window past 2**31-1"
        if stream_id:
            raise StreamReset(code, message)
        raise ProtocolError(code, message)

    def moved(self, delta: int, stream_id: int) -> None:
        """A new SETTINGS_INITIAL_WINDOW_SIZE moved this stream's send window by ``delta`` (RFC 9113
        6.9.2: it may go negative; past 2**31-1 the connection ends, ``ProtocolError``)."""
        self.size += delta
        if self.size > MAX_WINDOW:
            raise ProtocolError(FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE took stream {stream_id}'s "
                                                    f"window past 2**31-1")
