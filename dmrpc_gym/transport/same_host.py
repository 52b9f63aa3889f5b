"""Same host: a dmrpc_gym server's Unix socket for its own clients on its machine, and how they find it.

A client and a server on one host that talk over loopback TCP pay TCP's path on every step (the segments,
their acknowledgements, the loopback device's softirq), which a Unix socket does not (:mod:`~dmrpc_gym.transport.unix`).
A dmrpc_gym server that offers shared memory (:mod:`~dmrpc_gym.transport.shared_memory`) also listens on a Unix
socket in Linux's abstract namespace (no file, no fixed path: ``dmrpc_gym-h2-`` and 128 random bits) and says
its name in the SETTINGS frame it sends first, as four settings of a private identifier range
(:data:`~dmrpc_gym.transport.frames.SETTINGS_SAME_HOST`, 0xF0D0-0xF0D3 in the range IANA keeps for
experiments): RFC 9113 (6.5.2) makes every peer ignore settings it does not know, so any other client sees
plain HTTP/2. Our client, connected over plain TCP (not TLS) with shared memory asked for, reads them in its
handshake, connects to that socket (which only a process on the same host, in the same network namespace,
can reach), completes the handshake there and closes the TCP connection; its streams then go over the Unix
socket, with the same metadata (the token, where the server has one, is checked there as on TCP). Where the
socket cannot be reached, the TCP connection stays, as it would with any other server.

>>> secret = bytes(range(16))
>>> pairs = settings(secret)
>>> hex(pairs[0][0]), secret_of(dict(pairs)) == secret, socket_name(secret)[:16]
('0xf0d0', True, 'dmrpc_gym-h2-000')
"""
from __future__ import annotations

import asyncio
import secrets
from typing import Any, Callable, Mapping

from dmrpc_gym.transport.frames import SETTINGS_SAME_HOST

__all__ = ["settings", "secret_of", "socket_name", "listen"]

_PREFIX = "dmrpc_gym-h2-"
_WORDS = 4                     # 128 bits in four 32-bit settings


def settings(secret: bytes) -> tuple[tuple[int, int], ...]:
    """The SETTINGS pairs that say the Unix socket of ``secret`` (16 bytes)."""
    return tuple((SETTINGS_SAME_HOST + i, int.from_bytes(secret[4 * i:4 * i + 4], "big")) for i in range(_WORDS))


def secret_of(peer: Mapping[int, int]) -> bytes | None:
    """The secret a server's settings (identifier -> value, those of the private range) say; None where they
    say none, or not all of it."""
    words = [peer.get(SETTINGS_SAME_HOST + i) for i in range(_WORDS)]
    if any(word is None for word in words):
        return None
    return b"".join(word.to_bytes(4, "big") for word in words)


def socket_name(secret: bytes) -> str:
    """The abstract socket's name for ``secret`` (without the leading NUL of the abstract namespace)."""
    return _PREFIX + secret.hex()


async def listen(protocol: Callable[[], Any]) -> tuple[Any, bytes]:
    """Serve ``protocol`` on a new abstract Unix socket: ``(the asyncio server, its secret)``; ``OSError`` where
    the platform has no abstract namespace (not Linux)."""
    secret = secrets.token_bytes(16)
    server = await asyncio.get_running_loop().create_unix_server(protocol, "\0" + socket_name(secret))
    return server, secret
