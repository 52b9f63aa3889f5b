"""gRPC over HTTP/2, both ends: the facade the layers above import from.

A :class:`Transport` moves whole gRPC messages (bytes) of one bidirectional
stream; it knows nothing of dm_env_rpc's messages above. The package has three parts:

- the shared core, here: ``frames`` (frame layout, flags, settings ids, gRPC message framing),
  ``codes`` (HTTP/2 error codes, gRPC status codes), ``headers`` (HPACK header blocks),
  ``compression``, ``limits`` (a server's bounds), ``security`` (TLS, tokens), ``unix``
  (Unix-socket addresses) and ``base`` (the :class:`Transport` interface, addresses);
- ``transport.client``: the blocking client connection, its streams and the transports on them;
- ``transport.server``: the asyncio server protocol, its calls, and the :class:`Traffic` it counts.

The two halves share only the core and never import each other (``tests/test_layers.py``).
"""
from __future__ import annotations

from dmrpc_gym.transport.base import STEADY_STEP_ENV, StreamEnded, Transport, Unreachable, check_address, parse_address
from dmrpc_gym.transport.client.grpcio_transport import GrpcioTransport
from dmrpc_gym.transport.client.h2_transport import H2Transport
from dmrpc_gym.transport.client.pool import SharedConnections
from dmrpc_gym.transport.client.steady import NOT_SENT, TAKEN, ByteLayout
from dmrpc_gym.transport.codes import ErrorCode, GrpcStatus
from dmrpc_gym.transport.frames import DEFAULT_MAX_MESSAGE, StreamError, grpc_frame
from dmrpc_gym.transport.limits import MIN_KEEPALIVE, ConnectionLimits
from dmrpc_gym.transport.security import TOKEN_ENV, behind_tls, server_context, token_metadata
from dmrpc_gym.transport.server.methods import Method
from dmrpc_gym.transport.server.protocol import GrpcProtocol
from dmrpc_gym.transport.server.traffic import Traffic
from dmrpc_gym.transport.shared_memory import (MAX_SHARED, THRESHOLD as SHARED_THRESHOLD, Region, RegionError,
                                               RegionLink, SharedMemoryHost, request_header)
from dmrpc_gym.transport.busy_poll import BUSY_POLL_ENV, selector as busy_selector
from dmrpc_gym.transport.same_host import listen as listen_same_host, settings as same_host_settings
from dmrpc_gym.transport.shm_regions import TARGET_ALIGN, aligned
from dmrpc_gym.transport.unix import listen_unix, remove_socket_file, unix_address, unix_path

__all__ = ["STEADY_STEP_ENV", "Transport", "StreamEnded", "Unreachable", "check_address", "parse_address",
           "H2Transport", "GrpcioTransport", "SharedConnections", "ByteLayout", "NOT_SENT", "TAKEN",
           "GrpcProtocol", "Method", "StreamError", "Traffic", "ConnectionLimits",
           "DEFAULT_MAX_MESSAGE", "grpc_frame", "MIN_KEEPALIVE", "ErrorCode", "GrpcStatus",
           "TOKEN_ENV", "token_metadata", "behind_tls", "server_context",
           "listen_unix", "remove_socket_file", "unix_address", "unix_path", "listen_same_host", "same_host_settings",
           "BUSY_POLL_ENV", "busy_selector",
           "MAX_SHARED", "SHARED_THRESHOLD", "Region", "RegionError", "RegionLink", "SharedMemoryHost", "request_header",
           "TARGET_ALIGN", "aligned"]
