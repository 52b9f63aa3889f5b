"""The ``dmrpc`` gymnasium namespace, registered when ``dmrpc_gym`` is imported."""
from __future__ import annotations

import gymnasium as gym

__all__ = ["register_envs"]


def register_envs() -> None:
    """Register ``dmrpc/Remote-v0``, ``dmrpc/Catch-v0`` and the Godot ids (idempotent)."""
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
    godot = "dmrpc_gym.integrations.godot"
    if "dmrpc/Godot-v0" not in gym.registry:
        gym.register(
            id="dmrpc/Godot-v0",
            entry_point=f"{godot}.env:GodotEnv",
            vector_entry_point=f"{godot}.vector:GodotVectorEnv",
            # A game that ignores the seed sent with reset is not seeded.
            nondeterministic=True,
        )
    if "dmrpc/GodotCatch-v0" not in gym.registry:
        gym.register(
            id="dmrpc/GodotCatch-v0",
            entry_point=f"{godot}.catch:make_godot_catch",
            vector_entry_point=f"{godot}.catch:make_godot_catch_vector",
        )
