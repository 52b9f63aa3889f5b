"""DmRpcEnv against servers written with the official dm-env-rpc package."""
from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from dmrpc_gym import DmRpcError, DmRpcEnv, State
from official_servers import UNUSUAL_SPECS, start_official_server

I64 = np.iinfo(np.int64)

EXPECTED_ACTIONS = {
    "aim": spaces.Box(np.array([-1, -2, -3], np.float32), np.array([1, 2, 3], np.float32), (3,), np.float32),
    "paddle": spaces.Discrete(3, start=-1, dtype=np.int32),
    "levels": spaces.MultiDiscrete([2, 6, 10], start=[0, 0, 0], dtype=np.uint8),
    "throttle": spaces.Box(0.0, 1.0, (), np.float64),
    "grid": spaces.MultiDiscrete([[3, 5, 7], [5, 6, 7]], start=[[-1, -2, -3], [0, 0, 0]], dtype=np.int8),
    "buttons": spaces.MultiBinary(4),
    "arm.x": spaces.Box(-1.0, 1.0, (), np.float32),
    "arm.y": spaces.Box(-1.0, 1.0, (), np.float32),
}
EXPECTED_OBSERVATIONS = {
    "camera": spaces.Box(0, 255, (8, 6, 3), np.uint8),
    "score": spaces.Box(I64.min, I64.max, (), np.int64),
    "flags": spaces.MultiBinary([2, 2]),
    "pos.x": spaces.Box(-10.0, 10.0, (), np.float64),
    "pos.y": spaces.Box(-10.0, 10.0, (), np.float64),
}


@pytest.fixture
def unusual():
    with start_official_server(UNUSUAL_SPECS, episode_length=3) as server:
        yield server


def make(server, **kwargs) -> DmRpcEnv:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = DmRpcEnv(server.address, world_settings={"seed": 1}, **kwargs)
    env.construction_warnings = [str(w.message) for w in caught]
    return env


def test_every_unusual_spec_gets_its_exact_space(unusual):
    env = make(unusual)
    try:
        act, obs = env.action_space.spaces, env.observation_space.spaces
        for name, space in EXPECTED_ACTIONS.items():
            assert act[name] == space, name
            assert act[name].dtype == space.dtype, name
        assert isinstance(act["say"], spaces.Text)
        for name, space in EXPECTED_OBSERVATIONS.items():
            assert obs[name] == space, name
            assert obs[name].dtype == space.dtype, name
        assert isinstance(obs["title"], spaces.Text)
        for name, space in EXPECTED_ACTIONS.items():      # echoes mirror the action specs
            assert obs[f"echo.{name}"] == space
        # The -1 dimension has no faithful space: left out, warned about once, returned in info.
        assert "points" not in obs
        assert any("points" in w and "info" in w for w in env.construction_warnings)
        assert "reward" not in obs and "discount" not in obs
        _, info = env.reset()
        assert info["points"].dtype == np.float32 and info["points"].shape[1] == 2
    finally:
        env.close()


def test_nested_names_become_nested_dicts(unusual):
    env = make(unusual, nested=True)
    try:
        assert env.action_space["arm"] == spaces.Dict({"x": EXPECTED_ACTIONS["arm.x"], "y": EXPECTED_ACTIONS["arm.y"]})
        assert env.observation_space["pos"]["x"] == EXPECTED_OBSERVATIONS["pos.x"]
        obs, _ = env.reset()
        assert set(obs["pos"]) == {"x", "y"}
        action = {"arm": {"x": np.float32(0.25)}}                     # sparse and nested
        obs, *_ = env.step(action)
        assert obs["echo"]["arm"]["x"] == np.float32(0.25)
        assert unusual.received[-1].keys() == {"arm.x"}
    finally:
        env.close()


def test_actions_are_packed_exactly(unusual):
    env = make(unusual)
    try:
        env.action_space.seed(0)
        env.reset()
        for _ in range(2):
            action = env.action_space.sample()
            obs, reward, terminated, truncated, info = env.step(action)
            for name, value in action.items():
                echoed = obs[f"echo.{name}"]
                if isinstance(value, str):
                    assert echoed == value
                else:
                    assert np.asarray(echoed).dtype == np.asarray(value).dtype, name
                    np.testing.assert_array_equal(echoed, value, err_msg=name)
                assert echoed in env.observation_space[f"echo.{name}"]
            assert obs in env.observation_space
    finally:
        env.close()


