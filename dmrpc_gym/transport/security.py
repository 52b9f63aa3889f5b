"""TLS contexts (stdlib ``ssl``, ALPN ``h2``) for both ends, and the shared-secret bearer token.

``tls=`` on the client: ``True`` (the system's CA store), a CA bundle path
(a self-signed server certificate, say), or an ``ssl.SSLContext``. On the
server: ``(certfile, keyfile)`` or an ``ssl.SSLContext``; its connections are
served behind :func:`behind_tls`, which reads a pending handshake into
:data:`HANDSHAKE_READ` bytes (asyncio's own SSL protocol reads into 256 KiB from
the first byte, so each connection that never finishes its handshake held
314 KB until the handshake deadline). A token travels as
call metadata ``authorization: Bearer <token>``; a server given one answers
any other call ``UNAUTHENTICATED``.

>>> client_context(None) is None, client_context(True).check_hostname
(True, True)
>>> token_metadata("s3cret")
(('authorization', 'Bearer s3cret'),)
"""
from __future__ import annotations

import asyncio
import hmac
import os
import ssl
from asyncio import sslproto
from typing import Any, Callable

__all__ = ["client_context", "server_context", "behind_tls", "token_metadata", "token_matches", "TOKEN_ENV",
           "HANDSHAKE_READ"]

#: The environment variable ``dmrpc-gym serve`` reads a token from when ``--token`` is not given.
TOKEN_ENV = "DMRPC_GYM_TOKEN"
_ALPN = ["h2"]


def client_context(tls: Any) -> ssl.SSLContext | None:
    """The client's ``SSLContext`` for ``tls`` (None/False: plain TCP); ``TypeError`` naming bad input."""
    if tls is None or tls is False:
        return None
    if tls is True:
        context = ssl.create_default_context()
    elif isinstance(tls, (str, os.PathLike)):
        context = ssl.create_default_context(cafile=os.fspath(tls))
    elif isinstance(tls, ssl.SSLContext):
        context = tls
    else:
        raise TypeError(f"tls={tls!r}; expected True, a CA bundle path or an ssl.SSLContext")
    context.set_alpn_protocols(_ALPN)
    return context


def server_context(tls: Any) -> ssl.SSLContext | None:
    """The server's ``SSLContext`` for ``tls`` (None: plain TCP): ``(certfile, keyfile)`` or a context."""
    if tls is None:
        return None
    if isinstance(tls, ssl.SSLContext):
        context = tls
    elif isinstance(tls, (tuple, list)) and len(tls) == 2:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(os.fspath(tls[0]), os.fspath(tls[1]))
    else:
        raise TypeError(f"tls={tls!r}; expected (certfile, keyfile) or an ssl.SSLContext")
    context.set_alpn_protocols(_ALPN)
    return context


#: What a server's TLS connection reads at a time until its handshake is done: a handshake's
#: records come a few KB at a time (the transport reads again while more is waiting).
HANDSHAKE_READ = 4 << 10


class _HandshakeFirst(sslproto.SSLProtocol):
    """asyncio's SSL protocol, lean until its handshake is done: it reads into
    :data:`HANDSHAKE_READ` bytes (asyncio's own 256 KiB once the handshake is done), lets OpenSSL
    make its handshake buffers only once the client's first bytes came, and makes the application's
    protocol (``new_protocol()``) only for a connection whose handshake succeeded."""

    max_size = HANDSHAKE_READ

    def __init__(self, new_protocol: Callable[[], asyncio.BaseProtocol], context: ssl.SSLContext,
                 handshake_timeout: float):
        super().__init__(asyncio.get_running_loop(), asyncio.Protocol(), context, None, server_side=True,
                         ssl_handshake_timeout=handshake_timeout)
        self._new_protocol = new_protocol

    def _do_handshake(self):
        if self._incoming.pending:     # else nothing came yet (the handshake deadline runs already)
            super()._do_handshake()

    def _on_handshake_complete(self, handshake_exc):
        if handshake_exc is None:
            self.max_size = sslproto.SSLProtocol.max_size    # the next read grows the buffer
            self._set_app_protocol(self._new_protocol())
        self._new_protocol = None
        super()._on_handshake_complete(handshake_exc)


def behind_tls(new_protocol: Callable[[], asyncio.BaseProtocol], context: ssl.SSLContext | None,
               handshake_timeout: float) -> Callable[[], asyncio.BaseProtocol]:
    """A server's protocol factory whose protocols are served behind TLS (``context``; None: the
    factory itself), each ending its connection when the handshake has not ended within
    ``handshake_timeout`` seconds: what ``loop.create_server(..., ssl=context,
    ssl_handshake_timeout=...)`` makes, but holding a few KB while the handshake is pending."""
    if context is None:
        return new_protocol
    return lambda: _HandshakeFirst(new_protocol, context, handshake_timeout)


def token_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying ``token`` (none for None)."""
    if token is None:
        return ()
    if not isinstance(token, str) or not token or any(c in token for c in "\r\n"):
        raise ValueError("token= must be a non-empty string on one line")
    return (("authorization", f"Bearer {token}"),)


def token_matches(headers: dict[str, str], token: str) -> bool:
    """Whether a request's headers carry ``token`` (compared in constant time)."""
    given = headers.get("authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())
