"""dmrpc_gym: dm_env_rpc worlds as gymnasium / PettingZoo environments, and back."""
from dmrpc_gym._version import __version__
from dmrpc_gym.errors import DmRpcError

__all__ = ["__version__", "DmRpcError"]
