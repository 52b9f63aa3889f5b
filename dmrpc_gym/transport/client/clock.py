"""The client's clock: a call's timeout bounds the whole call, not each ``recv``.

A mixin of :class:`~dmrpc_gym.transport.client.connection.GrpcConnection`. A peer that
trickles one byte every half second would keep a per-``recv`` timeout from
ever firing; here each call (a read, a large write, the handshake) takes a
deadline when it starts, and every blocking socket operation inside it waits
at most what is left of it. With no timeout (None) the socket simply blocks,
at no cost per call.

>>> import socket
>>> a, b = socket.socketpair()
>>> clock = CallClock()
>>> clock._sock, clock._timeout, clock._per_call = a, None, 0.05
>>> clock._begin(); clock._arm(); a.gettimeout() <= 0.05
True
>>> clock._end_call(); a.gettimeout()
0.05
>>> a.close(); b.close()
"""
from __future__ import annotations

import socket
import ssl
import time
from typing import Callable

__all__: list[str] = []


class CallClock:
    """Deadlines of the running call (the connection's ``lock`` is held throughout).

    What it needs of its host: :class:`~dmrpc_gym.transport.client.contracts.ClockHost`.
    """

    _sock: socket.socket
    _timeout: float | None           # the socket's timeout now
    _per_call: float | None          # seconds a whole call may take (None: no limit)
    _deadline: float | None = None   # when the running call times out

    def _begin(self) -> None:
        """A call starts: its deadline is ``_per_call`` seconds from now."""
        if self._per_call is None:
            self._deadline = None
            self._set_timeout(None)
        else:
            self._deadline = time.monotonic() + self._per_call

    def _arm(self) -> None:
        """Before a blocking socket call: wait at most what is left of the deadline."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        self._set_timeout(left)

    def _end_call(self) -> None:
        """The call is over: no deadline; the socket waits ``_per_call`` again (small writes)."""
        self._deadline = None
        self._set_timeout(self._per_call)

    def _at_once(self, call: Callable[[int], int]) -> int | None:
        """``call(flags)`` (a ``recv_into`` or ``send`` of the socket) without blocking: its result,
        or None when it would have had to wait. A plain socket with no timeout is asked with
        ``MSG_DONTWAIT``; any other is made non-blocking for the call (a socket with a timeout
        waits whatever the flags say, and TLS takes no flags)."""
        try:
            if self._timeout is None and not isinstance(self._sock, ssl.SSLSocket):
                return call(socket.MSG_DONTWAIT)
            self._sock.settimeout(0.0)
            try:
                return call(0)
            finally:
                self._sock.settimeout(self._timeout)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return None

    def _set_timeout(self, seconds: float | None) -> None:
        if seconds != self._timeout:
            self._sock.settimeout(seconds)
            self._timeout = seconds
