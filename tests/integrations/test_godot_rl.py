"""Godot RL Agents games with the real headless Godot 3 engine: the bundled two-agent Walkers game,
direct and served over dm_env_rpc (skipped without an engine; failing instead under DMRPC_REQUIRE_GODOT=1)."""
from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import parallel_api_test

import dmrpc_gym
from dmrpc_gym.client.properties import Properties
from dmrpc_gym.integrations.godot_rl import (WALKERS_PROJECT, GodotRLEnv, GodotRLParallelEnv, GodotRLVectorEnv,
                                             GodotRLWorlds)
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.server import Server
from godot_support import FAULTS_PROJECT, live_games, no_games_left, require_godot  # noqa: F401

require_godot()
pytestmark = [pytest.mark.usefixtures("no_games_left"),
              pytest.mark.filterwarnings("ignore::dmrpc_gym.integrations.godot_rl.GodotRLWarning")]
ONE_AGENT = ["--agents=1"]


@pytest.fixture(scope="module")
def server():
    with Server(GodotRLWorlds(WALKERS_PROJECT)) as served:
        yield served


@pytest.fixture(scope="module")
def one_agent_server():
    with Server(GodotRLWorlds(WALKERS_PROJECT, extra_args=ONE_AGENT)) as served:
        yield served


def scripted_actions(agents, steps, seed=7):
    """The same actions every run: continuous moves and discrete runs from a seeded generator."""
    rng = np.random.default_rng(seed)
    return [{a: {"move": rng.uniform(-1, 1, 1).astype(np.float32), "run": int(rng.integers(2))} for a in agents}
            for _ in range(steps)]


def play(env, plan, seed=None):
    """Observations, rewards and terminations of ``plan``'s actions (agents that are done sit the rest out)."""
    observations, _ = env.reset(seed=seed)
    trace = [observations]
    for actions in plan:
        if not env.agents:
            break
        observations, rewards, terminations, truncations, _ = env.step({a: actions[a] for a in env.agents})
        assert not any(truncations.values())
        trace.append((observations, rewards, terminations))
    return trace


def assert_same(one, other):
    assert len(one) == len(other)
    for a, b in zip(one, other):
        if isinstance(a, tuple):
            for x, y in zip(a, b):
                assert x.keys() == y.keys()
                for agent in x:
                    if isinstance(x[agent], dict):
                        for key in x[agent]:
                            np.testing.assert_array_equal(x[agent][key], y[agent][key])
                    else:
                        assert x[agent] == y[agent]
        else:
            assert_same([(a,)], [(b,)])


def test_the_spaces_are_the_games_declared_ones():
    env = GodotRLParallelEnv(WALKERS_PROJECT, seed=0)
    try:
        assert env.possible_agents == ["walker_0", "walker_1"]
        assert env.observation_space("walker_0") == gym.spaces.Dict({
            "line_2d": gym.spaces.Box(0, 255, (2, 10, 1), np.uint8),
            "position": gym.spaces.Box(-5.0, 5.0, (2,), np.float32),      # the declared bounds, not -1..1
            "zone": gym.spaces.Discrete(3)})
        assert env.action_space("walker_1") == gym.spaces.Dict({
            "move": gym.spaces.Box(-1.0, 1.0, (1,), np.float32), "run": gym.spaces.Discrete(2)})
        observations, _ = env.reset()
        image = observations["walker_0"]["line_2d"]
        assert image.dtype == np.uint8 and sorted(np.unique(image)) == [0, 255]
    finally:
        env.close()


def test_rewards_depend_on_the_actions_and_a_seed_replays_an_episode():
    env = GodotRLParallelEnv(WALKERS_PROJECT, seed=5)
    try:
        plan = scripted_actions(env.possible_agents, 12)
        first = play(env, plan, seed=5)                     # the game just started with seed 5: no restart
        process = env.game.process
        assert_same(play(env, plan, seed=5), first)         # the game started again with seed 5
        assert env.game.process is not process and process.poll() is not None
        rewards = {}
        for run in (0, 1):
            env.reset(seed=5)
            rewards[run] = env.step({a: {"move": [0.0], "run": run} for a in env.agents})[1]
        assert all(rewards[1][a] == pytest.approx(rewards[0][a] - 0.05, abs=1e-5) for a in env.possible_agents)
        other = play(env, plan, seed=6)
        assert not np.array_equal(other[0]["walker_0"]["position"], first[0]["walker_0"]["position"])
    finally:
        env.close()


def test_parallel_api_test_passes_on_the_served_world(server):
    env = dmrpc_gym.parallel_env(server.address, world_settings={"seed": 1, "action_repeat": 2})
    try:
        parallel_api_test(env, num_cycles=60)
    finally:
        env.close()


