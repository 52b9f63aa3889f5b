"""Tag: the bundled multi-agent world, a small pursuit game on a grid (numpy only).

Pursuers chase evaders on a ``size`` x ``size`` grid. Every agent picks one of
five moves per step (``Discrete(5)``: stay, up, down, left, right; moves off the
grid are clipped), all agents move at once, and an evader is caught when a
pursuer ends on its cell or the two swap cells.

- A caught evader is *terminated* (reward -1); a free evader earns +0.01 a step.
- Pursuers share +1 per catch and pay 0.01 a step; they are terminated when
  every evader is caught.
- After ``max_steps`` steps everyone still playing is *truncated*.

So agents finish at different times: with two evaders, the first one caught
leaves while the others play on. With one evader (``evaders=1``) everyone
finishes on the same step.

Observations are float32 vectors: an agent's own position (scaled to [0, 1]),
the fraction of steps left, then the others relative to it (dx, dy scaled to
[-1, 1]). By default the roles see differently: a pursuer sees every other
agent as (dx, dy, present) (present is 0 once an evader is caught); an evader
sees only the pursuers, as (dx, dy). ``homogeneous=True`` gives every agent the
same space (a role flag, then every other agent as (dx, dy, present)), which
SuperSuit's vector conversion needs.

Settings (the constructor keywords; CreateWorld settings when served):
``size`` (8), ``pursuers`` (2), ``evaders`` (2), ``max_steps`` (50),
``homogeneous`` (False), ``seed`` (None: seeds the first reset that gets no
seed), ``render_mode`` (None or ``"rgb_array"``: an 8-pixel-per-cell image,
pursuers red, evaders blue).

>>> env = Tag(size=5, seed=0)
>>> obs, infos = env.reset(seed=0)
>>> env.agents
['pursuer_0', 'pursuer_1', 'evader_0', 'evader_1']
>>> obs["pursuer_0"].shape, obs["evader_0"].shape, env.action_space("evader_0")
((12,), (7,), Discrete(5))
>>> obs, rewards, terminations, truncations, infos = env.step({a: 0 for a in env.agents})
>>> rewards["pursuer_0"], rewards["evader_0"]
(-0.01, 0.01)
"""
from __future__ import annotations

from typing import Any, Mapping

import gymnasium
import numpy as np
from gymnasium.utils import seeding
from pettingzoo import ParallelEnv

__all__ = ["Tag", "agent_names", "agents_of", "MOVES"]

#: Action -> (dx, dy): stay, up, down, left, right.
MOVES = np.array([[0, 0], [0, -1], [0, 1], [-1, 0], [1, 0]], dtype=np.int64)
_CELL = 8
_PURSUER, _EVADER, _GROUND = (220, 60, 50), (50, 90, 220), (235, 235, 225)


def agent_names(pursuers: int = 2, evaders: int = 2) -> list[str]:
    """The agent names of a Tag world: ``pursuer_0``.. then ``evader_0``.."""
    return [f"pursuer_{i}" for i in range(int(pursuers))] + [f"evader_{i}" for i in range(int(evaders))]


def _setting(value: Any, name: str, low: int) -> int:
    number = int(np.asarray(value).item())
    if number < low:
        raise ValueError(f"Tag setting {name}={number}; expected an integer >= {low}")
    return number


