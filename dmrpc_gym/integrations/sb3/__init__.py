"""Stable-Baselines3: the flat-spaces view SB3 trains on
(:class:`~dmrpc_gym.integrations.flat_spaces.FlatSpaces`; ``SB3Compat``, its former name, is
deprecated), and a ``VecEnv`` without subprocesses.

``DmRpcSB3VecEnv`` imports SB3 when first used.
"""
from dmrpc_gym.integrations.flat_spaces import (FlatSpaces, deprecated_name, sb3_action_transform,
                                                 sb3_observation_transform, sb3_spaces)

__all__ = ["FlatSpaces", "DmRpcSB3VecEnv", "sb3_spaces", "sb3_action_transform", "sb3_observation_transform"]


def __getattr__(name: str):
    if name == "DmRpcSB3VecEnv":
        from dmrpc_gym.integrations.sb3.vec_env import DmRpcSB3VecEnv
        return DmRpcSB3VecEnv
    return deprecated_name(__name__, name)
