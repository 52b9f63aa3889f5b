"""dmrpc_gym: dm_env_rpc worlds as gymnasium / PettingZoo environments, and back.

Importing the package registers the ``dmrpc`` gymnasium namespace
(``dmrpc/Remote-v0``, ``dmrpc/Catch-v0``).
"""
from dmrpc_gym._version import __version__
from dmrpc_gym.errors import DmRpcError
from dmrpc_gym.registration import register_envs

register_envs()


def __getattr__(name):
    # The env classes pull in gymnasium/pettingzoo machinery: load them on first use.
    if name in ("DmRpcEnv", "State"):
        from dmrpc_gym import env
        return getattr(env, name)
    if name in ("DmRpcParallelEnv", "parallel_env"):
        from dmrpc_gym import parallel
        return getattr(parallel, name)
    if name == "DmRpcVectorEnv":
        from dmrpc_gym.vector import DmRpcVectorEnv
        return DmRpcVectorEnv
    if name == "Connection":
        from dmrpc_gym.connection import Connection
        return Connection
    raise AttributeError(f"module 'dmrpc_gym' has no attribute {name!r}")


__all__ = ["__version__", "DmRpcError", "DmRpcEnv", "State", "DmRpcParallelEnv", "parallel_env",
           "DmRpcVectorEnv", "Connection", "register_envs"]
