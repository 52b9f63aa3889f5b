"""N Godot games stepped at once (gym.make_vec), and Godot games served over dm_env_rpc."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_adaptor
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb

from dmrpc_gym.client.vector import DmRpcVectorEnv
import servers
from dmrpc_gym.integrations.godot import GodotVectorEnv, make_godot_catch
from dmrpc_gym.server import Server
from godot_support import drawing_godot, live_games, no_games_left, require_godot  # noqa: F401

require_godot()
pytestmark = pytest.mark.usefixtures("no_games_left")


@pytest.fixture(scope="module")
def envs():
    envs = gym.make_vec("dmrpc/GodotCatch-v0", num_envs=3, vectorization_mode="vector_entry_point")
    yield envs
    envs.close()


def test_make_vec_gives_one_game_process_per_env(envs):
    assert isinstance(envs, GodotVectorEnv)
    pids = {p.pid for p in envs.processes}
    assert len(pids) == 3 and all(p.poll() is None for p in envs.processes)
    assert envs.single_action_space == gym.spaces.Discrete(3)
    assert envs.action_space == gym.spaces.MultiDiscrete([3, 3, 3])
    assert envs.observation_space.shape == (3, 3)


def test_vector_steps_match_single_envs_with_the_same_seeds(envs):
    obs, _ = envs.reset(seed=10)
    singles = [make_godot_catch() for _ in range(3)]
    try:
        expected = [env.reset(seed=10 + i)[0] for i, env in enumerate(singles)]
        np.testing.assert_array_equal(obs, np.stack(expected))
        for t in range(5):
            actions = np.array([0, 1, 2])
            obs, rewards, terminated, truncated, _ = envs.step(actions)
            single = [env.step(int(a)) for env, a in zip(singles, actions)]
            np.testing.assert_array_equal(obs, np.stack([s[0] for s in single]))
            assert rewards.dtype == np.float64 and not terminated.any() and not truncated.any()
    finally:
        for env in singles:
            env.close()


def test_finished_games_restart_on_the_next_step(envs):
    obs, _ = envs.reset(seed=0)
    for steps in range(1, 100):
        obs, rewards, terminated, truncated, _ = envs.step(np.array([1, 1, 1]))
        if terminated.any():
            break
    assert terminated.all() and steps == 15          # every ball lands after 15 steps at 60 fps
    assert set(rewards) <= {1.0, -1.0}
    np.testing.assert_allclose(obs[:, 1], 1.0)
    obs, rewards, terminated, truncated, _ = envs.step(np.array([1, 1, 1]))   # NEXT_STEP autoreset
    np.testing.assert_array_equal(obs[:, 1], 0.0)
    assert not rewards.any() and not terminated.any()


def test_max_episode_steps_truncates_per_env():
    envs = gym.make_vec("dmrpc/GodotCatch-v0", num_envs=2, vectorization_mode="vector_entry_point",
                        max_episode_steps=3, continuous=True)
    try:
        assert envs.single_action_space == gym.spaces.Box(-1, 1, (1,), np.float32)
        envs.reset(seed=0)
        for _ in range(2):
            *_, truncated, _ = envs.step(np.zeros((2, 1), np.float32))
            assert not truncated.any()
        *_, truncated, _ = envs.step(np.zeros((2, 1), np.float32))
        assert truncated.all()
    finally:
        envs.close()


def test_a_bad_action_is_refused_before_any_game_steps(envs):
    envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"env 1: action 7 is not in the action space Discrete\(3\)"):
        envs.step(np.array([1, 7, 1]))
    obs, *_ = envs.step(np.array([1, 1, 1]))                 # all games still in step
    assert obs.shape == (3, 3)


def test_one_game_dying_is_an_error_for_the_vector_env():
    envs = GodotVectorEnv(2, make_env=make_godot_catch)
    try:
        envs.reset(seed=0)
        envs.processes[1].kill()
        with pytest.raises(ConnectionError, match="killed by signal SIGKILL"):
            envs.step(np.array([1, 1]))
    finally:
        envs.close()
    assert all(p.poll() is not None for p in envs.processes)


# -- served over dm_env_rpc ------------------------------------------------------------------------

def godot_catch_world(continuous: bool = False):
    """A server factory: one Godot Catch game per world (no render mode: no RGB observation)."""
    return make_godot_catch(continuous=continuous)


@pytest.fixture(scope="module")
def godot_server():
    server = Server(godot_catch_world).start()
    yield server
    server.stop()


def _chase(ball_x, paddle_x):
    return 1 if abs(ball_x - paddle_x) < 0.03 else (2 if ball_x > paddle_x else 0)


def test_the_official_dm_env_adaptor_plays_a_served_godot_game(godot_server):
    with servers.official(godot_server.address) as conn:
        env, world = dm_env_adaptor.create_and_join_world(conn, {"seed": 4}, {})
        try:
            assert set(env.observation_spec()) == {"observation"}       # reward, discount: the adaptor's
            spec = env.action_spec()["action"]
            assert (spec.minimum, spec.maximum) == (0, 2)
            returns = []
            for _ in range(3):
                timestep = env.reset()
                assert timestep.first() and timestep.observation["observation"].shape == (3,)
                steps = 0
                while not timestep.last():
                    ball_x, _, paddle_x = timestep.observation["observation"]
                    timestep = env.step({"action": np.int64(_chase(ball_x, paddle_x))})
                    steps += 1
                assert steps == 15 and timestep.discount == 0.0
                returns.append(timestep.reward)
            assert returns == [1.0, 1.0, 1.0]
        finally:
            env.close()
            conn.send(dpb.DestroyWorldRequest(world_name=world))


def test_a_served_godot_game_through_our_vector_env(godot_server):
    envs = DmRpcVectorEnv(2, godot_server.address, world_settings={"continuous": True},
                                           seed_setting="seed")
    try:
        assert envs.single_action_space == gym.spaces.Box(-1, 1, (1,), np.float32)
        obs, _ = envs.reset(seed=1)
        assert obs.shape == (2, 3)
        before = len(live_games())
        assert before >= 2                                       # one game process per world
        for _ in range(15):
            obs, rewards, terminated, truncated, _ = envs.step(np.full((2, 1), 0.5, np.float32))
        assert terminated.all() and set(rewards) <= {1.0, -1.0}
    finally:
        envs.close()


def test_dmrpc_gym_serve_module_factory_serves_godot_catch_with_frames_where_it_can_draw():
    server = servers.serve_like_cli("dmrpc_gym.integrations.godot:make_godot_catch")
    draws = drawing_godot() is not None                         # then the server builds games with rgb_array
    try:
        env = gym.make("dmrpc/Remote-v0", address=server.address, world_settings={"seed": 2},
                       render_mode="rgb_array" if draws else None)
        try:
            obs, _ = env.reset(seed=2)
            assert obs.shape == (3,)
            obs, reward, terminated, truncated, _ = env.step(1)
            assert obs[1] > 0.0 and (terminated, truncated) == (False, False)
            if draws:
                frame = env.render()
                assert frame.shape == (84, 84, 3) and frame.dtype == np.uint8
        finally:
            env.close()
    finally:
        server.stop()


def test_make_vec_of_the_generic_id_with_a_multidiscrete_action():
    from dmrpc_gym.integrations.godot import CATCH_PROJECT

    envs = gym.make_vec("dmrpc/Godot-v0", num_envs=2, vectorization_mode="vector_entry_point",
                        project=CATCH_PROJECT, scene="res://catch.tscn", max_episode_steps=5,
                        observation_space=gym.spaces.Box(0.0, 1.0, (3,), np.float32),
                        action_space=gym.spaces.MultiDiscrete([3]))              # goes out as [a] too
    try:
        assert isinstance(envs, GodotVectorEnv) and envs.action_space.shape == (2, 1)
        obs, _ = envs.reset(seed=0)
        obs, *_ = envs.step(np.array([[0], [2]]))
        assert obs[0, 2] < 0.5 < obs[1, 2]                          # left and right
        for _ in range(4):
            *_, truncated, _ = envs.step(np.array([[1], [1]]))
        assert truncated.all()
    finally:
        envs.close()
