"""dmrpc_gym: dm_env_rpc worlds as gymnasium / PettingZoo environments, and back.

Importing the package registers the ``dmrpc`` gymnasium namespace
(``dmrpc/Remote-v0``, ``dmrpc/Catch-v0``). The layers, bottom up:
``protocol`` (the wire), ``transport`` (gRPC over HTTP/2), ``spaces``
(TensorSpec <-> gymnasium), then ``client`` and ``server`` side by side,
``worlds`` (bundled worlds and their embedded servers), ``integrations``
(SB3, RLlib, Godot) and ``app`` (the command line).
"""
from dmrpc_gym._version import __version__
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.registration import register_envs

register_envs()

# Public name -> the module that holds it, imported on first use (they pull in
# gymnasium / PettingZoo machinery that a bare ``import dmrpc_gym`` does not need).
_LAZY = {
    "DmRpcEnv": "dmrpc_gym.client.env",
    "State": "dmrpc_gym.client.agent",
    "DmRpcParallelEnv": "dmrpc_gym.client.parallel",
    "parallel_env": "dmrpc_gym.worlds.embedded",
    "DmRpcVectorEnv": "dmrpc_gym.client.vector",
    "Connection": "dmrpc_gym.client.connection",
    "tag_env": "dmrpc_gym.worlds.embedded",
    "connect_dm_env": "dmrpc_gym.client.dm_env_client",
    "DmRpcAECEnv": "dmrpc_gym.client.aec",
    "aec_env": "dmrpc_gym.client.aec",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dmrpc_gym' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["__version__", "DmRpcError", "register_envs", *_LAZY]
