"""What our server serves, by gRPC method path: dm_env_rpc's ``Process``, health and reflection.

The transport routes each stream by this table (:class:`~dmrpc_gym.transport.Method`
by ``:path``); a client that calls only ``Process`` meets nothing else.

>>> from dmrpc_gym.server.envs.factories import Factory
>>> from dmrpc_gym.worlds.catch import Catch
>>> registry = WorldRegistry(Factory(Catch))
>>> table = served_methods(registry, Health(registry), health_without_token=True)
>>> for path, method in sorted(table.items()):
...     print(path, "(without token)" if method.without_token else "(token)")
/dm_env_rpc.v1.Environment/Process (token)
/grpc.health.v1.Health/Check (without token)
/grpc.health.v1.Health/Watch (without token)
/grpc.reflection.v1.ServerReflection/ServerReflectionInfo (token)
/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo (token)
"""
from __future__ import annotations

from dmrpc_gym.protocol.wire import METHOD_PATH
from dmrpc_gym.server.serving.health import Health, health_methods
from dmrpc_gym.server.serving.reflection import reflection_methods
from dmrpc_gym.server.worlds.registry import WorldRegistry
from dmrpc_gym.server.serving.session import Session
from dmrpc_gym.transport import Method, SharedMemoryHost

__all__ = ["served_methods"]


def served_methods(registry: WorldRegistry, health: Health, health_without_token: bool = False,
                   shared_memory: SharedMemoryHost | None = None) -> dict[str, Method]:
    """The server's method table: ``Process`` (a :class:`~dmrpc_gym.server.serving.session.Session` per
    stream, offered ``shared_memory`` where given), health (without the token if ``health_without_token``)
    and reflection."""
    return {METHOD_PATH: Method(lambda headers: Session(registry, headers, shared_memory)),
            **health_methods(health, health_without_token), **reflection_methods()}
