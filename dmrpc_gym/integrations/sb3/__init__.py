"""Stable-Baselines3: the flat-spaces view SB3 trains on (``SB3Compat``, the name it had first, of
:class:`~dmrpc_gym.integrations.flat_spaces.FlatSpaces`), and a ``VecEnv`` without subprocesses.

``DmRpcSB3VecEnv`` imports SB3 when first used.
"""
from dmrpc_gym.integrations.flat_spaces import FlatSpaces, SB3Compat, sb3_action_transform, sb3_observation_transform, sb3_spaces

__all__ = ["FlatSpaces", "SB3Compat", "DmRpcSB3VecEnv", "sb3_spaces", "sb3_action_transform", "sb3_observation_transform"]


def __getattr__(name: str):
    if name == "DmRpcSB3VecEnv":
        from dmrpc_gym.integrations.sb3.vec_env import DmRpcSB3VecEnv
        return DmRpcSB3VecEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
