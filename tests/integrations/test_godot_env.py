"""GodotEnv with the real headless Godot engine: the bundled Catch games (Discrete and Box actions)."""
from __future__ import annotations

import os
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import dmrpc_gym  # noqa: F401 - registers the dmrpc ids
from dmrpc_gym.integrations.godot import CATCH_PROJECT, GodotEnv, make_godot_catch
from godot_support import CATCH_OBS, drawing_godot, headless_godot, no_games_left, require_godot  # noqa: F401

require_godot()
pytestmark = pytest.mark.usefixtures("no_games_left")


@pytest.fixture(scope="module")
def catch():
    env = make_godot_catch()
    yield env
    env.close()


@pytest.fixture(scope="module")
def catch_box():
    env = make_godot_catch(continuous=True)
    yield env
    env.close()


def _episode(env, policy, seed=None):
    obs, _ = env.reset(seed=seed)
    observations, rewards = [obs], []
    while True:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        observations.append(obs)
        rewards.append(reward)
        if terminated or truncated:
            return observations, rewards, terminated, truncated


def _chase(obs):                     # Discrete: 0 left, 1 stay, 2 right
    ball_x, _, paddle_x = obs
    return 1 if abs(ball_x - paddle_x) < 0.03 else (2 if ball_x > paddle_x else 0)


def _chase_box(obs):                 # Box: the paddle's velocity
    return np.array([np.clip((obs[0] - obs[2]) * 20, -1, 1)], np.float32)


def test_gymnasium_check_env_passes(catch):
    check_env(catch, skip_render_check=True)


def test_the_box_action_game_passes_check_env(catch_box):
    assert catch_box.action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    check_env(catch_box, skip_render_check=True)


@pytest.mark.parametrize("game, policy", [("catch", _chase), ("catch_box", _chase_box)])
def test_done_is_terminated_and_the_chaser_catches(game, policy, request):
    env = request.getfixturevalue(game)
    for seed in range(5):
        observations, rewards, terminated, truncated = _episode(env, policy, seed)
        assert terminated is True and truncated is False
        assert rewards[-1] == 1.0 and all(r == 0.0 for r in rewards[:-1])
        assert all(type(r) is float for r in rewards)
        assert observations[-1][1] == pytest.approx(1.0)           # the ball reached the bottom
        assert all(o.dtype == np.float32 and o.shape == (3,) for o in observations)


def test_standing_still_misses_some_balls_and_the_reward_says_so(catch):
    finals = [_episode(catch, lambda obs: 1, seed)[1][-1] for seed in range(12)]
    assert set(finals) <= {1.0, -1.0} and -1.0 in finals


def test_a_seed_sent_with_reset_makes_the_game_reproducible(catch):
    first = [catch.reset(seed=seed)[0] for seed in (7, 8, 7)]
    np.testing.assert_array_equal(first[0], first[2])
    assert not np.array_equal(first[0], first[1])
    catch.reset(seed=11)
    run_a = [catch.reset()[0] for _ in range(3)]           # later resets continue the seeded generator
    catch.reset(seed=11)
    run_b = [catch.reset()[0] for _ in range(3)]
    np.testing.assert_array_equal(run_a, run_b)


def test_time_limits_are_gymnasiums_truncation():
    env = gym.make("dmrpc/GodotCatch-v0", max_episode_steps=4)
    try:
        _, rewards, terminated, truncated = _episode(env, lambda obs: 1, seed=0)
        assert (len(rewards), terminated, truncated) == (4, False, True)
    finally:
        env.close()


def test_the_generic_id_runs_a_project_and_scene_with_declared_spaces():
    env = gym.make("dmrpc/Godot-v0", project=str(CATCH_PROJECT), scene="res://catch.tscn",
                   observation_space=gym.spaces.Box(0.0, 1.0, (3,), np.float64), action_space=gym.spaces.Discrete(3))
    try:
        assert env.spec.nondeterministic
        obs, info = env.reset(seed=0)
        assert obs.dtype == np.float64 and info == {}
        assert isinstance(env.unwrapped.process.pid, int) and env.unwrapped.process.poll() is None
    finally:
        env.close()
    assert env.unwrapped.process.poll() is not None


@pytest.mark.parametrize("action, expected", [
    (3, "action 3 is not in the action space Discrete(3) (expected an integer in [0, 2])"),
    (1.5, "action 1.5 is not in the action space Discrete(3)"),
    ("left", "action 'left' is not in the action space Discrete(3)"),
])
def test_actions_are_checked_before_they_are_sent(catch, action, expected):
    catch.reset(seed=0)
    with pytest.raises(ValueError) as excinfo:
        catch.step(action)
    assert expected in str(excinfo.value)
    obs, *_ = catch.step(np.int64(1))                        # nothing was sent: the game still answers in turn
    assert obs.shape == (3,)


