"""The ``dmrpc`` gymnasium namespace, registered when ``dmrpc_gym`` is imported."""
from __future__ import annotations

import gymnasium as gym

__all__ = ["register_envs"]


def register_envs() -> None:
    """Register ``dmrpc/Remote-v0`` and ``dmrpc/Catch-v0`` (idempotent)."""
    if "dmrpc/Remote-v0" not in gym.registry:
        gym.register(
            id="dmrpc/Remote-v0",
            entry_point="dmrpc_gym.client.env:DmRpcEnv",
            vector_entry_point="dmrpc_gym.client.vector:DmRpcVectorEnv",
            # Without seed_setting the seed seeds only the client's RNG.
            nondeterministic=True,
        )
    if "dmrpc/Catch-v0" not in gym.registry:
        gym.register(
            id="dmrpc/Catch-v0",
            entry_point="dmrpc_gym.worlds.embedded:make_catch_env",
            vector_entry_point="dmrpc_gym.worlds.embedded:make_catch_vector_env",
        )
