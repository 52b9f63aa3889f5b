"""The codes both ends put on the wire, by name: HTTP/2 error codes and gRPC status codes.

Both are ``IntEnum`` so they pack into frames and compare with the numbers a peer sends as
they are; a code never appears as a bare number in the transport.

>>> ErrorCode(3).name, int(GrpcStatus.UNAVAILABLE)
('FLOW_CONTROL_ERROR', 14)
"""
from __future__ import annotations

import enum

__all__ = ["ErrorCode", "GrpcStatus"]


class ErrorCode(enum.IntEnum):
    """RFC 9113 section 7: the code of a RST_STREAM or a GOAWAY."""

    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


class GrpcStatus(enum.IntEnum):
    """gRPC's status codes (``grpc.StatusCode``'s numbers): the ``grpc-status`` of trailers."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16
