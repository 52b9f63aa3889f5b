"""What one connection may cost the server: its bounds on memory, CPU and time, with their defaults.

The principle: every byte a peer sends buys a bounded amount of memory, CPU
and time, before and after authentication. Each bound is reported to the peer
in HTTP/2's or gRPC's own way where the protocol has one (a SETTINGS value, a
GOAWAY code, a gRPC status). The defaults are meant never to need touching;
``Server(limits=ConnectionLimits(...))`` changes them.

>>> limits = ConnectionLimits(idle_timeout=60)
>>> limits.idle_timeout, limits.handshake_timeout, limits.max_streams, limits.max_header_list_size
(60.0, 10.0, 256, 16384)
>>> limits.min_ping_interval, limits.max_ping_strikes         # gRPC's servers' defaults
(300.0, 2)
>>> ConnectionLimits(handshake_timeout=0)
Traceback (most recent call last):
...
ValueError: ConnectionLimits.handshake_timeout must be a positive number of seconds, got 0
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, fields

__all__ = ["ConnectionLimits", "Refusals", "KEEPALIVE_PING", "MIN_KEEPALIVE", "IDLE_PING_INTERVAL", "LINGER_BYTES"]


#: The client keepalive our own client sends (``keepalive=``): its PING's payload, and the
#: shortest interval it may be given (grpc clients' floor too). Our server judges PINGs with
#: this payload against this interval when ``min_ping_interval`` is longer, so our client's
#: keepalive is never punished; any other PING is judged as gRPC's servers judge it.
KEEPALIVE_PING = b"dmrpc-ka"
MIN_KEEPALIVE = 10.0
#: The interval PINGs must keep on a connection with no open stream: gRPC's servers allow one
#: per 2 hours there (RFC 1122's TCP keepalive), unless told to permit PINGs without streams.
IDLE_PING_INTERVAL = 2 * 3600.0
#: What a connection ended by GOAWAY for the peer's own error (a flood, a malformed frame) is still
#: read for, and dropped, before the server stops reading it: enough for the frames a peer had in
#: flight, so that its kernel does not reset the connection before the GOAWAY is read. A CONTINUATION
#: flood went on being read, 2.5 GB of it (1.2 s of CPU), during the second the connection lingers.
LINGER_BYTES = 1 << 20


@dataclass(frozen=True)
class ConnectionLimits:
    """The server's per-connection bounds (seconds for times), each with gRPC's equivalent.

    Attributes:
        max_connections: connections open at once. Past it a new connection is
            accepted and closed at once (logged, at most once a minute), and the
            listener goes on accepting. C-core: ``grpc.max_allowed_incoming_connections``;
            grpc-go: none (a ``net.Listener`` of one's own, e.g. ``netutil.LimitListener``).
        max_streams: streams open at once on one connection, advertised as
            SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 recommends no less than
            100); a stream past it is refused (RST_STREAM REFUSED_STREAM, which
            a client may retry). grpc-go: ``grpc.MaxConcurrentStreams``; C-core:
            ``grpc.max_concurrent_streams``.
        handshake_timeout: the TLS handshake and the client's HTTP/2 preface must
            each be done within this; else the connection is closed. grpc-go:
            ``grpc.ConnectionTimeout``; C-core: ``grpc.server_handshake_timeout_ms``
            (both 120 s by default).
        frame_timeout: a frame, or a header block (HEADERS + CONTINUATION), that
            has begun must be whole within this; else GOAWAY and close. Neither
            grpc-go nor C-core has such an option (they bound such a block by size only).
        idle_timeout: a connection with no open stream for this long is closed
            (GOAWAY NO_ERROR). A stream held open, as every dm_env_rpc client
            holds its one, keeps a connection in use however quiet it is.
            grpc-go: ``keepalive.ServerParameters.MaxConnectionIdle``; C-core:
            ``grpc.max_connection_idle_ms`` (both unlimited by default).
        max_resets: streams the client may reset (RST_STREAM before its
            answer) in any one second; past it, GOAWAY ENHANCE_YOUR_CALM (the
            HTTP/2 "Rapid Reset" defence). grpc-go and C-core bound Rapid Reset
            internally, with no option.
        min_ping_interval: while a stream is open, PINGs closer together than this
            are strikes; past ``max_ping_strikes`` the connection ends with GOAWAY
            ENHANCE_YOUR_CALM and debug data ``too_many_pings``. As in gRPC's
            servers, sending HEADERS or DATA clears the strikes and the last
            PING's time (so the PINGs a client sends as data arrives, gRPC's
            BDP probes, are never strikes), and with no stream open PINGs must be
            :data:`IDLE_PING_INTERVAL` apart. grpc-go:
            ``keepalive.EnforcementPolicy.MinTime``; C-core:
            ``grpc.http2.min_ping_interval_without_data_ms`` (both 5 minutes).
        max_ping_strikes: see ``min_ping_interval``. C-core:
            ``grpc.http2.max_ping_strikes``; grpc-go: fixed at 2, no option.
        max_header_list_size: the largest request header list (bytes as RFC 9113
            counts them: names, values and 32 per field), advertised as
            SETTINGS_MAX_HEADER_LIST_SIZE. A larger list ends its stream
            (RESOURCE_EXHAUSTED); a header block whose compressed bytes pass it is
            not buffered further, and ends the connection (GOAWAY
            ENHANCE_YOUR_CALM). grpc-go: ``grpc.MaxHeaderListSize``; C-core:
            ``grpc.absolute_max_metadata_size`` (16 KiB; its soft limit
            ``grpc.max_metadata_size`` is 8 KiB).
    """

    max_connections: int = 1024
    max_streams: int = 256
    handshake_timeout: float = 10.0
    frame_timeout: float = 10.0
    idle_timeout: float = 300.0
    max_resets: int = 200
    min_ping_interval: float = 300.0
    max_ping_strikes: int = 2
    max_header_list_size: int = 16 << 10

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
