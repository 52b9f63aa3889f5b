"""grpcio's own client stream as a Transport: for a caller's ``grpc.Channel`` and TLS credentials.

grpcio hands every message between threads, so this is slower than
:mod:`~dmrpc_gym.transport.client.connection`, but it takes any channel grpcio can make.
"""
from __future__ import annotations

import queue
import socket
import threading

import grpc

from dmrpc_gym.protocol.wire import METHOD_PATH
from dmrpc_gym.transport.base import StreamEnded
from dmrpc_gym.transport.codes import GrpcStatus

__all__ = ["GrpcioTransport"]


class GrpcioTransport:
    """A :class:`~dmrpc_gym.transport.base.Transport` over grpcio's sync stream (a caller's channel, TLS)."""

    def __init__(self, channel: grpc.Channel, metadata, connect_timeout: float | None, target: str,
                 wait_ready: bool = True):
        # wait_ready=False: the channel was ready moments ago (a retried first call). Asking again
        # right away leaves grpcio's connectivity poller running after the caller closes the channel.
        if wait_ready:
            ready = grpc.channel_ready_future(channel)
            try:
                ready.result(timeout=connect_timeout)
            except grpc.FutureTimeoutError:
                ready.cancel()
                raise ConnectionError(
                    f"cannot reach a dm_env_rpc server at {target} within {connect_timeout} s") from None
        self.messages_sent = 0
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        call = channel.stream_stream(METHOD_PATH, request_serializer=None,
                                     response_deserializer=None)
        self._call = call(iter(self._requests.get, None), metadata=metadata or None)
        threading.Thread(target=self._pump, name="dmrpc-grpc-reader", daemon=True).start()

    def _pump(self) -> None:
        try:
            for message in self._call:
                self._answers.put(message)
            self._answers.put(StreamEnded(GrpcStatus.OK, "the server ended the stream"))
        except grpc.RpcError as err:
            code = err.code()
            status = code.value[0] if code is not None else None
            self._answers.put(StreamEnded(status, err.details() or str(code)))

    broken = False

    @property
    def initial_metadata(self) -> dict[str, str]:
        """The server's initial metadata; empty until an answer has come (never waits)."""
        if not self._answered:
            return {}
        return {key: value for key, value in (self._call.initial_metadata() or ())
                if isinstance(value, str)}

    def write(self, *parts: bytes | memoryview) -> None:
        self._requests.put(parts[0] if len(parts) == 1 else b"".join(parts))
        self.messages_sent += 1

    _answered = False

    def read(self, timeout: float | None) -> bytes:
        try:
            item = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise socket.timeout() from None
        if isinstance(item, StreamEnded):
            self._answers.put(item)
            raise item
        self._answered = True
        return item

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()
