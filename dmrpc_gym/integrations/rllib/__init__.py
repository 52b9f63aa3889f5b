"""Ray RLlib: dm_env_rpc worlds as RLlib envs, with env runners spread over many servers.

``register()`` registers the RLlib env names ``dmrpc/Remote-v0``,
``dmrpc/Catch-v0``, the multi-agent ``dmrpc/Tag-v0`` and ``dmrpc/Godot-v0``;
``env_config`` carries the env's keyword arguments plus ``addresses``, the
servers the sub-envs are spread over by the rule of :mod:`.spread`. Envs come
in the flat-spaces view, multi-agent worlds as :class:`DmRpcMultiAgentEnv`.
Ray is imported only by ``register()``, so this package imports without it;
``docs/guides/rllib.md`` shows whole training scripts.

>>> sorted(ENV_CREATORS)
['dmrpc/Catch-v0', 'dmrpc/Godot-v0', 'dmrpc/Remote-v0', 'dmrpc/Tag-v0']
"""
from __future__ import annotations

from typing import Any

from dmrpc_gym.integrations.rllib.creators import (ENV_CREATORS, catch_env, godot_env, register,
                                                   remote_env, tag_env)
from dmrpc_gym.integrations.rllib.spread import spread_address, spread_index

__all__ = ["register", "ENV_CREATORS", "remote_env", "catch_env", "tag_env", "godot_env",
           "spread_index", "spread_address", "DmRpcMultiAgentEnv", "role"]


def __getattr__(name: str) -> Any:
    # The multi-agent module imports RLlib's base class when ray is there: loaded on first use.
    if name in ("DmRpcMultiAgentEnv", "role"):
        from dmrpc_gym.integrations.rllib import multiagent
        return getattr(multiagent, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
