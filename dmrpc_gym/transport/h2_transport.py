"""Our fast client transport: a :class:`~dmrpc_gym.transport.h2_client.GrpcStream` over TCP, TLS or a Unix socket.

Connecting is the only place the socket is set up: TCP_NODELAY, TLS with ALPN
``h2`` (stdlib ``ssl``), the handshake that tells an HTTP/2 server from
anything else, and the keepalive watcher for idle time.
"""
from __future__ import annotations

import socket
import ssl

from dmrpc_gym.protocol.wire import METHOD_PATH
from dmrpc_gym.transport import compression as encodings
from dmrpc_gym.transport.base import Unreachable, parse_address
from dmrpc_gym.transport.frames import DEFAULT_MAX_MESSAGE
from dmrpc_gym.transport.h2_client import GrpcStream
from dmrpc_gym.transport.security import client_context
from dmrpc_gym.transport.unix import connect_unix, unix_path

__all__ = ["H2Transport"]


class H2Transport:
    """A :class:`~dmrpc_gym.transport.base.Transport`: :class:`GrpcStream` over TCP or TLS to
    ``address`` (``host:port``), or over the Unix socket of a ``unix:PATH`` address.

    ``tls``: None (plain TCP), True, a CA bundle path or an ``ssl.SSLContext``
    (see :mod:`~dmrpc_gym.transport.security`). ``keepalive``: answer the
    server's PINGs while idle (a watcher thread); ``ping_every``: also PING the
    server after that many quiet seconds (:mod:`~dmrpc_gym.transport.h2_idle`).
    """

    def __init__(self, address: str, metadata, connect_timeout: float | None, *, tls=None,
                 compression: str | None = None, max_message_size: int = DEFAULT_MAX_MESSAGE,
                 keepalive: bool = True, ping_every: float | None = None):
        path = unix_path(address)
        host, port = ("localhost", 0) if path is not None else parse_address(address)
        context = client_context(tls)
        if path is not None and context is not None:
            raise ValueError(f"tls= with {address}: a Unix socket is guarded by its file's permissions; "
                             f"connect without TLS")
        encodings.check_encoding(compression)
        try:
            if path is not None:
                sock = connect_unix(path, connect_timeout)
            else:
                sock = socket.create_connection((host, port), timeout=connect_timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as err:
            raise Unreachable(f"cannot reach a dm_env_rpc server at {address}: {err}") from None
        try:
            if context is not None:
                try:
                    sock = context.wrap_socket(sock, server_hostname=host)
                except ssl.SSLError as err:
                    raise ConnectionError(f"the TLS handshake failed: {err}") from None
                if sock.selected_alpn_protocol() != "h2":
                    raise ConnectionError(f"the TLS server did not agree to HTTP/2 (ALPN h2); "
                                          f"it chose {sock.selected_alpn_protocol()!r}")
            self._stream = GrpcStream(sock, METHOD_PATH, host if path is not None else address, tuple(metadata or ()),
                                      scheme="https" if context is not None else "http",
                                      compression=compression, max_message_size=max_message_size)
            self._stream.handshake()
        except (OSError, ConnectionError) as err:
            sock.close()
            # Closed or reset before HTTP/2 began: a server still starting (or one at its limit).
            kind = Unreachable if isinstance(err, (ConnectionResetError, BrokenPipeError)) else ConnectionError
            raise kind(f"{address} did not answer as a gRPC (HTTP/2) server: {err}") from None
        if keepalive:
            self._stream.keepalive(ping_every)
        self.write = self._stream.write
        self.read = self._stream.read
        self.answer_ready = self._stream.answer_ready
        self.fileno = self._stream.fileno

    @property
    def initial_metadata(self) -> dict[str, str]:
        return self._stream.initial_metadata

    @property
    def messages_sent(self) -> int:
        return self._stream.messages_sent

    @property
    def broken(self) -> bool:
        return self._stream.broken

    def close(self) -> None:
        self._stream.close()
