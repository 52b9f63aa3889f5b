"""The status codes the server answers failed requests with, as raisable errors.

Server code raises :class:`~dmrpc_gym.protocol.errors.DmRpcError`; the service turns it
into the ``error`` payload of the response (``google.rpc.Status``: the code and
the message, verbatim) and keeps the stream open.

>>> err = invalid_argument("unknown setting 'speed'")
>>> err.code_name, err.message
('INVALID_ARGUMENT', "unknown setting 'speed'")
"""
from __future__ import annotations

import grpc

from dmrpc_gym.protocol.errors import DmRpcError

__all__ = [
    "code", "invalid_argument", "not_found", "permission_denied", "failed_precondition",
    "deadline_exceeded", "unimplemented", "internal",
]


def code(status: grpc.StatusCode) -> int:
    """The numeric ``google.rpc.Code`` of a ``grpc.StatusCode``."""
    return status.value[0]


def invalid_argument(message: str) -> DmRpcError:
    """A malformed request, a bad setting, action or property value."""
    return DmRpcError(code(grpc.StatusCode.INVALID_ARGUMENT), message)


def not_found(message: str) -> DmRpcError:
    """An unknown world or property."""
    return DmRpcError(code(grpc.StatusCode.NOT_FOUND), message)


def permission_denied(message: str) -> DmRpcError:
    """A property that may not be read or written."""
    return DmRpcError(code(grpc.StatusCode.PERMISSION_DENIED), message)


def failed_precondition(message: str) -> DmRpcError:
    """A request the connection's state does not allow (step before join, join twice...)."""
    return DmRpcError(code(grpc.StatusCode.FAILED_PRECONDITION), message)


def deadline_exceeded(message: str) -> DmRpcError:
    """A multi-agent wait that saw no progress for the server's timeout."""
    return DmRpcError(code(grpc.StatusCode.DEADLINE_EXCEEDED), message)


def unimplemented(message: str) -> DmRpcError:
    """A request payload or extension the server does not speak."""
    return DmRpcError(code(grpc.StatusCode.UNIMPLEMENTED), message)


def internal(message: str) -> DmRpcError:
    """The environment itself raised."""
    return DmRpcError(code(grpc.StatusCode.INTERNAL), message)
