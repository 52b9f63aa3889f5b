"""The named interface between a client connection and the stream that carries it.

A :class:`Transport` carries one gRPC bidirectional stream: whole request
messages out, whole answer messages in, in order. Two implement it:
:class:`~dmrpc_gym.transport.h2_transport.H2Transport` (our own HTTP/2 client on
one socket, the fast path) and
:class:`~dmrpc_gym.transport.grpcio_client.GrpcioTransport` (grpcio's stream,
for a caller's ``grpc.Channel``). The dm_env_rpc envelope is the caller's business.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Transport", "StreamEnded", "Unreachable", "parse_address"]


class StreamEnded(Exception):
    """The server ended the stream; ``status``/``message`` are its gRPC trailers.

    >>> StreamEnded(12, "unknown method").status
    12
    """

    def __init__(self, status: int | None, message: str):
        self.status = status
        self.message = message
        super().__init__(message)


class Unreachable(ConnectionError):
    """Nothing answered at the address yet: the connection was refused, or reset or closed before
    HTTP/2 began. A server that is still starting looks like this, so it is worth retrying.

    >>> isinstance(Unreachable("refused"), ConnectionError)
    True
    """


@runtime_checkable
class Transport(Protocol):
    """One client stream of gRPC messages.

    ``write`` and ``read`` raise :class:`StreamEnded` once the server has ended
    the stream, ``socket.timeout`` when ``read`` waited ``timeout`` seconds in
    vain, and ``OSError`` when the connection failed.
    """

    #: Messages committed to the stream so far (an interrupted write may still count).
    messages_sent: int
    #: True while an interrupted write left a message half-sent: the stream is unusable.
    broken: bool
    #: The server's response headers (gRPC initial metadata), empty until they have come.
    initial_metadata: dict[str, str]

    def write(self, *parts: bytes | memoryview) -> None:
        """Send the concatenation of ``parts`` as one gRPC message (large parts are not copied to join them)."""

    def read(self, timeout: float | None) -> bytes:
        """The next answer message, waiting at most ``timeout`` seconds (None: no limit)."""

    def close(self) -> None:
        """End the stream; never blocks for long."""


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` / ``"[::1]:port"`` -> ``(host, port)``; ``ValueError`` naming it otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"address {address!r} is not of the form host:port (or unix:PATH)")
    return host.strip("[]"), int(port)
