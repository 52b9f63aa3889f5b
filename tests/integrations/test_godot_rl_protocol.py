"""The Godot RL Agents protocol's Godot 4 message forms (spaces per agent, ``agent_policy_names``, ``info``)
and its failures, against a game side scripted in Python run as its own process over TCP
(tests/support/godot_rl_standin.py): Debian has no Godot 4 engine."""
from __future__ import annotations

import os
import stat
import sys
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

import dmrpc_gym
from dmrpc_gym.integrations.godot_rl import (GodotRLGame, GodotRLParallelEnv, GodotRLProtocolError, GodotRLWarning,
                                             GodotRLWorlds)
from dmrpc_gym.server import Server

STANDIN = Path(__file__).resolve().parents[1] / "support" / "godot_rl_standin.py"


def launcher(folder: Path, name: str, body: str) -> Path:
    """An executable the env runs as an exported game."""
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(scope="module")
def game_path(tmp_path_factory) -> Path:
    return launcher(tmp_path_factory.mktemp("standin"), "standin.x86_64", f'exec "{sys.executable}" "{STANDIN}" "$@"')


def quiet(**kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GodotRLWarning)
        return GodotRLParallelEnv(**kwargs)


def test_the_godot4_forms_give_each_agent_its_names_and_spaces(game_path):
    env = quiet(game=game_path, seed=4)
    try:
        assert env.game.process.args == [str(game_path), "--headless", "--disable-render-loop",
                                         f"--port={env.game.port}", "--env_seed=4"]
        assert env.possible_agents == ["chaser_0", "chaser_1", "runner_2"]
        assert env.observation_space("chaser_0") == gym.spaces.Dict({
            "lane": gym.spaces.Discrete(4), "obs": gym.spaces.Box(-10.0, 10.0, (3,), np.float32)})
        assert env.observation_space("runner_2") == gym.spaces.Dict({
            "eyes_2d": gym.spaces.Box(0, 255, (2, 2, 3), np.uint8), "obs": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
        assert env.action_space("chaser_1") == gym.spaces.Dict({"turn": gym.spaces.Discrete(3)})
        assert env.action_space("runner_2") == gym.spaces.Dict({"legs": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
        observations, infos = env.reset()
        assert observations["runner_2"]["eyes_2d"].dtype == np.uint8
        assert all(observations[a] in env.observation_space(a) for a in env.agents)
        assert env.call("get_score") == ["get_score:0", "get_score:1", "get_score:2"]
    finally:
        env.close()
    assert env.game.process.poll() is not None


def test_done_agents_leave_and_the_episode_ends_when_none_is_left(game_path):
    env = quiet(game=game_path, seed=1)
    try:
        env.reset()
        left, steps = [], 0
        while env.agents:
            actions = {a: ({"turn": 2} if a.startswith("chaser") else {"legs": np.array([0.5, 0.5], np.float32)})
                       for a in env.agents}
            observations, rewards, terminations, truncations, infos = env.step(actions)
            steps += 1
            assert set(observations) == set(actions) and not any(truncations.values())
            assert all(infos[a] == {"steps": 0 if terminations[a] else steps} for a in actions)
            left += [a for a in actions if terminations[a]]
        # chaser_0 is done at step 3, chaser_1 at 4, runner_2 at 5; the game got a neutral action for each
        # gone agent (else it would have refused the step) and what came back for it was dropped.
        assert left == ["chaser_0", "chaser_1", "runner_2"] and steps == 5
        with pytest.raises(RuntimeError, match="no agent is left"):
            env.step({})
        with pytest.raises(ValueError, match="not in this episode's agents"):
            env.reset()
            env.step({"nobody": {}})
    finally:
        env.close()


def test_the_godot3_forms_share_one_space_and_name_agents_by_place(game_path):
    env = quiet(game=game_path, extra_args=["--mode=legacy"])
    try:
        assert env.possible_agents == ["agent_0", "agent_1", "agent_2"]
        assert env.observation_space("agent_0") == env.observation_space("agent_2")
        env.reset()
        *_, infos = env.step({a: {"turn": 1} for a in env.agents})
        assert infos == {a: {} for a in env.possible_agents}
    finally:
        env.close()


def test_parallel_api_test_passes_direct_and_served(game_path):
    env = quiet(game=game_path, seed=0)
    try:
        parallel_api_test(env, num_cycles=20)
    finally:
        env.close()
    with Server(GodotRLWorlds(game_path)) as server:
        served = dmrpc_gym.parallel_env(server.address, world_settings={"seed": 0})
        try:
            parallel_api_test(served, num_cycles=20)
        finally:
            served.close()


def test_the_warning_is_said_once_by_name(game_path, tmp_path):
    fresh = launcher(tmp_path, "warned.x86_64", f'exec "{sys.executable}" "{STANDIN}" "$@"')
    with pytest.warns(GodotRLWarning) as said:
        first = GodotRLParallelEnv(fresh)
        second = GodotRLParallelEnv(fresh)
    first.close(), second.close()
    texts = [str(w.message) for w in said if issubclass(w.category, GodotRLWarning)]
    assert len(texts) == 1 and str(fresh) in texts[0]
    for loss in ("reported as `terminated`, never `truncated`", "no terminal observation",
                 "rounds floats", "without sending `done`"):
        assert loss in texts[0]


def test_several_games_listen_on_their_own_ports(game_path):
    games = [quiet(game=game_path) for _ in range(3)]
    try:
        assert len({env.game.port for env in games}) == 3
        for env in games:
            env.reset()
    finally:
        for env in games:
            env.close()


# -- failures ------------------------------------------------------------------------------------

def test_a_game_that_never_connects_is_an_error_naming_path_port_and_output(tmp_path):
    idle = launcher(tmp_path, "idle.x86_64", 'echo "idle game: loading forever"; exec sleep 300')
    started = time.monotonic()
    with pytest.raises(TimeoutError) as excinfo:
        quiet(game=idle, connect_timeout=3.0)
    message = str(excinfo.value)
    assert time.monotonic() - started < 15
    assert str(idle) in message and "within 3 s" in message and "idle game: loading forever" in message
    port = int(message.split("(port ")[1].split(")")[0])
    assert f"127.0.0.1:{port}" in message
    assert "still running" in message and "the game's process was ended" in message
    assert not any(str(idle) in " ".join(p) for p in _processes())


def test_a_game_that_exits_before_connecting_is_said_at_once(tmp_path):
    broken = launcher(tmp_path, "broken.x86_64", 'echo "broken game: missing pck" >&2; exit 7')
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=r"(?s)exited before connecting.*exited with code 7.*missing pck"):
        quiet(game=broken, connect_timeout=30.0)
    assert time.monotonic() - started < 10


def test_a_game_that_crashes_mid_episode_fails_with_its_output(game_path):
    env = quiet(game=game_path, extra_args=["--mode=crash"])
    env.reset()
    actions = {"chaser_0": {"turn": 0}, "chaser_1": {"turn": 0}, "runner_2": {"legs": [0.0, 0.0]}}
    env.step(actions), env.step(actions)
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=r"(?s)step.*exited with code 5.*crashing mid-episode"):
        env.step(actions)
    assert time.monotonic() - started < 10
    with pytest.raises(ConnectionError, match="step failed earlier"):
        env.step(actions)
    env.close()


def test_a_game_that_stops_answering_times_out_and_is_ended(game_path):
    env = quiet(game=game_path, extra_args=["--mode=silent"], step_timeout=2.0)
    env.reset()
    actions = {"chaser_0": {"turn": 0}, "chaser_1": {"turn": 0}, "runner_2": {"legs": [0.0, 0.0]}}
    env.step(actions), env.step(actions)
    with pytest.raises(TimeoutError, match=r"(?s)no answer within 2 s.*no longer answering"):
        env.step(actions)
    assert env.game.process.poll() is not None
    env.close()


def test_a_message_that_is_not_json_is_a_protocol_error(game_path):
    env = quiet(game=game_path, extra_args=["--mode=garbage"])
    env.reset()
    actions = {"chaser_0": {"turn": 0}, "chaser_1": {"turn": 0}, "runner_2": {"legs": [0.0, 0.0]}}
    env.step(actions), env.step(actions)
    with pytest.raises(GodotRLProtocolError, match="not valid JSON.*this is not json"):
        env.step(actions)
    env.close()


def test_bad_actions_and_paths_are_named(game_path, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist; expected a Godot project folder"):
        GodotRLGame(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="holds no project.godot"):
        GodotRLGame(tmp_path)
    env = quiet(game=game_path)
    try:
        env.reset()
        with pytest.raises(ValueError, match=r"agent 'chaser_0'.*'turn' must be an int in \[0, 3\)"):
            env.step({"chaser_0": {"turn": 5}, "chaser_1": {"turn": 0}, "runner_2": {"legs": [0.0, 0.0]}})
        with pytest.raises(ValueError, match=r"'legs' must have shape \(2,\)"):
            env.step({"chaser_0": {"turn": 0}, "chaser_1": {"turn": 0}, "runner_2": {"legs": [0.0]}})
        env.step({"chaser_0": {"turn": 0}, "chaser_1": {"turn": 0}, "runner_2": {"legs": [0.0, 0.0]}})  # still usable
    finally:
        env.close()


def _processes() -> list[list[str]]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found.append(Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0"))
            except OSError:
                pass
    return found
