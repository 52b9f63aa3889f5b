"""Test helpers: our server on 127.0.0.1 port 0, and official / raw clients talking to it."""
from __future__ import annotations

import contextlib
import queue
import threading
from typing import Any, Iterator

import grpc
import numpy as np
from dm_env_rpc.v1 import connection as dm_connection
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb
from dm_env_rpc.v1 import tensor_utils

from dmrpc_gym.app import cli, serve_command
from dmrpc_gym.server import Server
from dmrpc_gym.protocol.wire import METHOD_PATH, pb

def serve_like_cli(target: str, *extra: str) -> Server:
    """A server started exactly as ``dmrpc-gym serve TARGET --port 0`` starts one."""
    args = cli.build_parser().parse_args(["serve", target, "--port", "0", *extra])
    return serve_command.start_server(args)


def start(factory: Any, **options: Any) -> Server:
    """``Server(factory)`` on a free loopback port, started."""
    return Server(factory, **options).start()


class OfficialClient:
    """The official ``dm_env_rpc`` Connection over its own channel; ``close()`` ends the stream."""

    def __init__(self, address: str):
        # No channel_ready_future: its watcher makes channel.close() take ~0.2 s.
        self.channel = grpc.insecure_channel(address)
        self.connection = dm_connection.Connection(self.channel)

    def send(self, request: Any) -> Any:
        return self.connection.send(request)

    def close(self) -> None:
        # The official close() only drops its stream; ending the request iterator
        # half-closes the stream at once (else closing the channel waits ~0.2 s).
        stream = getattr(self.connection, "_stream", None)
        requests = getattr(stream, "_requests", None)
        if requests is not None:
            requests.put(None)
        self.connection.close()
        self.channel.close()

    def __enter__(self) -> "OfficialClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextlib.contextmanager
def official(address: str) -> Iterator[dm_connection.Connection]:
    """An official ``Connection`` to ``address``, closed (stream ended) on exit."""
    client = OfficialClient(address)
    try:
        yield client.connection
    finally:
        client.close()


class RawStream:
    """One gRPC stream of raw bytes both ways: sends anything, even bytes that do not parse."""

    def __init__(self, address: str):
        self.channel = grpc.insecure_channel(address)
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        call = self.channel.stream_stream(METHOD_PATH, request_serializer=None, response_deserializer=None)
        self.call = call(iter(self._requests.get, None))
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for raw in self.call:
                self._answers.put(raw)
        except grpc.RpcError as exc:
            self._answers.put(exc)
        self._answers.put(None)

    def write(self, raw: bytes) -> None:
        """Send without waiting for the answer (pipelining)."""
        self._requests.put(raw)

    def read(self, timeout: float = 10.0) -> pb.EnvironmentResponse:
        """The next answer, in order."""
        answer = self._answers.get(timeout=timeout)
        if not isinstance(answer, bytes):
            raise AssertionError(f"the stream ended instead of answering: {answer!r}")
        return pb.EnvironmentResponse.FromString(answer)

    def send_bytes(self, raw: bytes, timeout: float = 10.0) -> pb.EnvironmentResponse:
        self.write(raw)
        return self.read(timeout)

    def send(self, **payload: Any) -> pb.EnvironmentResponse:
        return self.send_bytes(pb.EnvironmentRequest(**payload).SerializeToString())

    def cancel(self) -> None:
        self.call.cancel()

    def close(self) -> None:
        self._requests.put(None)
        self.channel.close()

    def __enter__(self) -> "RawStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def tensor(value: Any, dtype: Any = None) -> dpb.Tensor:
    """An official ``Tensor`` (for official clients' settings and actions)."""
    return tensor_utils.pack_tensor(value, dtype=dtype)


def unpack(tensor_message: Any) -> np.ndarray:
    return np.asarray(tensor_utils.unpack_tensor(tensor_message))


def uids(specs: Any) -> tuple[dict[str, int], dict[str, int]]:
    """(action name -> UID, observation name -> UID) of an ``ActionObservationSpecs``."""
    return ({s.name: uid for uid, s in specs.actions.items()},
            {s.name: uid for uid, s in specs.observations.items()})
