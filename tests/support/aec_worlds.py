"""PettingZoo AEC worlds for the server tests: a turn-based duel, parallelizable or not."""
import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.utils import wrappers, agent_selector

class Duel(AECEnv):
    """Two agents take turns; every round (both acted) advances t; the episode ends at t == 3."""

    metadata = {"name": "duel_v0", "render_modes": [], "is_parallelizable": True}
    def __init__(self):
        self.possible_agents = ["red", "blue"]
    def observation_space(self, agent): return spaces.Box(0, 10, (1,), np.float32)
    def action_space(self, agent): return spaces.Discrete(3)
    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents); self.t = 0
        self.rewards = {a: 0.0 for a in self.agents}; self._cumulative_rewards = dict(self.rewards)
        self.terminations = {a: False for a in self.agents}; self.truncations = dict(self.terminations)
        self.infos = {a: {} for a in self.agents}
        self._selector = agent_selector.AgentSelector(self.agents); self.agent_selection = self._selector.next()
    def observe(self, agent): return np.array([self.t], np.float32)
    def step(self, action):
        if self.terminations[self.agent_selection] or self.truncations[self.agent_selection]:
            return self._was_dead_step(action)
        self._cumulative_rewards[self.agent_selection] = 0
        self.rewards = {a: float(action) if a == self.agent_selection else 0.0 for a in self.agents}
        if self._selector.is_last():
            self.t += 1
            if self.t >= 3:
                self.terminations = {a: True for a in self.agents}
        self.agent_selection = self._selector.next()
        self._accumulate_rewards()

class Tangled(Duel):
    """The same game, but not declared safe to step in parallel rounds."""

    metadata = {"name": "tangled_v0", "render_modes": []}


def env():
    """The AEC form, as PettingZoo modules offer it."""
    return wrappers.OrderEnforcingWrapper(Duel())


def tangled_env():
    return wrappers.OrderEnforcingWrapper(Tangled())


def parallel_env():
    """The parallel form: what serving the module finds."""
    from pettingzoo.utils.conversions import aec_to_parallel
    return aec_to_parallel(env())
