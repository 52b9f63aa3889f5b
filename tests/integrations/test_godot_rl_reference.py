"""dmrpc_gym's Godot RL Agents side against the reference one, ``godot-rl``'s own ``GodotEnv``: the same
game (Walkers, under the real engine), seed and actions give identical observations, rewards and dones,
direct and served.

``godot-rl`` pins gymnasium 1.0 and numpy < 2, which dmrpc_gym cannot share an interpreter with: it runs
in a venv of its own, whose interpreter ``$DMRPC_GODOT_RL_PYTHON`` names (.ci/run's third stage), as a
subprocess (tests/support/godot_rl_reference.py). Skipped without it; failing instead under
``DMRPC_REQUIRE_GODOT_RL=1``.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import dmrpc_gym
from dmrpc_gym.integrations.godot_rl import WALKERS_PROJECT, GodotRLParallelEnv, GodotRLWorlds
from dmrpc_gym.integrations.godot_rl.spaces import neutral_action
from dmrpc_gym.server import Server
from godot_support import headless_godot, no_games_left, require_godot  # noqa: F401

require_godot()
pytestmark = [pytest.mark.usefixtures("no_games_left"),
              pytest.mark.filterwarnings("ignore::dmrpc_gym.integrations.godot_rl.GodotRLWarning")]
REFERENCE = Path(__file__).resolve().parents[1] / "support" / "godot_rl_reference.py"


def reference_python() -> str:
    """The interpreter of a venv with ``godot-rl``: skip (or fail, under DMRPC_REQUIRE_GODOT_RL=1) without one."""
    python = os.environ.get("DMRPC_GODOT_RL_PYTHON", "")
    why = None
    if not python:
        why = "DMRPC_GODOT_RL_PYTHON names no interpreter of a venv with godot-rl"
    elif subprocess.run([python, "-c", "import godot_rl.core.godot_env"], capture_output=True).returncode != 0:
        why = f"{python} cannot import godot_rl (pip install godot-rl in its venv)"
    if why is not None:
        if os.environ.get("DMRPC_REQUIRE_GODOT_RL") == "1":
            pytest.fail(f"DMRPC_REQUIRE_GODOT_RL=1 but {why}", pytrace=False)
        pytest.skip(why)
    return python


@pytest.fixture(scope="module")
def launcher(tmp_path_factory) -> Path:
    """godot-rl runs an exported game (``*.x86_64``): a script that runs the project with the engine."""
    path = tmp_path_factory.mktemp("game") / "walkers.x86_64"
    path.write_text(f'#!/bin/sh\nexec {" ".join(headless_godot())} --path "{WALKERS_PROJECT}" "$@"\n')
    path.chmod(0o755)
    return path


def reference(python: str, request: dict) -> dict:
    done = subprocess.run([python, str(REFERENCE)], input=json.dumps(request), capture_output=True, text=True,
                          timeout=120)
    answers = [line for line in done.stdout.splitlines() if line.startswith("ANSWER ")]
    assert done.returncode == 0 and answers, f"godot-rl's side failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(answers[-1][len("ANSWER "):])


def play_ours(env, steps: int, seed: int):
    """Our parallel env's episode under seeded actions: what each step sent (neutral for gone agents) and got."""
    rng = np.random.default_rng(seed)
    first, _ = env.reset()
    sent, got = [], []
    for _ in range(steps):
        if not env.agents:
            break
        actions = {a: {"move": rng.uniform(-1, 1, 1).astype(np.float32), "run": int(rng.integers(2))}
                   for a in env.agents}
        observations, rewards, terminations, _, _ = env.step(actions)
        sent.append([{"move": [float(v) for v in actions[a]["move"]], "run": actions[a]["run"]} if a in actions
                     else neutral_action(env.action_space(a)) for a in env.possible_agents])
        got.append((observations, rewards, terminations))
    return first, sent, got


def assert_observation(ours: dict, theirs: dict):
    assert sorted(ours) == sorted(theirs)
    for key in ours:
        np.testing.assert_array_equal(ours[key], np.asarray(theirs[key], ours[key].dtype), err_msg=key)


def test_godot_rl_sees_what_we_see_direct_and_served(launcher):
    python = reference_python()
    direct = GodotRLParallelEnv(WALKERS_PROJECT, seed=9, action_repeat=8)
    try:
        first, sent, got = play_ours(direct, 60, seed=1)
    finally:
        direct.close()
    assert len(sent) > 20
    theirs = reference(python, {"game": str(launcher), "seed": 9, "action_repeat": 8, "actions": sent})
    for i, agent in enumerate(direct.possible_agents):
        assert_observation(first[agent], theirs["reset"][i])
    for (observations, rewards, dones), step in zip(got, theirs["steps"]):
        for agent in observations:                       # the agents still in the episode
            i = direct.possible_agents.index(agent)
            assert_observation(observations[agent], step["obs"][i])
            assert rewards[agent] == step["reward"][i] and dones[agent] == step["done"][i]
    # The declared [-5, 5] box: ours keeps it; godot-rl 0.8.2 described it as Box(-1.0, 1.0, (2,), float32).
    print("godot-rl's observation space:", theirs["observation_space"])
    with Server(GodotRLWorlds(WALKERS_PROJECT)) as server:
        served = dmrpc_gym.parallel_env(server.address, world_settings={"seed": 9, "action_repeat": 8})
        try:
            served_first, served_sent, served_got = play_ours(served, 60, seed=1)
        finally:
            served.close()
    assert served_sent == sent
    for agent in first:
        assert_observation(served_first[agent], {k: v.tolist() for k, v in first[agent].items()})
    for (obs_a, rew_a, done_a), (obs_b, rew_b, done_b) in zip(served_got, got):
        assert rew_a == rew_b and done_a == done_b
        for agent in obs_a:
            assert_observation(obs_a[agent], {k: v.tolist() for k, v in obs_b[agent].items()})