def test_episode_states_and_rewards(unusual):
    env = make(unusual)
    try:
        env.reset()
        results = [env.step({"paddle": np.int32(0)}) for _ in range(3)]
        state, discount = env.unwrapped.state, env.unwrapped.last_discount
        assert [r[1] for r in results] == [1.0, 2.0, 3.0]
        assert [r[2] for r in results] == [False, False, True]
        assert state == State.TERMINATED and discount == 0.0
    finally:
        env.close()
    with start_official_server(UNUSUAL_SPECS, episode_length=2, end_with="interrupted") as server:
        env = make(server)
        try:
            env.reset()
            env.step({})
            _, _, terminated, truncated, info = env.step({})
            assert truncated and not terminated and env.unwrapped.state == State.INTERRUPTED
        finally:
            env.close()


def test_server_error_mid_episode(unusual):
    with start_official_server(UNUSUAL_SPECS, error_at_step=3, error_message="boom at step") as server:
        env = make(server)
        try:
            env.reset()
            env.step({})
            with pytest.raises(DmRpcError, match="boom at step"):
                env.step({})
            env.step({})                                              # the stream stays usable
        finally:
            env.close()


@pytest.mark.parametrize("action, words", [
    ({"paddle": np.int32(2)}, ["paddle", "1"]),
    ({"levels": np.array([1, 6, 0], np.uint8)}, ["levels", "5"]),
    ({"grid": np.zeros((3, 2), np.int8)}, ["grid", "shape"]),
    ({"aim": np.zeros(3, np.float64) + 0.5}, None),                # float64 0.5 fits float32 exactly
    ({"paddle": np.float32(0.5)}, ["paddle", "int32"]),
    ({"buttons": np.array([1, 0, 2, 0])}, ["buttons"]),
    ({"nope": 1}, ["nope"]),
])
def test_bad_actions_never_leave_the_client(unusual, action, words):
    env = make(unusual)
    try:
        env.reset()
        before = len(unusual.received)
        if words is None:
            env.step(action)
            assert len(unusual.received) == before + 1
            return
        with pytest.raises(ValueError) as err:
            env.step(action)
        for word in words:
            assert word in str(err.value)
        assert len(unusual.received) == before
    finally:
        env.close()


def _corrupt(server, name: str, field: str, values, dtype) -> None:
    """Give the running official server's spec ``name`` a bad bound (the official helpers refuse to)."""
    specs = {**server.action_specs, **server.observation_specs}
    spec = next(s for s in specs.values() if s.name == name)
    bound = getattr(spec, field)
    bound.Clear()
    getattr(bound, dtype).array.extend(values)


@pytest.mark.parametrize("field, values, words", [
    ("min", [3, 0], ["'a'", "greater than max"]),           # min > max
    ("max", [1, 2, 3], ["'a'", "3"]),                       # 3 bounds for 2 elements
])
def test_bad_specs_from_a_server_fail_at_join_naming_the_spec(field, values, words):
    with start_official_server({"a": dict(kind="action", dtype="int32", shape=[2], min=0, max=[1, 5])}) as server:
        _corrupt(server, "a", field, values, "int32s")
        with pytest.raises(ValueError) as err:
            DmRpcEnv(server.address, world_settings={"seed": 1})
        for word in words:
            assert word in str(err.value)


def test_duplicate_spec_names_fail_at_join():
    with start_official_server({"x": dict(dtype="float32", shape=[]), "y": dict(dtype="float32", shape=[])}) as server:
        for spec in server.observation_specs.values():
            if spec.name == "y":
                spec.name = "x"
        with pytest.raises(ValueError, match="'x'.*twice"):
            DmRpcEnv(server.address, world_settings={"seed": 1})


def test_gymnasium_check_env_against_official_server():
    from gymnasium.utils.env_checker import check_env
    specs = {"move": dict(kind="action", dtype="float32", shape=[2], min=-1.0, max=1.0),
             "turn": dict(kind="action", dtype="int32", shape=[], min=-1, max=1),
             "pos": dict(dtype="float32", shape=[2], min=-5.0, max=5.0)}
    with start_official_server(specs, episode_length=5, echo=False) as server:
        env = gym.make("dmrpc/Remote-v0", address=server.address, world_settings={"seed": 1}, seed_setting="seed")
        try:
            check_env(env.unwrapped, skip_render_check=True)
        finally:
            env.close()


def test_official_join_of_default_world():
    with start_official_server({"x": dict(dtype="float32", shape=[])}) as server:
        env = DmRpcEnv(server.address, world_name="")
        try:
            obs, _ = env.reset()
            assert obs.shape == () and obs.dtype == np.float32
        finally:
            env.close()
