"""``DmRpcMultiAgentEnv``: a PettingZoo parallel env (a multi-agent dm_env_rpc world) as an RLlib MultiAgentEnv.

Ours rather than RLlib's ``ParallelPettingZooEnv``, because that wrapper (ray
2.60) ends an episode only when *all* agents terminate or *all* truncate: in
Tag, an evader caught on the last step (terminated) while the others run out
of time (truncated) leaves both ``"__all__"`` flags False, so RLlib's vector
env never resets it and the next step fails on a finished world. It also
passes spaces through as they are (a world's Dict observations or
``Discrete(start=-1)`` actions reach RLlib unchanged) and resets the env once
more in its constructor. Here:

- the episode is over (``"__all__"``) when no agent is left playing; it is
  ``terminated`` unless an agent was truncated on the last step;
- each agent gets the flat-spaces view of :class:`~dmrpc_gym.integrations.flat_spaces.FlatSpaces`
  (observations and actions mapped one agent at a time);
- ``agents`` are the agents the latest ``reset``/``step`` reported on (the
  ones still playing plus those that finished in that step), which is what
  RLlib's env checker expects; agents that finished earlier are not sent
  actions again.

The class is an RLlib ``MultiAgentEnv`` when ray is installed; without ray it
is a plain ``gymnasium.Env`` with the same behaviour, so this module imports
anywhere.

>>> import dmrpc_gym
>>> env = DmRpcMultiAgentEnv(dmrpc_gym.parallel_env(   # the bundled Tag world
...     world_settings={"size": 4, "pursuers": 1, "evaders": 1, "max_steps": 2}))
>>> observations, infos = env.reset(seed=0)
>>> sorted(observations), env.get_action_space("evader_0")
(['evader_0', 'pursuer_0'], Discrete(5))
>>> observations, rewards, terminateds, truncateds, infos = env.step({"pursuer_0": 0, "evader_0": 0})
>>> observations, rewards, terminateds, truncateds, infos = env.step({"pursuer_0": 0, "evader_0": 0})
>>> truncateds
{'pursuer_0': True, 'evader_0': True, '__all__': True}
>>> env.close()
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import gymnasium as gym

from dmrpc_gym.integrations.flat_spaces import sb3_action_transform, sb3_observation_transform

try:  # RLlib's base class when ray is installed (the module must import without it)
    from ray.rllib.env.multi_agent_env import MultiAgentEnv as _Base
except ImportError:
    _Base = gym.Env

__all__ = ["DmRpcMultiAgentEnv", "role"]


def role(agent_id: str) -> str:
    """An agent's name without its trailing number: the policy of a role (``pursuer_1`` -> ``pursuer``).

    Use it as RLlib's ``policy_mapping_fn`` to train one policy per role.

    >>> role("pursuer_1"), role("evader_0"), role("red")
    ('pursuer', 'evader', 'red')
    """
    return re.sub(r"_\d+$", "", str(agent_id))


class DmRpcMultiAgentEnv(_Base):
    """A PettingZoo ``ParallelEnv`` (typically a ``DmRpcParallelEnv``) as an RLlib multi-agent env.

    Args:
        env: the parallel env; it is closed by :meth:`close`.

    See the module doc for the episode-end and ``agents`` rules.

    >>> import dmrpc_gym
    >>> env = DmRpcMultiAgentEnv(dmrpc_gym.parallel_env(world_settings={"pursuers": 1, "evaders": 1}))
    >>> env.possible_agents, env.observation_spaces["pursuer_0"].shape
    (['pursuer_0', 'evader_0'], (6,))
    >>> env.close()
    """

    def __init__(self, env: Any):
        super().__init__()
        self.par_env = env
        self.possible_agents = list(env.possible_agents)
        self._agent_ids = set(self.possible_agents)
        self.agents: list = []
        self._to_flat, self._to_env = {}, {}
        observation_spaces, action_spaces = {}, {}
        for agent in self.possible_agents:
            observation_spaces[agent], self._to_flat[agent] = sb3_observation_transform(env.observation_space(agent))
            action_spaces[agent], self._to_env[agent] = sb3_action_transform(env.action_space(agent))
        self.observation_spaces, self.action_spaces = observation_spaces, action_spaces
        # RLlib's old API stack reads one Dict space keyed by agent.
        self.observation_space = gym.spaces.Dict(observation_spaces)
        self.action_space = gym.spaces.Dict(action_spaces)
        self.render_mode = getattr(env, "render_mode", None)

    def get_observation_space(self, agent_id: str) -> gym.Space:
        """``agent_id``'s flat observation space."""
        return self.observation_spaces[agent_id]

    def get_action_space(self, agent_id: str) -> gym.Space:
        """``agent_id``'s flat action space."""
        return self.action_spaces[agent_id]

    def _observe(self, observations: Mapping[str, Any]) -> dict[str, Any]:
        return {agent: self._to_flat[agent](obs) for agent, obs in observations.items()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """A new episode for every agent: ``(observations, infos)`` of the agents playing."""
        observations, infos = self.par_env.reset(seed=seed, options=options)
        self.agents = list(observations)
        return self._observe(observations), {agent: dict(infos.get(agent) or {}) for agent in observations}

    def step(self, action_dict: Mapping[str, Any]):
        """Act for the agents still playing (one without an action sends none); RLlib's 5-tuple with ``"__all__"``."""
        playing = list(self.par_env.agents)
        if not playing:
            raise RuntimeError("no agent is playing: the episode is over; call reset()")
        unknown = [agent for agent in action_dict if agent not in self._to_env]
        if unknown:
            raise ValueError(f"actions for unknown agents {unknown}; the agents are {self.possible_agents}")
        actions = {agent: None if action_dict.get(agent) is None else self._to_env[agent](action_dict[agent])
                   for agent in playing}
        observations, rewards, terminateds, truncateds, infos = self.par_env.step(actions)
        self.agents = list(observations)
        terminateds = {agent: bool(flag) for agent, flag in terminateds.items()}
        truncateds = {agent: bool(flag) for agent, flag in truncateds.items()}
        over = not self.par_env.agents
        truncateds["__all__"] = over and any(truncateds.values())
        terminateds["__all__"] = over and not truncateds["__all__"]
        return (self._observe(observations), {agent: float(r) for agent, r in rewards.items()},
                terminateds, truncateds, {agent: dict(info or {}) for agent, info in infos.items()})

    def render(self) -> Any:
        """The parallel env's ``render()``."""
        return self.par_env.render()

    def close(self) -> None:
        """Close the parallel env (idempotent as the parallel env's ``close``)."""
        self.par_env.close()
