"""The client's half of :mod:`dmrpc_gym.protocol.fidelity`: the served env's exact spaces, and what a
step's exact extras say.

>>> from dmrpc_gym.server import Server
>>> from dmrpc_gym.client.connection import Connection
>>> from dmrpc_gym.client.properties import Properties
>>> from dmrpc_gym.protocol.wire import pb
>>> with Server(lambda: gym.make("Blackjack-v1")) as server, Connection(server.address) as conn:
...     specs = conn.send(pb.JoinWorldRequest(world_name="")).specs
...     exact = ExactSpaces.read(Properties(conn), ["observation.0", "observation.1", "observation.2"], ["action"])
>>> type(exact.observation_space).__name__, exact.action_space
('Tuple', Discrete(2))
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import gymnasium as gym

from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.fidelity import ENV_KEY, SPACES_PROPERTY, exact_reward
from dmrpc_gym.protocol.info import unpack_info
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.spaces.codec import ValueCodec
from dmrpc_gym.spaces.described import space_from_description
from dmrpc_gym.spaces.scalars import ScalarKinds

__all__ = ["ExactSpaces", "exactly", "NOTHING_SAID"]

#: What a step without exact extras says (read-only: shared by every step, nothing allocated).
NOTHING_SAID: Mapping[str, Any] = MappingProxyType({})


class ExactSpaces:
    """The served env's own spaces (its ``spaces`` property), their codecs under the names its tensors
    travel by, a dm_env's own specs (``described["dm_env"]``, when it is one), its scalars' kinds, what
    the env says of itself (``facts``, :mod:`dmrpc_gym.server.worlds.env_facts`; None from an older server)
    and what the latest step's exact extras said (``said``)."""

    def __init__(self, described: dict[str, Any]):
        self.described = described
        self.observation_space: gym.Space = space_from_description(described["observation"])
        self.action_space: gym.Space = space_from_description(described["action"])
        names = described["names"]
        self.codecs = (ValueCodec(self.observation_space, names["observation"]),
                       ValueCodec(self.action_space, names["action"]))
        self.scalar_kinds = ScalarKinds(self.observation_space)
        self.facts: dict[str, Any] | None = described.get(ENV_KEY)
        self.said: Mapping[str, Any] = NOTHING_SAID

    @classmethod
    def read(cls, properties: Any, observations: Sequence[str], actions: Sequence[str]) -> "ExactSpaces | None":
        """The description ``properties`` hold, when it names the tensors ``observations`` / ``actions``
        (the specs' names); else None, said as a warning (the spaces are then those the specs give)."""
        try:
            exact = cls(unpack_info(str(properties[SPACES_PROPERTY].item())))
        except (DmRpcError, KeyError, ValueError, TypeError) as exc:
            why = f"could not be used ({type(exc).__name__}: {exc})"
        else:
            if set(exact.codecs[0].names) == set(observations) and set(exact.codecs[1].names) == set(actions):
                return exact
            why = "names other tensors than its specs"
        warnings.warn(f"the dmrpc_gym server's description of the spaces {why}; the spaces are those its "
                      f"TensorSpecs give", stacklevel=6)
        return None


def exactly(result: tuple, tensor: pb.Tensor, exact: ExactSpaces | None, reward_observed: bool,
            said: Mapping[str, Any] | None = None) -> tuple:
    """A step's ``(obs, reward, terminated, truncated, info)`` with what its exact extras ``tensor`` say
    (:func:`~dmrpc_gym.protocol.fidelity.exact_step`): the reward's own type (when ``reward_observed``: the
    reward is the ``reward`` observation, not a callable's), ``truncated`` beside ``terminated``, and
    how the observation holds its scalars. ``said``: what ``tensor`` says, read already (read-only)."""
    obs, reward, terminated, truncated, info = result
    if said is None:
        said = unpack_info(tensor.strings.array[0])
    if exact is not None:
        exact.said = said
    if "reward" in said and reward_observed:
        reward = exact_reward(reward, said["reward"])
    if "kinds" in said and exact is not None:
        obs = exact.scalar_kinds.apply(obs, said["kinds"])
    return obs, reward, terminated, truncated or bool(said.get("truncated")), info
