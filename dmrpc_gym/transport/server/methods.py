"""The methods a server serves: a table from ``:path`` to how each call on it is handled.

The transport knows no application service: the layer above hands
:class:`~dmrpc_gym.transport.server.protocol.GrpcProtocol` a table of
:class:`Method` entries, and each stream is routed once, when its HEADERS
arrive (the per-message path does not look at it again). A handler answers
each request with one message (``handle(raw)`` awaits it), or, for a
:class:`Method` with ``many=True``, with any number of messages over time
(``handle(raw)`` is an async iterator: server streaming, such as health's
``Watch``). A handler ends its call with a gRPC status by raising
:class:`~dmrpc_gym.transport.frames.StreamError` (``status``, ``message``).

>>> table = {"/pkg.Svc/Call": Method(lambda headers: None), "/pkg.Svc/Probe": Method(lambda headers: None, True)}
>>> served(table)
'/pkg.Svc/Call, /pkg.Svc/Probe'
>>> table["/pkg.Svc/Probe"].without_token, table["/pkg.Svc/Call"].many
(True, False)
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

__all__ = ["Method", "served"]


class Method(NamedTuple):
    """One method: ``handler(headers)`` makes the handler of each call (a
    :class:`~dmrpc_gym.transport.server.stream.StreamHandler`); ``without_token``: served
    without the server's token (health probes, which usually cannot send one); ``many``: the
    handler's ``handle(raw)`` is an async iterator of answers, not one awaited answer."""

    handler: Callable[[Mapping[str, str]], Any]
    without_token: bool = False
    many: bool = False


def served(methods: Mapping[str, Method]) -> str:
    """The paths a server serves, as its UNIMPLEMENTED answers name them."""
    return ", ".join(sorted(methods))