def test_served_and_direct_are_identical_for_a_seed_and_actions(server):
    served = dmrpc_gym.parallel_env(server.address, world_settings={"seed": 11, "action_repeat": 4})
    direct = GodotRLParallelEnv(WALKERS_PROJECT, seed=11, action_repeat=4)
    try:
        plan = scripted_actions(direct.possible_agents, 50)
        served_trace, direct_trace = play(served, plan), play(direct, plan)
        assert len(direct_trace) > 20                      # episodes long enough to mean something
        assert_same(served_trace, direct_trace)
    finally:
        served.close()
        direct.close()


def test_call_is_a_method_and_a_read_only_property(server):
    direct = GodotRLParallelEnv(WALKERS_PROJECT, seed=2)
    served = dmrpc_gym.parallel_env(server.address, world_settings={"seed": 2})
    try:
        direct.reset(), served.reset()
        goals = direct.call("get_goal")
        assert len(goals) == 2 and all(-4.5 <= g <= 4.5 for g in goals)
        properties = Properties(served.connections["walker_0"])
        assert [float(v) for v in properties["call.get_goal"]] == goals
        assert direct.call("get_time_scale") == [1, 1]
        assert direct.call("get_episodes") == [2, 2]        # the start's reset and the protocol's
        assert list(properties["call.get_episodes"]) == ["2", "2"]
        assert "call.METHOD" in properties.specs()
        with pytest.raises(DmRpcError, match="PERMISSION_DENIED.*read-only"):
            properties["call.get_goal"] = np.array(["1"])
    finally:
        direct.close()
        served.close()


def test_a_one_agent_game_is_a_gymnasium_env_direct_and_served(one_agent_server):
    env = GodotRLEnv(WALKERS_PROJECT, seed=3, extra_args=ONE_AGENT)
    served = gym.make("dmrpc/Remote-v0", address=one_agent_server.address, world_settings={"seed": 3})
    try:
        check_env(env, skip_render_check=True)
        assert served.observation_space == env.observation_space and served.action_space == env.action_space
        obs_direct, _ = env.reset(seed=3)
        obs_served, _ = served.reset(seed=3)
        rng = np.random.default_rng(0)
        for _ in range(30):
            action = {"move": rng.uniform(-1, 1, 1).astype(np.float32), "run": int(rng.integers(2))}
            a, b = env.step(action), served.step(action)
            for key in a[0]:
                np.testing.assert_array_equal(a[0][key], b[0][key])
            assert a[1:4] == b[1:4] and a[3] is False
            if a[2]:
                env.reset(), served.reset()
    finally:
        env.close()
        served.close()


def test_a_vector_env_of_parallel_games(tmp_path):
    envs = GodotRLVectorEnv(WALKERS_PROJECT, n_parallel=2, seed=0, action_repeat=4)
    try:
        assert envs.num_envs == 4 and len({p.pid for p in envs.processes}) == 2
        observations, _ = envs.reset()
        assert observations["position"].shape == (4, 2)
        single = GodotRLParallelEnv(WALKERS_PROJECT, seed=1, action_repeat=4)     # game 1 of the vector
        try:
            first, _ = single.reset()
            np.testing.assert_array_equal(observations["position"][2], first["walker_0"]["position"])
        finally:
            single.close()
        ended = 0
        for _ in range(60):
            observations, rewards, terminations, truncations, _ = envs.step(envs.action_space.sample())
            ended += int(terminations.sum())
            assert not truncations.any()
        assert ended > 0                                  # the games reset their own agents
        assert len(envs.call("get_episodes")) == 4
    finally:
        envs.close()
    assert all(p.poll() is not None for p in envs.processes)


def mean_step_seconds(env, steps):
    """The mean wall time of ``steps`` steps of every live agent walking (a new episode when none is left)."""
    env.reset()
    started = time.perf_counter()
    for _ in range(steps):
        if not env.agents:
            env.reset()
        env.step({a: {"move": np.ones(1, np.float32), "run": 1} for a in env.agents})
    return (time.perf_counter() - started) / steps


