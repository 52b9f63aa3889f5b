"""The server's half of :mod:`dmrpc_gym.protocol.fidelity`: an agent's ``spaces`` and ``frame``
properties, and what foreign clients cannot read back, said once.

>>> import gymnasium as gym
>>> from dmrpc_gym.server.worlds.interface import AgentInterface
>>> face = AgentInterface(gym.spaces.Tuple((gym.spaces.Discrete(2),)), gym.spaces.Discrete(2))
>>> [p.key for p in fidelity_properties(face, object(), None)]
['spaces']
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

import numpy as np

from dmrpc_gym.protocol.fidelity import FRAME_PROPERTY, SPACES_PROPERTY
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server.worlds.env_facts import env_facts
from dmrpc_gym.server.worlds.interface import AgentInterface
from dmrpc_gym.server.worlds.properties import Property
from dmrpc_gym.server.worlds.rendering import rgb_render

__all__ = ["fidelity_properties", "say_losses"]

log = logging.getLogger("dmrpc_gym.server")


def say_losses(factory: Any, interface: AgentInterface) -> None:
    """Log, once per factory and loss, what foreign clients cannot read back of ``interface``'s spaces."""
    said = factory.losses_said
    for loss in interface.losses():
        if loss not in said:
            said.add(loss)
            log.info("%s: %s (a dmrpc_gym client gets the exact space)", factory.name, loss)


def fidelity_properties(interface: AgentInterface, env: Any,
                        frame: Callable[[], Awaitable[np.ndarray]]) -> list[Property]:
    """An agent's :data:`SPACES_PROPERTY` (with what ``env`` says of itself, :func:`env_facts`) and, when ``env`` renders ``rgb_array``, its
    :data:`FRAME_PROPERTY` (:mod:`dmrpc_gym.protocol.fidelity`)."""
    props = [Property(SPACES_PROPERTY, pb.STRING, "the exact spaces (and dm_env specs) of this agent's env, "
                      "as dmrpc_gym describes them, and what the env says of itself",
                      read=lambda: interface.description(env_facts(env)))]
    if rgb_render(env) is not None:
        props.append(Property(FRAME_PROPERTY, pb.UINT8, "the env's render() of its current state, made "
                              "when read (uint8, H x W x C)", read=frame, shape=(-1, -1, -1)))
    return props
