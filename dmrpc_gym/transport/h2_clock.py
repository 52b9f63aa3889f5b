"""The client's clock: a call's timeout bounds the whole call, not each ``recv``; keepalive PINGs.

A mixin of :class:`~dmrpc_gym.transport.h2_client.GrpcStream`. A peer that
trickles one byte every half second would keep a per-``recv`` timeout from
ever firing; here each call (a read, a large write, the handshake) takes a
deadline when it starts, and every blocking socket operation inside it waits
at most what is left of it. With no timeout (None) the socket simply blocks,
at no cost per call.

Keepalive (``ping_every`` seconds, off by default): while the connection is
idle, the idle watcher (:mod:`~dmrpc_gym.transport.keepalive`) gives
:meth:`_Clock._tick` a turn each second; it sends a PING once the connection
has been quiet ``ping_every`` seconds, and declares the connection dead when a
PING goes unanswered for :data:`PING_TIMEOUT` seconds, so the next call fails
at once, naming the cause, instead of waiting on a peer that is gone.

>>> import socket
>>> a, b = socket.socketpair()
>>> clock = _Clock()
>>> clock._sock, clock._timeout, clock._per_call = a, None, 0.05
>>> clock._begin(); clock._arm(); a.gettimeout() <= 0.05
True
>>> clock._end_call(); a.gettimeout()
0.05
>>> a.close(); b.close()
"""
from __future__ import annotations

import socket
import time

from dmrpc_gym.transport.frames import PING, frame

__all__ = ["MIN_KEEPALIVE", "PING_TIMEOUT"]

#: The shortest keepalive interval a client may ask for: grpc clients' floor too. Servers refuse
#: more frequent pings (ours: ``ConnectionLimits.min_ping_interval``; grpc servers by default
#: allow one per 5 minutes on a connection that carries no data) with GOAWAY too_many_pings.
MIN_KEEPALIVE = 10.0
#: Seconds a keepalive PING may wait for its ACK before the connection counts as dead.
PING_TIMEOUT = 20.0
_PING = b"dmrpc-ka"


class _Clock:
    """Deadlines of the running call (the stream's ``lock`` is held throughout)."""

    _sock: socket.socket
    _timeout: float | None           # the socket's timeout now
    _per_call: float | None          # seconds a whole call may take (None: no limit)
    _deadline: float | None = None   # when the running call times out
    _ping_every: float | None = None # keepalive interval (None: no PINGs of ours)
    _ping_out: float | None = None   # when our unanswered PING went out
    _quiet_since: float = 0.0        # when the last call ended, or the last PING was answered

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
        self._quiet_since = time.monotonic()
        self._set_timeout(self._per_call)

    def _tick(self) -> bool:
        """The idle watcher's turn (lock held): PING when due; False once a PING went unanswered."""
        now = time.monotonic()
        if self._ping_out is not None:
            if now - self._ping_out < PING_TIMEOUT:
                return True
            self._dead = ConnectionError(f"the server did not answer a keepalive PING within {PING_TIMEOUT:g} s: "
                                         f"the connection is dead")
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return False
        if now - self._quiet_since >= self._ping_every:
            self._send(frame(PING, 0, 0, _PING))
            self._ping_out = now
        return True

    def _pong(self) -> None:
        """Our PING was answered."""
        self._ping_out, self._quiet_since = None, time.monotonic()

    def _set_timeout(self, seconds: float | None) -> None:
        if seconds != self._timeout:
            self._sock.settimeout(seconds)
            self._timeout = seconds
