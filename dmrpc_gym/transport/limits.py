"""What one connection may cost the server: its bounds on memory, CPU and time, with their defaults.

The principle: every byte a peer sends buys a bounded amount of memory, CPU
and time, before and after authentication. Each bound is reported to the peer
in HTTP/2's or gRPC's own way where the protocol has one (a SETTINGS value, a
GOAWAY code, a gRPC status). The defaults are meant never to need touching;
``Server(limits=ConnectionLimits(...))`` changes them.

>>> limits = ConnectionLimits(idle_timeout=60)
>>> limits.idle_timeout, limits.handshake_timeout
(60.0, 10.0)
>>> ConnectionLimits(handshake_timeout=0)
Traceback (most recent call last):
...
ValueError: ConnectionLimits.handshake_timeout must be a positive number of seconds, got 0
"""
from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["ConnectionLimits"]


@dataclass(frozen=True)
class ConnectionLimits:
    """The server's per-connection bounds (seconds for times).

    Attributes:
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