def test_a_paced_game_runs_its_physics_frames_in_wall_time(server):
    """Paced (as Godot RL Agents runs a game: no --fixed-fps), a step of action_repeat R at speedup S lasts
    R / (60 * S) s: the game's own clock, so only a loose lower bound is checked, never an upper one."""
    speedup, repeat, steps = 4, 8, 12
    direct = GodotRLParallelEnv(WALKERS_PROJECT, seed=0, action_repeat=repeat, speedup=speedup, paced=True)
    unpaced = GodotRLParallelEnv(WALKERS_PROJECT, seed=0, action_repeat=repeat, speedup=speedup)
    vector = GodotRLVectorEnv(WALKERS_PROJECT, n_parallel=1, seed=0, paced=True)
    served = dmrpc_gym.parallel_env(server.address, world_settings={"seed": 0, "action_repeat": repeat,
                                                                    "speedup": speedup, "paced": True})
    try:
        assert "--fixed-fps" not in direct.game.process.args and "--fixed-fps" not in vector.processes[0].args
        assert unpaced.game.process.args[-6:-4] == ["--fixed-fps", "60"]       # the default, for tests
        step = repeat / (60 * speedup)
        assert mean_step_seconds(direct, steps) > 0.5 * step
        assert mean_step_seconds(served, steps) > 0.5 * step
        assert Properties(served.connections["walker_0"])["call.get_time_scale"].tolist() == ["4", "4"]
    finally:
        for env in (direct, unpaced, vector, served):
            env.close()
    with pytest.raises(ValueError, match="paced must be True or False; got 'yes'"):
        GodotRLParallelEnv(WALKERS_PROJECT, paced="yes")
    with pytest.raises(DmRpcError, match="paced must be true or false; got 2"):
        dmrpc_gym.parallel_env(server.address, world_settings={"paced": 2})


def test_destroying_a_world_and_closing_an_env_end_the_game(server):
    env = GodotRLParallelEnv(WALKERS_PROJECT)
    process = env.game.process
    env.close()
    assert process.poll() == 0                           # it quit on `close`
    served = dmrpc_gym.parallel_env(server.address)
    served.reset()
    assert len(live_games()) == 1
    served.close()                                       # destroys the world it made
    deadline = time.monotonic() + 10
    while live_games() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not live_games()


def test_a_game_that_never_connects_is_an_error_and_is_ended():
    started = time.monotonic()
    with pytest.raises(TimeoutError) as excinfo:
        GodotRLParallelEnv(FAULTS_PROJECT, connect_timeout=4.0, extra_args=["--fault=idle"])
    message = str(excinfo.value)
    assert time.monotonic() - started < 20
    assert str(FAULTS_PROJECT) in message and "within 4 s" in message and "(port " in message
    assert "faults: idling, never connecting" in message
    assert not live_games()


def test_a_game_killed_mid_episode_fails_direct_and_served(server):
    env = GodotRLParallelEnv(WALKERS_PROJECT)
    env.reset()
    env.game.process.kill()
    with pytest.raises(ConnectionError, match="killed by signal SIGKILL"):
        env.step({a: {"move": [0.0], "run": 0} for a in env.agents})
    env.close()
    served = dmrpc_gym.parallel_env(server.address)
    try:
        served.reset()
        (pid, _), = live_games()
        import os
        import signal
        os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(Exception, match="(?s)killed by signal SIGKILL.*walkers: seed"):
            served.step({a: {"move": np.zeros(1, np.float32), "run": 0} for a in served.agents})
        assert time.monotonic() - started < 20
    finally:
        served.close()


def test_a_served_game_is_served_by_the_command_line(tmp_path):
    from dmrpc_gym.app.serve_command import serve_target
    assert serve_target(f"godot-rl:{WALKERS_PROJECT}").path == str(WALKERS_PROJECT)
    with pytest.raises(ValueError, match="does not exist"):
        serve_target(f"godot-rl:{tmp_path / 'nothing'}")
    with pytest.raises(ValueError, match="names no game"):
        serve_target("godot-rl:")


def test_dmrpc_gym_serve_serves_a_game_folder_and_ends_its_games():
    import os
    import signal
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
    from processes import ROOT, ServedProcess

    served = ServedProcess(0, f"godot-rl:{WALKERS_PROJECT.relative_to(ROOT)}")
    try:
        line = served.processes[-1].stdout.readline()
        assert 'dmrpc_gym.parallel_env(' in line and '["walker_0", "walker_1"]' in line, line
        env = dmrpc_gym.parallel_env(served.address, world_settings={"seed": 4, "speedup": 2})
        env.reset()
        env.step({a: {"move": np.ones(1, np.float32), "run": 1} for a in env.agents})
        assert Properties(env.connections["walker_0"])["call.get_time_scale"].tolist() == ["2", "2"]  # speedup
        games = [pid for pid, _ in live_games()]
        assert len(games) == 1                          # the connect line's game has quit; the world's runs
        served.processes[-1].send_signal(signal.SIGINT)  # serve stops with the world held: its game ends
        assert served.processes[-1].wait(30) == 0
        started = time.monotonic()
        env.close()                                      # the server is gone: close still returns
        assert time.monotonic() - started < 15
        deadline = time.monotonic() + 10
        while any(os.path.exists(f"/proc/{pid}") and "Z" not in open(f"/proc/{pid}/stat").read().split()[2]
                  for pid in games) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in games if os.path.exists(f"/proc/{pid}")
                    and open(f"/proc/{pid}/stat").read().split()[2] != "Z"]
    finally:
        served.close()
