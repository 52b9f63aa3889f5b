"""What a served env says of itself beyond its spaces, told to our clients so that the served env is
the local env for the ecosystem's checkers (:data:`~dmrpc_gym.protocol.fidelity.ENV_KEY` of the
``spaces`` description):

- ``metadata``: the env's own ``metadata``, its plain values only (``render_fps``, ``render_modes``,
  ``name``...): a client shows them as the env's, with the render modes that work through the bridge;
- ``max_episode_steps``: the env's ``spec.max_episode_steps`` (None: none, or no spec);
- ``rewards``: ``"defaultdict(int)"`` for a PettingZoo parallel env made by ``aec_to_parallel``, whose
  ``step()`` gives its rewards in one (a finished agent's reward is 0), else ``"dict"``;
- ``shared``: the groups of agents whose action (``actions``) or observation (``observations``)
  space is one object, as pistonball's agents share one action space.

>>> import gymnasium as gym
>>> facts = env_facts(gym.make("CartPole-v1"))
>>> facts["metadata"]["render_fps"], facts["metadata"]["render_modes"], facts["max_episode_steps"]
(50, ['human', 'rgb_array'], 500)
"""
from __future__ import annotations

from typing import Any

__all__ = ["env_facts"]

_PLAIN = (bool, int, float, str)


def _plain(value: Any) -> Any:
    """``value`` when it is made of plain values (lists and tuples of them as lists), else None."""
    if value is None or type(value) in _PLAIN:
        return value
    if isinstance(value, (list, tuple)) and all(type(v) in _PLAIN for v in value):
        return list(value)
    return None


def _groups(agents: list[str], space_of: Any) -> list[list[str]]:
    """The agents whose spaces (``space_of(agent)``) are one object, in groups of two or more."""
    by_object: dict[int, list[str]] = {}
    for agent in agents:
        by_object.setdefault(id(space_of(agent)), []).append(agent)
    return [group for group in by_object.values() if len(group) > 1]


def _rewards(env: Any) -> str:
    try:
        from pettingzoo.utils.conversions import aec_to_parallel_wrapper
    except ImportError:  # pragma: no cover - pettingzoo is a dependency
        return "dict"
    return "defaultdict(int)" if isinstance(env, aec_to_parallel_wrapper) else "dict"


def env_facts(env: Any) -> dict[str, Any]:
    """What ``env`` (a gymnasium env, a dm_env's adapter, or a PettingZoo env) says of itself (module doc)."""
    metadata = getattr(env, "metadata", None) or {}
    plain = {str(k): _plain(v) for k, v in metadata.items() if _plain(v) is not None}
    spec = getattr(env, "spec", None)
    steps = getattr(spec, "max_episode_steps", None)
    facts: dict[str, Any] = {"metadata": plain, "max_episode_steps": steps if type(steps) is int else None}
    agents = list(getattr(env, "possible_agents", None) or [])
    if agents and callable(getattr(env, "action_space", None)):
        facts["rewards"] = _rewards(env)
        facts["shared"] = {"actions": _groups(agents, env.action_space),
                           "observations": _groups(agents, env.observation_space)}
    return facts
