"""Serve gymnasium and PettingZoo envs over dm_env_rpc.

``Server(factory)`` puts an env factory (a gymnasium env id, ``"module:factory"``
or a callable) behind the dm_env_rpc protocol on a gRPC port; ``serve(...)``
starts one in a line. Gymnasium worlds give every joined connection its own
env (:mod:`~dmrpc_gym.server.worlds.gym_world`); a PettingZoo ``ParallelEnv`` is one
world whose agents are joined connections (:mod:`~dmrpc_gym.server.worlds.parallel_world`).

What clients see: actions and observations named as
:func:`dmrpc_gym.spaces.specs_from_space` names the env's spaces (a bare space is
``"action"`` / ``"observation"``), plus DOUBLE scalar observations ``reward`` and
``discount`` (0 on termination, else 1), and, for a client that is not a dmrpc_gym
client, ``RGB`` (uint8 HxWx3, rendered only when requested) when the env renders
``rgb_array`` (:mod:`dmrpc_gym.protocol.fidelity`: ours read frames on demand); the properties extension
(:mod:`~dmrpc_gym.server.worlds.properties`); errors as ``google.rpc.Status`` answers
that leave the stream open (:mod:`~dmrpc_gym.server.serving.session`).

>>> from dmrpc_gym.client.connection import Connection
>>> from dmrpc_gym.protocol.wire import pb
>>> with Server("CartPole-v1") as server, Connection(server.address) as conn:
...     world = conn.send(pb.CreateWorldRequest()).world_name
...     specs = conn.send(pb.JoinWorldRequest(world_name=world)).specs
...     [spec.name for spec in specs.observations.values()][:3]
['observation', 'reward', 'discount']
"""
from dmrpc_gym.server.serving.runner import Server, serve
from dmrpc_gym.transport import ConnectionLimits

__all__ = ["Server", "serve", "ConnectionLimits"]
