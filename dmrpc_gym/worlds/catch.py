"""Catch: the classic tiny RL task, as a gymnasium Env.

A ball starts in a random column of the top row and falls one row per step;
the agent moves a paddle along the bottom row (``paddle``: -1 left, 0 stay,
+1 right). When the ball reaches the bottom row the episode terminates with
reward +1 if the paddle is under it, -1 otherwise (0 on every other step).
With the default 10x10 board an episode is 9 steps long.

Served over dm_env_rpc the spaces become exactly: action ``paddle`` INT8
scalar in [-1, 1]; observation ``board`` FLOAT [rows, columns] in [0, 1] (1
where the ball and the paddle are). The spaces are bare (a ``Box`` and a
``Discrete``); ``metadata["spec_names"]`` gives their tensors those names.

>>> env = Catch()
>>> obs, info = env.reset(seed=3)
>>> obs.shape, int(obs[0].argmax()) == info["ball"][1]
((10, 10), True)
>>> total = 0.0
>>> while True:
...     ball, paddle = env.ball, env.paddle
...     obs, reward, terminated, truncated, info = env.step(np.int8(np.sign(ball[1] - paddle)))
...     total += reward
...     if terminated:
...         break
>>> total
1.0
>>> Catch(render_mode="rgb_array").render().shape  # a 10x upscaled frame
(100, 100, 3)
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["Catch", "make_catch"]

_SCALE = 10
_BACKGROUND = (16, 16, 32)
_BALL = (255, 200, 40)
_PADDLE = (60, 200, 255)


class Catch(gym.Env):
    """Catch the falling ball with the paddle (see the module doc).

    Args:
        rows / columns: board size (at least 2 x 1).
        render_mode: None or ``"rgb_array"`` (a ``rows*10 x columns*10 x 3`` uint8 frame).

    ``info`` has ``ball`` (row, column) and ``paddle`` (column).

    >>> env = Catch()
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, obs.sum(), env.action_space
    ((10, 10), np.float32(2.0), Discrete(3, start=-1, dtype=int8))
    >>> obs, reward, terminated, truncated, info = env.step(np.int8(1))
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10,
                "spec_names": {"observation": "board", "action": "paddle"}}

    def __init__(self, rows: int = 10, columns: int = 10, render_mode: str | None = None):
        rows, columns = int(rows), int(columns)
        if rows < 2 or columns < 1:
            raise ValueError(f"Catch needs at least 2 rows and 1 column, got {rows}x{columns}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.rows, self.columns, self.render_mode = rows, columns, render_mode
        self.observation_space = spaces.Box(0.0, 1.0, (rows, columns), np.float32)
        self.action_space = spaces.Discrete(3, start=-1, dtype=np.int8)
        self.ball = (0, 0)
        self.paddle = columns // 2
        self._done = True

    def _observation(self) -> np.ndarray:
        board = np.zeros((self.rows, self.columns), np.float32)
        board[self.ball] = 1.0
        board[self.rows - 1, self.paddle] = 1.0
        return board

    def _info(self) -> dict[str, Any]:
        return {"ball": self.ball, "paddle": self.paddle}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.ball = (0, int(self.np_random.integers(self.columns)))
        self.paddle = self.columns // 2
        self._done = False
        return self._observation(), self._info()

    def step(self, action: Mapping[str, Any] | int):
        if self._done:
            raise RuntimeError("Catch.step() called on a finished episode; call reset() first")
        move = action["paddle"] if isinstance(action, Mapping) else action
        move = int(move)
        if move not in (-1, 0, 1):
            raise ValueError(f"action 'paddle' must be -1, 0 or 1, got {move}")
        self.paddle = min(max(self.paddle + move, 0), self.columns - 1)
        self.ball = (self.ball[0] + 1, self.ball[1])
        terminated = self.ball[0] == self.rows - 1
        reward = 0.0
        if terminated:
            reward = 1.0 if self.ball[1] == self.paddle else -1.0
            self._done = True
        return self._observation(), reward, terminated, False, self._info()

    def render(self) -> np.ndarray:
        if self.render_mode != "rgb_array":
            raise ValueError(f"Catch was created with render_mode={self.render_mode!r}; "
                             f"use render_mode='rgb_array' to render frames")
        frame = np.empty((self.rows, self.columns, 3), np.uint8)
        frame[:] = _BACKGROUND
        frame[self.rows - 1, self.paddle] = _PADDLE
        frame[self.ball] = _BALL
        return np.repeat(np.repeat(frame, _SCALE, axis=0), _SCALE, axis=1)


def make_catch(rows: int = 10, columns: int = 10, render_mode: str | None = None) -> Catch:
    """The factory the servers use: ``Catch(rows, columns, render_mode)``."""
    return Catch(rows=rows, columns=columns, render_mode=render_mode)
