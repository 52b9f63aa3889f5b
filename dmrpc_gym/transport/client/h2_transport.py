"""Our fast client transport: a :class:`~dmrpc_gym.transport.client.stream.GrpcStream` over TCP, TLS or a Unix socket.

Connecting is the only place the socket is set up (:func:`open_connection`):
TCP_NODELAY, TLS with ALPN ``h2`` (stdlib ``ssl``), the handshake that tells
an HTTP/2 server from anything else, and the keepalive watcher for idle time.
"""
from __future__ import annotations

import functools
import socket
import ssl
from typing import Any

from dmrpc_gym.protocol.wire import METHOD_PATH
from dmrpc_gym.transport import compression as encodings
from dmrpc_gym.transport.base import Unreachable, parse_address
from dmrpc_gym.transport.frames import DEFAULT_MAX_MESSAGE
from dmrpc_gym.transport.client.connection import GrpcConnection
from dmrpc_gym.transport.client.pool import SharedConnections
from dmrpc_gym.transport.client.steady import SteadyLink
from dmrpc_gym.transport.same_host import secret_of, socket_name
from dmrpc_gym.transport.security import client_context
from dmrpc_gym.transport.unix import connect_unix, unix_path

__all__ = ["H2Transport", "open_connection"]

#: Failures to connect that a server still starting explains: none listening yet, or no socket file yet.
_STARTING = (ConnectionRefusedError, ConnectionResetError, FileNotFoundError)


def open_connection(address: str, connect_timeout: float | None, *, tls: Any = None, keepalive: bool = True,
                    ping_every: float | None = None, same_host: bool = False) -> GrpcConnection:
    """An HTTP/2 connection to ``address`` (``host:port`` or ``unix:PATH``), its handshake done.

    ``tls``: None (plain TCP), True, a CA bundle path or an ``ssl.SSLContext``
    (see :mod:`~dmrpc_gym.transport.security`). ``keepalive``: answer the
    server's PINGs while idle (a watcher thread); ``ping_every``: also PING the
    server after that many quiet seconds (:mod:`~dmrpc_gym.transport.client.keepalive`).
    ``same_host``: over plain TCP, move to the Unix socket a dmrpc_gym server on this host says in its
    SETTINGS, where it can be reached (:mod:`~dmrpc_gym.transport.same_host`).
    ``Unreachable`` when nothing answers there (yet); ``ConnectionError`` when
    something does that is not an HTTP/2 server.
    """
    path = unix_path(address)
    host, port = ("localhost", 0) if path is not None else parse_address(address)
    context = client_context(tls)
    if path is not None and context is not None:
        raise ValueError(f"tls= with {address}: a Unix socket is guarded by its file's permissions; "
                         f"connect without TLS")
    try:
        if path is not None:
            sock = connect_unix(path, connect_timeout)
        else:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError as err:
        raise Unreachable(f"cannot reach a dm_env_rpc server at {address}: {err}",
                          starting=isinstance(err, _STARTING)) from None
    try:
        if context is not None:
            try:
                sock = context.wrap_socket(sock, server_hostname=host)
            except ssl.SSLError as err:
                raise ConnectionError(f"the TLS handshake failed: {err}") from None
            if sock.selected_alpn_protocol() != "h2":
                raise ConnectionError(f"the TLS server did not agree to HTTP/2 (ALPN h2); "
                                      f"it chose {sock.selected_alpn_protocol()!r}")
        conn = GrpcConnection(sock, METHOD_PATH, host if path is not None else address,
                              scheme="https" if context is not None else "http")
        conn.handshake()
    except (OSError, ConnectionError) as err:
        sock.close()
        # Closed or reset before HTTP/2 began: a server still starting (or one at its limit).
        kind = Unreachable if isinstance(err, (ConnectionResetError, BrokenPipeError)) else ConnectionError
        raise kind(f"{address} did not answer as a gRPC (HTTP/2) server: {err}") from None
    if same_host and path is None and context is None:
        conn = _moved(conn, address, connect_timeout)
    if keepalive:
        conn.keepalive(ping_every)
    return conn


def _moved(conn: GrpcConnection, address: str, connect_timeout: float | None) -> GrpcConnection:
    """``conn`` (plain TCP, no stream yet), or a connection to the same server over the Unix socket its SETTINGS
    say (:mod:`~dmrpc_gym.transport.same_host`), ``conn`` then closed; ``conn`` where they say none or it
    cannot be reached."""
    secret = secret_of(conn.state.peer.same_host)
    if secret is None:
        return conn
    try:
        sock = connect_unix("\0" + socket_name(secret), connect_timeout)
    except OSError:                          # another host or network namespace: TCP it is
        return conn
    try:
        moved = GrpcConnection(sock, METHOD_PATH, address)
        moved.handshake()
    except (OSError, ConnectionError):
        sock.close()
        return conn
    conn.close()
    moved.same_host = True
    return moved


class H2Transport:
    """A :class:`~dmrpc_gym.transport.base.Transport`: one :class:`GrpcStream
    <dmrpc_gym.transport.client.stream.GrpcStream>` to ``address``, on a connection of its
    own, or on one that ``shared`` (:class:`~dmrpc_gym.transport.client.pool.SharedConnections`)
    holds for that server. The other arguments are :func:`open_connection`'s and
    :meth:`GrpcConnection.open_stream <dmrpc_gym.transport.client.connection.GrpcConnection.open_stream>`'s.
    """

    def __init__(self, address: str, metadata, connect_timeout: float | None, *, tls=None,
                 compression: str | None = None, max_message_size: int = DEFAULT_MAX_MESSAGE,
                 keepalive: bool = True, ping_every: float | None = None,
                 shared: SharedConnections | None = None, same_host: bool = False):
        encodings.check_encoding(compression)
        metadata = tuple(metadata or ())

        def connect() -> GrpcConnection:
            return open_connection(address, connect_timeout, tls=tls, keepalive=keepalive, ping_every=ping_every,
                                   same_host=same_host)

        if shared is None:
            self._stream = connect().open_stream(metadata, compression, max_message_size)
        else:
            key = (address, tls if isinstance(tls, (str, bool, type(None))) else id(tls), keepalive, ping_every,
                   same_host)
            self._stream = shared.open_stream(key, connect, metadata, compression, max_message_size)
        conn = self._stream.connection      # its calls bound to this stream: no call in between
        self.write = functools.partial(conn.write, self._stream)
        self.read = functools.partial(conn.read, self._stream)
        self.answer_ready = functools.partial(conn.answer_ready, self._stream)
        self.fileno = conn.fileno
        #: The stream's steady-state exchange (:mod:`~dmrpc_gym.transport.client.steady`).
        self.steady = SteadyLink(self._stream)

    def keep_pinging(self, every: float) -> None:
        """From now on, PING the server after ``every`` seconds in which nothing came (idle or
        waiting for an answer): one of ours, which permits it (see :mod:`~dmrpc_gym.transport.client.keepalive`)."""
        self._stream.connection.keepalive(every)

    @property
    def initial_metadata(self) -> dict[str, str]:
        return self._stream.initial_metadata

    @property
    def same_host(self) -> bool:
        """Whether the stream's connection moved to a dmrpc_gym server's Unix socket (see :func:`open_connection`)."""
        return self._stream.connection.same_host

    @property
    def messages_sent(self) -> int:
        return self._stream.messages_sent

    @property
    def broken(self) -> bool:
        return self._stream.broken

    def close(self) -> None:
        self._stream.close()
