"""dm_env_rpc's environment states, as the client hands them out (``RemoteAgent.state``, reward callables)."""
from __future__ import annotations

import enum

from dmrpc_gym.protocol.wire import pb

__all__ = ["State"]


class State(enum.IntEnum):
    """dm_env_rpc's ``EnvironmentStateType``, as handed to reward functions and ``info``.

    >>> State(pb.TERMINATED), State.INTERRUPTED == pb.INTERRUPTED
    (<State.TERMINATED: 2>, True)
    """

    INVALID = pb.INVALID_ENVIRONMENT_STATE
    RUNNING = pb.RUNNING
    TERMINATED = pb.TERMINATED
    INTERRUPTED = pb.INTERRUPTED
