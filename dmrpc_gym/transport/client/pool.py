"""HTTP/2 connections that several dm_env_rpc connections share, one per server.

dm_env_rpc's connection is a gRPC stream, and HTTP/2 carries many streams on
one connection. The sub-envs of a vector env (and the agents of a parallel
env) that talk to one server share one socket: the N requests of a step
leave together in a few ``send`` calls (:meth:`SharedConnections.corked`), and
the answers come in as few ``recv`` calls as the kernel allows, instead of N
of each on both ends.

A connection is shared while it is usable: once lost, closed, told GOAWAY or
at the server's SETTINGS_MAX_CONCURRENT_STREAMS, the next stream gets a new
connection (so ``reconnect=True`` reconnects through here too).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Hashable, Iterator

from dmrpc_gym.transport.client.connection import GrpcConnection
from dmrpc_gym.transport.client.stream import GrpcStream

__all__ = ["SharedConnections"]


class SharedConnections:
    """Streams to one server share one :class:`~dmrpc_gym.transport.client.connection.GrpcConnection`.

    >>> from dmrpc_gym.transport.client.h2_transport import open_connection
    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> address, shared = embedded_server("catch").address, SharedConnections()
    >>> a = shared.open_stream(address, lambda: open_connection(address, 5.0))
    >>> b = shared.open_stream(address, lambda: open_connection(address, 5.0))
    >>> a.fileno() == b.fileno(), len(shared)
    (True, 1)
    >>> a.close(); b.close(); len(shared)
    0
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._connections: dict[Hashable, list[GrpcConnection]] = {}

    def __reduce__(self):
        """A copy (a pickled env, sent elsewhere) starts with no connections of its own."""
        return (SharedConnections, ())

    def open_stream(self, key: Hashable, connect: Callable[[], GrpcConnection], *stream_args) -> GrpcStream:
        """A new stream on a usable connection kept under ``key`` (the server and how it is
        reached), or on a new one from ``connect()``; ``stream_args`` go to ``open_stream``."""
        with self._lock:
            kept = self._connections.setdefault(key, [])
            kept[:] = [conn for conn in kept if not conn.closed]
            for conn in kept:
                if conn.usable:
                    try:
                        return conn.open_stream(*stream_args)
                    except ConnectionError:          # lost or closed since it was looked at
                        pass
            conn = connect()
            kept.append(conn)
            return conn.open_stream(*stream_args)

    def __len__(self) -> int:
        """How many of the connections made are open."""
        with self._lock:
            return sum(not conn.closed for kept in self._connections.values() for conn in kept)

    @contextlib.contextmanager
    def corked(self) -> Iterator[None]:
        """Small messages written inside are gathered per connection (see
        :meth:`GrpcConnection.corked <dmrpc_gym.transport.client.connection.GrpcConnection.corked>`)."""
        with self._lock:
            connections = [conn for kept in self._connections.values() for conn in kept if not conn.closed]
        with contextlib.ExitStack() as stack:
            for conn in connections:
                stack.enter_context(conn.corked())
            yield
