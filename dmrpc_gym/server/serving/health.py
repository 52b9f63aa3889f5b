"""gRPC health checking (``grpc.health.v1.Health``: ``Check`` and ``Watch``) on our server.

Load balancers, Kubernetes' gRPC probes and ``grpc_health_probe`` ask it
whether the server takes work. It reports on the whole server (service
``""``) and on ``dm_env_rpc.v1.Environment``, both the same way:

- ``SERVING`` while a world can be created;
- ``NOT_SERVING`` while it drains (:meth:`~dmrpc_gym.server.serving.runner.Server.drain`),
  and while it holds ``max_worlds`` worlds (its limit: CreateWorld would be refused);
- another service name: ``Check`` ends with NOT_FOUND (as grpc's own health
  servers answer), ``Watch`` answers ``SERVICE_UNKNOWN`` (as the protocol says).

``Watch`` sends the status at once, then each change, until the client cancels.
The calls carry the server's token like any other, unless the server is made
with ``health_without_token=True`` (``serve --health-without-token``): probes
usually cannot send one.

>>> from dmrpc_gym.server.envs.factories import Factory
>>> from dmrpc_gym.worlds.catch import Catch
>>> health = Health(WorldRegistry(Factory(Catch), max_worlds=1))
>>> [status_name(health.status(name)) for name in ("", "dm_env_rpc.v1.Environment", "other")]
['SERVING', 'SERVING', 'SERVICE_UNKNOWN']
>>> health.registry.drain(); status_name(health.status(""))
'NOT_SERVING'
"""
from __future__ import annotations

import asyncio
from typing import AsyncIterator, Mapping

from dmrpc_gym.protocol._proto import health_pb2
from dmrpc_gym.protocol.wire import SERVICE
from dmrpc_gym.server.worlds.registry import WorldRegistry
from dmrpc_gym.transport import GrpcStatus, Method, StreamError

__all__ = ["Health", "HEALTH_SERVICE", "CHECK_PATH", "WATCH_PATH", "status_name", "health_methods"]

#: The service's name on the wire, and its two methods' paths.
HEALTH_SERVICE = "grpc.health.v1.Health"
CHECK_PATH = f"/{HEALTH_SERVICE}/Check"
WATCH_PATH = f"/{HEALTH_SERVICE}/Watch"

_Status = health_pb2.HealthCheckResponse
#: The services reported on: the whole server, and the one it serves.
_REPORTED = ("", SERVICE)


def status_name(status: int) -> str:
    """``SERVING``, ``NOT_SERVING``... for a ``ServingStatus`` value."""
    return _Status.ServingStatus.Name(status)


class Health:
    """The health of one server, read from its :class:`~dmrpc_gym.server.worlds.registry.WorldRegistry`,
    and the watchers told of each change (on the server's event loop)."""

    def __init__(self, registry: WorldRegistry):
        self.registry = registry
        self._watchers: set[asyncio.Event] = set()
        registry.watchers.append(self._changed)

    def status(self, service: str) -> int:
        """The ``ServingStatus`` of ``service`` (``SERVICE_UNKNOWN`` for one not reported on)."""
        if service not in _REPORTED:
            return _Status.SERVICE_UNKNOWN
        return _Status.SERVING if self.registry.room() is None else _Status.NOT_SERVING

    def _changed(self) -> None:
        for event in self._watchers:
            event.set()

    def check(self, headers: Mapping[str, str]) -> "_Check":
        return _Check(self)

    def watch(self, headers: Mapping[str, str]) -> "_Watch":
        return _Watch(self)


def _service_of(raw: bytes) -> str:
    try:
        return health_pb2.HealthCheckRequest.FromString(bytes(raw)).service
    except Exception as exc:  # noqa: BLE001 - a malformed request is the client's
        raise StreamError(GrpcStatus.INVALID_ARGUMENT,
                          f"the request is not a valid grpc.health.v1.HealthCheckRequest: {exc}") from None


def _answer(status: int) -> bytes:
    return _Status(status=status).SerializeToString()


class _Check:
    """One ``Check`` call (unary): the status, or NOT_FOUND for a service not reported on."""

    def __init__(self, health: Health):
        self.health, self.asked = health, False

    async def handle(self, raw: bytes) -> bytes:
        if self.asked:
            raise StreamError(GrpcStatus.INTERNAL, "Check is a unary method: one request per call")
        self.asked = True
        service = _service_of(raw)
        status = self.health.status(service)
        if status == _Status.SERVICE_UNKNOWN:
            raise StreamError(GrpcStatus.NOT_FOUND, f"unknown service {service!r}: this server reports on "
                                                    f"{' and '.join(map(repr, _REPORTED))}")
        return _answer(status)

    def close(self) -> None:
        pass


class _Watch:
    """One ``Watch`` call (server streaming): the status now, then each change."""

    def __init__(self, health: Health):
        self.health = health

    async def handle(self, raw: bytes) -> AsyncIterator[bytes]:
        service = _service_of(raw)
        changed = asyncio.Event()
        self.health._watchers.add(changed)
        try:
            last = None
            while True:
                changed.clear()
                status = self.health.status(service)
                if status != last:
                    last = status
                    yield _answer(status)
                await changed.wait()
        finally:
            self.health._watchers.discard(changed)

    def close(self) -> None:
        pass


def health_methods(health: Health, without_token: bool = False) -> dict[str, Method]:
    """The health service's methods, for the server's method table."""
    return {CHECK_PATH: Method(health.check, without_token),
            WATCH_PATH: Method(health.watch, without_token, many=True)}
