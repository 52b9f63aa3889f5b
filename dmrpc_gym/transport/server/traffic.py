"""What a server's connections carried and refused, counted for its operator (metrics, ``dmrpc-gym status``).

One :class:`Traffic` per server, shared by all its connections
(:class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol`), all on the server's event
loop: plain integers, so that counting costs an addition (bytes are counted on every read
and write). The application reads them when asked, it is never called back. The log line
that says connections are being refused is the server's too (at most one a minute each):
a server's refusals never silence another's in the same process.

>>> traffic = Traffic()
>>> traffic.refuse("max_streams"); traffic.ended(8); traffic.ended(8)
>>> traffic.refused, traffic.statuses
({'max_streams': 1}, {8: 2})
"""
from __future__ import annotations

import logging

from dmrpc_gym.transport.limits import Refusals

__all__ = ["Traffic"]

log = logging.getLogger("dmrpc_gym.server")


class Traffic:
    """Bytes in and out, gRPC statuses other than OK that ended streams, and refusals by limit."""

    __slots__ = ("bytes_in", "bytes_out", "statuses", "refused", "connections_refused")

    def __init__(self) -> None:
        self.bytes_in = 0                       # read from the sockets (TLS: the decrypted bytes)
        self.bytes_out = 0                      # handed to the sockets
        self.statuses: dict[int, int] = {}      # gRPC status code -> streams ended with it (OK left out)
        self.refused: dict[str, int] = {}       # the limit's name (as ConnectionLimits names it) -> refusals
        #: Says, at most once a minute, that connections past the limit are being closed.
        self.connections_refused = Refusals(log, "refusing connections: %d are open, the limit "
                                                 "(ConnectionLimits.max_connections, serve --max-connections); "
                                                 "%d refused in the last minute")

    def refuse(self, limit: str) -> None:
        """Count one refusal under ``limit`` (``"max_connections"``, ``"max_streams"``...)."""
        self.refused[limit] = self.refused.get(limit, 0) + 1

    def ended(self, status: int) -> None:
        """Count one stream ended with gRPC ``status`` (not OK)."""
        self.statuses[status] = self.statuses.get(status, 0) + 1
