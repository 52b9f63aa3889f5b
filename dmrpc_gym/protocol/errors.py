"""Errors raised when a dm_env_rpc peer answers with a status instead of a result."""
from __future__ import annotations

import grpc

__all__ = ["DmRpcError", "status_name"]

_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


def status_name(code: int) -> str:
    """The canonical name of a ``google.rpc.Code`` value (``3`` -> ``INVALID_ARGUMENT``)."""
    return _NAMES.get(code, f"CODE_{code}")


class DmRpcError(RuntimeError):
    """A dm_env_rpc error response: the server's ``google.rpc.Status``.

    Attributes:
        code: the numeric status code (``google.rpc.Code``).
        message: the server's message, verbatim.
        details: the status details, a tuple of ``google.protobuf.Any``.
        request: the name of the request that failed (``"step"``, ``"join_world"``...), if known.

    >>> err = DmRpcError(3, "action 'paddle' out of bounds", request="step")
    >>> err.code_name, str(err)
    ('INVALID_ARGUMENT', "step failed: INVALID_ARGUMENT: action 'paddle' out of bounds")
    """

    def __init__(self, code: int, message: str, details=(), request: str | None = None):
        self.code = int(code)
        self.message = message
        self.details = tuple(details)
        self.request = request
        prefix = f"{request} failed: " if request else ""
        super().__init__(f"{prefix}{self.code_name}: {message}")

    @property
    def code_name(self) -> str:
        """The status code's name, as gRPC spells it (``"INVALID_ARGUMENT"``)."""
        return status_name(self.code)

    def __reduce__(self):
        return (type(self), (self.code, self.message, (), self.request))

    @classmethod
    def from_status(cls, status, request: str | None = None) -> "DmRpcError":
        """Build from a ``Status`` message (ours or ``google.rpc.Status``)."""
        return cls(status.code, status.message, status.details, request)
