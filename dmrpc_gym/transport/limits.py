"""What one connection may cost the server: its bounds on memory, CPU and time, with their defaults.

The principle: every byte a peer sends buys a bounded amount of memory, CPU
and time, before and after authentication. Each bound is reported to the peer
in HTTP/2's or gRPC's own way where the protocol has one (a SETTINGS value, a
GOAWAY code, a gRPC status). The defaults are meant never to need touching;
``Server(limits=ConnectionLimits(...))`` changes them.

>>> limits = ConnectionLimits(idle_timeout=60)
>>> limits.idle_timeout, limits.handshake_timeout, limits.max_streams
(60.0, 10.0, 256)
>>> ConnectionLimits(handshake_timeout=0)
Traceback (most recent call last):
...
ValueError: ConnectionLimits.handshake_timeout must be a positive number of seconds, got 0
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, fields

__all__ = ["ConnectionLimits", "Refusals"]


@dataclass(frozen=True)
class ConnectionLimits:
    """The server's per-connection bounds (seconds for times).

    Attributes:
        max_connections: connections open at once. Past it a new connection is
            accepted and closed at once (logged, at most once a minute), and the
            listener goes on accepting.
        max_streams: streams open at once on one connection, advertised as
            SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 recommends no less than
            100); a stream past it is refused (RST_STREAM REFUSED_STREAM, which
            a client may retry).
        handshake_timeout: the TLS handshake and the client's HTTP/2 preface must
            each be done within this; else the connection is closed.
        frame_timeout: a frame, or a header block (HEADERS + CONTINUATION), that
            has begun must be whole within this; else GOAWAY and close.
        idle_timeout: a connection with no open stream for this long is closed
            (GOAWAY NO_ERROR). A stream held open, as every dm_env_rpc client
            holds its one, keeps a connection in use however quiet it is.
        max_resets: streams the client may reset (RST_STREAM before its
            answer) in any one second; past it, GOAWAY ENHANCE_YOUR_CALM (the
            HTTP/2 "Rapid Reset" defence).
        min_ping_interval: PINGs closer together than this are strikes; past
            ``max_ping_strikes`` the connection ends with GOAWAY ENHANCE_YOUR_CALM
            and debug data ``too_many_pings``, as grpc servers do. Answering a
            request clears the strikes.
        max_ping_strikes: see ``min_ping_interval``.
    """

    max_connections: int = 1024
    max_streams: int = 256
    handshake_timeout: float = 10.0
    frame_timeout: float = 10.0
    idle_timeout: float = 300.0
    max_resets: int = 200
    min_ping_interval: float = 10.0
    max_ping_strikes: int = 2

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            whole = field.type == "int"
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
                    or (whole and value != int(value))):
                what = "a whole number >= 1" if whole else "a positive number of seconds"
                raise ValueError(f"ConnectionLimits.{field.name} must be {what}, got {value!r}")
            object.__setattr__(self, field.name, int(value) if whole else float(value))


class Refusals:
    """A log of refusals that says at most one line a minute, however fast they come.

    >>> import logging
    >>> refusals = Refusals(logging.getLogger("demo"), "%d allowed, %d refused this minute")
    >>> [refusals.note(8) for _ in range(3)], refusals.count
    ([True, False, False], 2)
    """

    def __init__(self, log: logging.Logger, message: str, every: float = 60.0):
        self._log, self._message, self._every = log, message, every
        self._last = float("-inf")
        self.count = 0        # refusals since the last line said

    def note(self, limit: int) -> bool:
        """Count one refusal under ``limit``; whether this one was logged."""
        self.count += 1
        now = time.monotonic()
        if now - self._last < self._every:
            return False
        self._log.warning(self._message, limit, self.count)
        self._last, self.count = now, 0
        return True
