"""The named interface between a client connection and the stream that carries it.

A :class:`Transport` carries one gRPC bidirectional stream: whole request
messages out, whole answer messages in, in order. Two implement it:
:class:`~dmrpc_gym.transport.client.h2_transport.H2Transport` (our own HTTP/2 client on
one socket, the steady path) and
:class:`~dmrpc_gym.transport.client.grpcio_transport.GrpcioTransport` (grpcio's stream,
for a caller's ``grpc.Channel``). The dm_env_rpc envelope is the caller's business.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Protocol, runtime_checkable

from dmrpc_gym.transport.unix import unix_path

__all__ = ["STEADY_STEP_ENV", "Transport", "StreamEnded", "Unreachable", "parse_address", "check_address", "ADDRESS_FORMS"]

#: The environment variable that, set to ``0``, turns the steady-state step path off (issue 32: client
#: steps, :mod:`dmrpc_gym.client.steady_step`; server answers, :mod:`dmrpc_gym.transport.server.steady`),
#: so that the general path, the reference, can be measured and tested alone.
STEADY_STEP_ENV = "DMRPC_STEADY_STEP"

#: The address forms our client takes, as a refusal lists them.
ADDRESS_FORMS = "host:port, [IPv6]:port, unix:PATH or unix:///ABSOLUTE/PATH"
#: gRPC's own target schemes, which grpcio's channels (``credentials=``) take besides.
GRPC_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix-abstract:", "vsock:")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_HOST = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Za-z:.%]+\]")   # a name, an IPv4 address, or [IPv6]
_MAX_PORT = 65535


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

    ``starting``: whether a server still starting explains it (refused, reset, no socket file
    yet); False for a cause that waiting rarely cures (a name that does not resolve, no route).

    >>> isinstance(Unreachable("refused"), ConnectionError), Unreachable("no such name", starting=False).starting
    (True, False)
    """

    def __init__(self, message: str, starting: bool = True):
        super().__init__(message)
        self.starting = starting


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
    """``"host:port"`` / ``"[::1]:port"`` -> ``(host, port)``; ``ValueError`` naming the accepted forms otherwise.

    >>> parse_address("[::1]:5")
    ('::1', 5)
    >>> parse_address("http://127.0.0.1:40611")
    Traceback (most recent call last):
    ...
    ValueError: address 'http://127.0.0.1:40611' has a scheme (http://), which is not part of an address here: give '127.0.0.1:40611' (accepted: host:port, [IPv6]:port, unix:PATH or unix:///ABSOLUTE/PATH)
    """
    scheme = _SCHEME.match(address)
    if scheme:
        bare = address[scheme.end():].lstrip("/").split("/")[0]
        raise ValueError(f"address {address!r} has a scheme ({scheme.group(1)}://), which is not part of an "
                         f"address here: give {bare!r} (accepted: {ADDRESS_FORMS})")
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > _MAX_PORT or not (_HOST.fullmatch(host) or _ipv6(host)):
        raise ValueError(f"address {address!r} is not of the form host:port (accepted: {ADDRESS_FORMS})")
    return host.strip("[]"), int(port)


def _ipv6(host: str) -> bool:
    """Whether ``host`` is a bare IPv6 address (``::`` as ``serve --host ::`` binds it)."""
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def check_address(address: str, grpc_targets: bool = False) -> None:
    """``ValueError`` naming the accepted forms unless ``address`` is one (``grpc_targets``: gRPC's
    own ``dns:``-style targets too, for grpcio's channels), before anything is tried.

    >>> check_address("unix:/tmp/w.sock"); check_address("dns:///sim0:10000", grpc_targets=True)
    """
    if not isinstance(address, str):
        raise TypeError(f"address must be a string ({ADDRESS_FORMS}), got {address!r}")
    if unix_path(address) is None and not (grpc_targets and address.startswith(GRPC_SCHEMES)):
        parse_address(address)