class Tag(ParallelEnv):
    """Pursuers chase evaders on a grid; see the module docstring for the rules.

    >>> env = Tag(size=5, pursuers=1, evaders=1)
    >>> observations, infos = env.reset(seed=0)
    >>> env.agents
    ['pursuer_0', 'evader_0']
    >>> observations, rewards, terminations, truncations, infos = env.step({a: 0 for a in env.agents})
    """

    metadata = {"render_modes": ["rgb_array"], "name": "tag_v0", "render_fps": 5, "is_parallelizable": True}

    def __init__(self, size: int = 8, pursuers: int = 2, evaders: int = 2, max_steps: int = 50,
                 homogeneous: bool = False, seed: int | None = None, render_mode: str | None = None):
        self.size = _setting(size, "size", 2)
        self.pursuers = _setting(pursuers, "pursuers", 1)
        self.evaders = _setting(evaders, "evaders", 1)
        self.max_steps = _setting(max_steps, "max_steps", 1)
        self.homogeneous = bool(np.asarray(homogeneous).item())
        if self.pursuers + self.evaders > self.size * self.size:
            raise ValueError(f"Tag: {self.pursuers + self.evaders} agents do not fit on a "
                             f"{self.size}x{self.size} grid")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"Tag render_mode={render_mode!r}; expected None or 'rgb_array'")
        self.render_mode = render_mode
        self._seed = None if seed is None else int(np.asarray(seed).item())
        self.possible_agents = agent_names(self.pursuers, self.evaders)
        self.agents: list[str] = []
        n = len(self.possible_agents)
        self.observation_spaces = {a: self._observation_space(i < self.pursuers)
                                   for i, a in enumerate(self.possible_agents)}
        self.action_spaces = {a: gymnasium.spaces.Discrete(5) for a in self.possible_agents}
        self.state_space = gymnasium.spaces.Box(0.0, 1.0, (3 * n + 1,), np.float32)
        self.np_random, self.np_random_seed = None, None
        self._pos = np.zeros((n, 2), np.int64)
        self._present = np.zeros(n, bool)
        self._t = 0

    # -- spaces ----------------------------------------------------------------
    def _observation_space(self, pursuer: bool) -> gymnasium.spaces.Box:
        n = len(self.possible_agents)
        head = [0.0, 0.0, 0.0] + ([0.0] if self.homogeneous else [])
        if self.homogeneous or pursuer:
            others = [-1.0, -1.0, 0.0] * (n - 1)
        else:
            others = [-1.0, -1.0] * self.pursuers
        low = np.array(head + others, np.float32)
        high = np.ones_like(low)
        return gymnasium.spaces.Box(low, high, dtype=np.float32)

    def observation_space(self, agent: str) -> gymnasium.spaces.Box:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.spaces.Discrete:
        return self.action_spaces[agent]

    # -- episode ---------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is None and self._seed is not None:
            seed, self._seed = self._seed, None
        if seed is not None or self.np_random is None:
            self.np_random, self.np_random_seed = seeding.np_random(seed)
        n = len(self.possible_agents)
        cells = self.np_random.choice(self.size * self.size, size=n, replace=False)
        self._pos = np.stack([cells % self.size, cells // self.size], axis=1).astype(np.int64)
        self._present = np.ones(n, bool)
        self._t = 0
        self.agents = list(self.possible_agents)
        return {a: self._observe(i) for i, a in enumerate(self.possible_agents)}, \
            {a: {} for a in self.possible_agents}

    def step(self, actions: dict[str, Any]):
        if not self.agents:
            raise RuntimeError("Tag: no agent is playing; call reset()")
        names = self.possible_agents
        index = {a: i for i, a in enumerate(names)}
        unknown = [a for a in actions if a not in index]
        if unknown:
            raise ValueError(f"Tag: actions for unknown agents {unknown}; the agents are {names}")
        live = list(self.agents)
        old = self._pos.copy()
        for agent in live:
            move = actions.get(agent, 0)   # a missing action means "stay"
            move = 0 if move is None else int(np.asarray(move).item())
            if not 0 <= move < len(MOVES):
                raise ValueError(f"Tag: action {move} of {agent!r} is not a move; expected 0..4")
            i = index[agent]
            self._pos[i] = np.clip(old[i] + MOVES[move], 0, self.size - 1)
        self._t += 1
        p = self.pursuers
        pursuer_new, pursuer_old = self._pos[:p], old[:p]
        caught = []
        for e in range(p, len(names)):
            if not self._present[e]:
                continue
            same = (pursuer_new == self._pos[e]).all(axis=1)
            swapped = (pursuer_new == old[e]).all(axis=1) & (pursuer_old == self._pos[e]).all(axis=1)
            if (same | swapped).any():
                caught.append(e)
        observations = {a: self._observe(index[a]) for a in live}
        self._present[caught] = False
        everyone_caught = not self._present[p:].any()
        out_of_time = self._t >= self.max_steps
        rewards, terminations, truncations, infos = {}, {}, {}, {}
        for agent in live:
            i = index[agent]
            if i < p:
                rewards[agent] = float(len(caught)) - 0.01
                terminations[agent] = everyone_caught
            else:
                rewards[agent] = -1.0 if i in caught else 0.01
                terminations[agent] = i in caught
            truncations[agent] = out_of_time and not terminations[agent]
            infos[agent] = {"caught": i in caught} if i >= p else {"catches": len(caught)}
        self.agents = [a for a in live if not (terminations[a] or truncations[a])]
        return observations, rewards, terminations, truncations, infos

    def _observe(self, i: int) -> np.ndarray:
        """Agent ``i``'s view (positions before this step's catches are removed)."""
        scale = self.size - 1
        pursuer = i < self.pursuers
        head = [*(self._pos[i] / scale), 1.0 - self._t / self.max_steps]
        if self.homogeneous:
            head.append(0.0 if pursuer else 1.0)
        parts = [np.array(head)]
        for j in range(len(self.possible_agents)):
            if j == i or (not self.homogeneous and not pursuer and j >= self.pursuers):
                continue
            rel = (self._pos[j] - self._pos[i]) / scale if self._present[j] else np.zeros(2)
            with_flag = self.homogeneous or pursuer
            parts.append(np.append(rel, float(self._present[j])) if with_flag else rel)
        return np.concatenate(parts).astype(np.float32)

    def state(self) -> np.ndarray:
        """The whole board: every agent's scaled position and presence, then the time used."""
        scale = self.size - 1
        cols = np.concatenate([self._pos / scale, self._present[:, None]], axis=1).reshape(-1)
        return np.append(cols, self._t / self.max_steps).astype(np.float32)

    def render(self) -> np.ndarray | None:
        """An RGB image of the board (uint8 HxWx3) in ``rgb_array`` mode, else ``None``."""
        if self.render_mode != "rgb_array":
            return None
        side = self.size * _CELL
        frame = np.empty((side, side, 3), np.uint8)
        frame[:] = _GROUND
        frame[::_CELL, :] = frame[:, ::_CELL] = (200, 200, 190)
        for j, (x, y) in enumerate(self._pos):
            if not self._present[j]:
                continue
            color = _PURSUER if j < self.pursuers else _EVADER
            frame[y * _CELL + 1:(y + 1) * _CELL - 1, x * _CELL + 1:(x + 1) * _CELL - 1] = color
        return frame

    def close(self) -> None:
        pass


def agents_of(settings: Mapping[str, Any]) -> list[str]:
    """The agents of a Tag world made with these CreateWorld settings.

    ``ValueError`` naming the settings when Tag does not take them.

    >>> agents_of({"pursuers": 1, "evaders": 1, "seed": 3})
    ['pursuer_0', 'evader_0']
    """
    try:
        return Tag(**settings).possible_agents
    except TypeError as err:
        raise ValueError(f"world_settings {dict(settings)} are not Tag's: {err}") from None
