"""The bundled Godot world: Catch, a Godot 3 project shipped in the package (``dmrpc_gym/worlds/godot_catch``).

A ball falls from a random column; the paddle moves under it. The observation is
``[ball_x, ball_y, paddle_x]`` in [0, 1] (``Box(0, 1, (3,), float32)``); the reward is +1
for a catch and -1 for a miss, and the episode ends when the ball lands (15 steps at
the default 60 fps). The action is ``Discrete(3)`` (left, stay, right) or, with
``continuous=True``, ``Box(-1, 1, (1,), float32)``: the paddle's velocity. The game
seeds its ball from the seed sent with each reset, so it is reproducible.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

import dmrpc_gym.worlds
from dmrpc_gym.integrations.godot.env import GodotEnv
from dmrpc_gym.integrations.godot.vector import GodotVectorEnv

__all__ = ["CATCH_PROJECT", "CATCH_OBSERVATION_SPACE", "make_godot_catch", "make_godot_catch_vector"]

#: The Godot project folder of the bundled Catch world.
CATCH_PROJECT = Path(dmrpc_gym.worlds.__file__).resolve().parent / "godot_catch"
CATCH_OBSERVATION_SPACE = gym.spaces.Box(0.0, 1.0, (3,), np.float32)


def make_godot_catch(continuous: bool = False, godot: str | os.PathLike | Sequence[str] | None = None,
                     fps: int = 60, render_mode: str | None = None, connect_timeout: float = 30.0,
                     step_timeout: float | None = 30.0, extra_args: Sequence[str] = ()) -> GodotEnv:
    """The bundled Catch game as a :class:`GodotEnv` (``continuous``: a Box action instead of Discrete(3))."""
    return GodotEnv(
        project=CATCH_PROJECT, scene="res://catch_box.tscn" if continuous else "res://catch.tscn",
        observation_space=CATCH_OBSERVATION_SPACE,
        action_space=gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(3),
        godot=godot, fps=fps, render_mode=render_mode, connect_timeout=connect_timeout,
        step_timeout=step_timeout, extra_args=extra_args)


def make_godot_catch_vector(num_envs: int = 1, *, continuous: bool = False, max_episode_steps: int | None = None,
                            **kwargs: Any) -> GodotVectorEnv:
    """``num_envs`` Catch games stepped at once (the vector entry point of ``dmrpc/GodotCatch-v0``)."""
    return GodotVectorEnv(num_envs, max_episode_steps=max_episode_steps,
                          make_env=functools.partial(make_godot_catch, continuous), **kwargs)
