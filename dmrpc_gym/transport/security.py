"""TLS contexts (stdlib ``ssl``, ALPN ``h2``) for both ends, and the shared-secret bearer token.

``tls=`` on the client: ``True`` (the system's CA store), a CA bundle path
(a self-signed server certificate, say), or an ``ssl.SSLContext``. On the
server: ``(certfile, keyfile)`` or an ``ssl.SSLContext``. A token travels as
call metadata ``authorization: Bearer <token>``; a server given one answers
any other call ``UNAUTHENTICATED``.

>>> client_context(None) is None, client_context(True).check_hostname
(True, True)
>>> token_metadata("s3cret")
(('authorization', 'Bearer s3cret'),)
"""
from __future__ import annotations

import hmac
import os
import ssl
from typing import Any

__all__ = ["client_context", "server_context", "token_metadata", "token_matches", "TOKEN_ENV"]

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
