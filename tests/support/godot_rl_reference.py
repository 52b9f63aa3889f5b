"""Godot RL Agents' own Python side (``godot_rl.core.GodotEnv``, the ``godot-rl`` package) playing a game, for
comparison with dmrpc_gym's: run by the interpreter of a venv that has ``godot-rl`` (it pins gymnasium 1.0
and numpy < 2, which dmrpc_gym cannot share), it reads a JSON request on stdin and prints a JSON answer.

Request: ``{"game": LAUNCHER, "seed": S, "action_repeat": N, "actions": [[per-agent action dict, ...], ...]}``
(``"time_steps": K`` instead of ``"actions"``: time K steps of a fixed action and answer steps/s;
``"game_args": ["--key=value", ...]``: more arguments for the game, which godot-rl passes on).
The answer is the stdout line that starts with ``ANSWER `` (the game godot-rl starts shares stdout).
``LAUNCHER`` is an executable ``*.x86_64`` (godot-rl wants an exported game's name). The answer holds
the first observations and, per step, every agent's observation, reward and done, with godot-rl's
observation space as it describes it.
"""
from __future__ import annotations

import contextlib
import json
import socket
import sys
import time

import numpy as np


#: The answer is the line starting with this (the game, started by godot-rl, prints on the same stdout).
ANSWER = "ANSWER "


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def main() -> None:
    # Imported here: pytest's doctest pass imports this module in the main venv, which has no godot-rl.
    from godot_rl.core.godot_env import GodotEnv
    request = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):          # godot-rl prints; stdout carries the answer
        game_args = {arg[2:].split("=", 1)[0]: arg.split("=", 1)[1] for arg in request.get("game_args", [])}
        env = GodotEnv(env_path=request["game"], port=free_port(), seed=request["seed"],
                       action_repeat=request.get("action_repeat"), **game_args)   # more --key=value arguments
        try:
            answer = {"observation_space": str(env.observation_space), "n_agents": env.num_envs}
            observations, _ = env.reset()
            answer["reset"] = plain(observations)
            if "time_steps" in request:
                action = [[np.array([0.5], np.float32)] * env.num_envs, [0] * env.num_envs]    # move, run
                started = time.perf_counter()
                for _ in range(request["time_steps"]):
                    env.step(action)
                answer["steps_per_second"] = request["time_steps"] / (time.perf_counter() - started)
            else:
                steps = []
                for actions in request["actions"]:
                    observations, rewards, dones, _, infos = env.step(
                        [[np.array(agent[key], np.float32) if isinstance(agent[key], list) else agent[key]
                          for key in sorted(agent)] for agent in actions], order_ij=True)
                    steps.append({"obs": plain(observations), "reward": plain(rewards), "done": plain(dones)})
                answer["steps"] = steps
        finally:
            env.close()
            if env.proc is not None:
                env.proc.wait(timeout=10)
    print(ANSWER + json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