def test_box_actions_are_checked_too(catch_box):
    catch_box.reset(seed=0)
    with pytest.raises(ValueError, match=r"action \[2\.0\] is not in the action space Box\(-1\.0, 1\.0, \(1,\), float32\)"):
        catch_box.step([2.0])
    catch_box.step(np.array([0.5]))                             # float64 in bounds converts to float32


def test_an_observation_that_does_not_fit_its_space_is_a_clear_error():
    env = GodotEnv(project=CATCH_PROJECT, scene="res://catch.tscn", action_space=gym.spaces.Discrete(3),
                   observation_space=gym.spaces.Box(0.0, 1.0, (4,), np.float32))
    try:
        with pytest.raises(ValueError, match=r"the game's init_observation \[.*\] does not fit "
                                             r"Box\(0\.0, 1\.0, \(4,\), float32\): 3 value\(s\), expected 4"):
            env.reset(seed=0)
        with pytest.raises(ValueError, match=r"the game's observation \[.*\] does not fit"):
            env.step(1)                                    # the conversation stays in step
    finally:
        env.close()


def test_integer_observation_spaces_refuse_fractions():
    env = GodotEnv(project=CATCH_PROJECT, scene="res://catch.tscn", action_space=gym.spaces.Discrete(3),
                   observation_space=gym.spaces.MultiDiscrete([2, 2, 2]))
    try:
        with pytest.raises(ValueError, match=r"does not fit MultiDiscrete\(\[2 2 2\]\): expected integers"):
            env.reset(seed=0)
    finally:
        env.close()


def test_unsupported_spaces_are_refused_by_name():
    with pytest.raises(TypeError, match="action_space must be a gymnasium space of one of Box, Discrete"):
        GodotEnv(project=CATCH_PROJECT, scene="res://catch.tscn", observation_space=CATCH_OBS,
                 action_space=gym.spaces.Dict({"a": gym.spaces.Discrete(2)}))


def test_pickling_recreates_the_env_with_a_new_game(catch):
    catch.reset(seed=3)
    clone = pickle.loads(pickle.dumps(catch))
    try:
        assert clone.process.pid != catch.process.pid and clone.process.poll() is None
        np.testing.assert_array_equal(clone.reset(seed=3)[0], catch.reset(seed=3)[0])
        assert clone.action_space == catch.action_space
    finally:
        clone.close()


def test_close_is_idempotent_and_later_calls_say_closed():
    env = make_godot_catch()
    env.close()
    env.close()
    assert env.process.poll() is not None
    with pytest.raises(ConnectionError, match="closed"):
        env.reset()


def test_rgb_array_on_the_headless_build_is_a_clear_error_not_a_hang():
    env = make_godot_catch(render_mode="rgb_array", godot=headless_godot())
    try:
        env.reset(seed=0)
        with pytest.raises(RuntimeError, match="headless build without a renderer"):
            env.render()
        env.step(1)                                            # the game is untouched
    finally:
        env.close()


def test_a_game_that_cannot_draw_answers_with_its_error_code(tmp_path):
    alias = tmp_path / "engine"                                 # the headless build under a neutral name
    alias.symlink_to(headless_godot()[0])
    env = make_godot_catch(render_mode="rgb_array", godot=str(alias))
    try:
        env.reset(seed=0)
        with pytest.raises(RuntimeError, match="could not render a frame: Godot error code 2"):
            env.render()
    finally:
        env.close()


def test_rgb_array_returns_the_frame_the_drawing_build_writes():
    command = drawing_godot()
    if command is None:
        if os.environ.get("DMRPC_REQUIRE_GODOT") == "1":
            pytest.fail("DMRPC_REQUIRE_GODOT=1 but no godot3 with xvfb-run to draw")
        pytest.skip("no godot3 with xvfb-run: frames cannot be drawn")
    env = make_godot_catch(render_mode="rgb_array", godot=command)
    try:
        env.reset(seed=0)
        first = env.render()
        for _ in range(6):
            env.step(2)
        later = env.render()
        assert first.dtype == np.uint8 and first.shape == (84, 84, 3)
        assert len(np.unique(first.reshape(-1, 3), axis=0)) >= 3   # background, ball, paddle
        assert not np.array_equal(first, later)                    # the ball fell, the paddle moved
    finally:
        env.close()


def test_sb3_subproc_vec_env_ships_the_env_to_worker_processes(catch):
    from stable_baselines3.common.vec_env import SubprocVecEnv

    venv = SubprocVecEnv([lambda: catch, lambda: catch])     # each worker unpickles its own game
    try:
        venv.seed(4)
        obs = venv.reset()
        assert obs.shape == (2, 3)
        np.testing.assert_array_equal(obs[0], catch.reset(seed=4)[0])
        obs, rewards, dones, infos = venv.step(np.array([0, 2]))
        assert obs[0, 2] < 0.5 < obs[1, 2]
    finally:
        venv.close()
