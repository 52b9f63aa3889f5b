"""The status codes the server answers failed requests with, as raisable errors.

Server code raises :class:`~dmrpc_gym.protocol.errors.DmRpcError`; the service turns it
into the ``error`` payload of the response (``google.rpc.Status``: the code and
the message, verbatim) and keeps the stream open. One refusal ends the stream instead:
:func:`draining`, a new sequence asked of a server that drains (its client is to go elsewhere).

>>> err = invalid_argument("unknown setting 'speed'")
>>> err.code_name, err.message
('INVALID_ARGUMENT', "unknown setting 'speed'")
>>> ended = draining("episodes")
>>> ended.status.name, str(ended).split(":")[0]
('UNAVAILABLE', 'this server is draining (Server.drain(), or SIGTERM to dmrpc-gym serve)')
"""
from __future__ import annotations

from typing import Callable

import grpc

from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.transport import GrpcStatus, StreamError

__all__ = [
    "code", "invalid_argument", "not_found", "permission_denied", "failed_precondition",
    "deadline_exceeded", "unimplemented", "internal", "resource_exhausted", "unavailable", "drain_notice",
    "draining",
]


def code(status: grpc.StatusCode) -> int:
    """The numeric ``google.rpc.Code`` of a ``grpc.StatusCode``."""
    return status.value[0]


def _error(status: grpc.StatusCode, when: str) -> Callable[[str], DmRpcError]:
    def make(message: str) -> DmRpcError:
        return DmRpcError(code(status), message)

    make.__name__ = make.__qualname__ = status.name.lower()
    make.__doc__ = f"A ``{status.name}`` error: {when}."
    return make


invalid_argument = _error(grpc.StatusCode.INVALID_ARGUMENT, "a malformed request, a bad setting, action or property value")
not_found = _error(grpc.StatusCode.NOT_FOUND, "an unknown world or property")
permission_denied = _error(grpc.StatusCode.PERMISSION_DENIED, "a property that may not be read or written")
failed_precondition = _error(grpc.StatusCode.FAILED_PRECONDITION,
                             "a request the connection's state does not allow (step before join, join twice...)")
deadline_exceeded = _error(grpc.StatusCode.DEADLINE_EXCEEDED, "a multi-agent wait that saw no progress in time")
unimplemented = _error(grpc.StatusCode.UNIMPLEMENTED, "a request payload or extension the server does not speak")
resource_exhausted = _error(grpc.StatusCode.RESOURCE_EXHAUSTED, "a server limit reached (worlds in all, or per connection)")
unavailable = _error(grpc.StatusCode.UNAVAILABLE, "the server is draining: it creates no new worlds")
internal = _error(grpc.StatusCode.INTERNAL, "the environment itself raised")


def drain_notice(what: str) -> str:
    """What a draining server says when it refuses to start ``what`` (new worlds, episodes): that it
    drains, what made it drain, and that the running episodes go on."""
    return (f"this server is draining (Server.drain(), or SIGTERM to dmrpc-gym serve): it starts no new "
            f"{what}; its running episodes go on until they end. Connect to another server")


def draining(what: str) -> StreamError:
    """The stream's end with ``UNAVAILABLE`` (:func:`drain_notice`): a new sequence (episode) asked of
    a draining server. The stream ends, so its agent leaves and the drain need not wait for it, and
    a client made with ``reconnect=True`` moves on to the next address on its list."""
    return StreamError(GrpcStatus.UNAVAILABLE, drain_notice(what))
