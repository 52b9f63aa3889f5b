"""FlatSpaces and its per-space transforms: spaces in/out and values both ways."""
from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import dmrpc_gym  # noqa: F401  (registers dmrpc/Catch-v0)
from dmrpc_gym.integrations.sb3 import FlatSpaces, sb3_action_transform, sb3_observation_transform, sb3_spaces


def obs_t(space):
    return sb3_observation_transform(space)


def act_t(space):
    return sb3_action_transform(space)


# -- observations ------------------------------------------------------------------------
def test_box_vector_and_image_observations_are_unchanged():
    for space in (spaces.Box(-1, 1, (4,)), spaces.Box(0, 255, (8, 8, 3), np.uint8)):
        new, fn = obs_t(space)
        assert new is space
        value = space.sample()
        assert fn(value) is value


def test_box_scalar_observation_becomes_shape_1():
    space = spaces.Box(-2.0, 3.0, (), np.float64)
    new, fn = obs_t(space)
    assert new == spaces.Box(-2.0, 3.0, (1,), np.float64)
    out = fn(np.float64(1.5))
    assert out.shape == (1,) and out.dtype == np.float64 and out[0] == 1.5
    # Leading (batch) axes are kept.
    assert fn(np.array([1.0, 2.0])).shape == (2, 1)


def test_box_matrix_observation_is_flattened_with_its_bounds():
    low = np.arange(6, dtype=np.int32).reshape(2, 3)
    space = spaces.Box(low, low + 10, (2, 3), np.int32)
    new, fn = obs_t(space)
    assert new == spaces.Box(low.reshape(6), low.reshape(6) + 10, (6,), np.int32)
    value = low + 1
    np.testing.assert_array_equal(fn(value), np.arange(1, 7, dtype=np.int32))
    assert fn(np.stack([value, value])).shape == (2, 6)


def test_discrete_observation_starts_at_zero():
    space = spaces.Discrete(3, start=-1, dtype=np.int8)
    new, fn = obs_t(space)
    assert new == spaces.Discrete(3) and new.dtype == np.int64
    assert [fn(np.int8(v)) for v in (-1, 0, 1)] == [0, 1, 2]
    assert isinstance(fn(np.int8(1)), np.integer)
    np.testing.assert_array_equal(fn(np.array([-1, 1], np.int8)), [0, 2])


def test_multi_discrete_observation_is_flat_and_starts_at_zero():
    space = spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[1, -1], [0, 10]]), dtype=np.int32)
    new, fn = obs_t(space)
    assert new == spaces.MultiDiscrete([2, 3, 4, 5])
    out = fn(np.array([[2, 1], [0, 14]], np.int32))
    np.testing.assert_array_equal(out, [1, 2, 0, 4])
    assert out.dtype == np.int64 and new.contains(out)
    assert fn(np.zeros((5, 2, 2), np.int32) + [[1, -1], [0, 10]]).shape == (5, 4)


def test_multi_binary_observation_is_flat_int8():
    space = spaces.MultiBinary([2, 2])
    new, fn = obs_t(space)
    assert new == spaces.MultiBinary(4)
    out = fn(np.array([[True, False], [False, True]]))
    np.testing.assert_array_equal(out, [1, 0, 0, 1])
    assert out.dtype == np.int8 and new.contains(out)


def test_nested_dict_and_tuple_observations_get_dotted_keys():
    space = spaces.Dict({"pos": spaces.Dict({"x": spaces.Box(-1, 1, ()), "y": spaces.Box(-1, 1, ())}),
                         "pair": spaces.Tuple((spaces.Discrete(2, start=5), spaces.MultiBinary(3)))})
    new, fn = obs_t(space)
    assert isinstance(new, spaces.Dict)
    assert set(new.spaces) == {"pos.x", "pos.y", "pair.0", "pair.1"}
    assert not any(isinstance(s, spaces.Dict) for s in new.spaces.values())
    out = fn({"pos": {"x": np.float32(0.25), "y": np.float32(-1)},
              "pair": (np.int64(6), np.array([1, 0, 1], np.int8))})
    assert out["pos.x"].tolist() == [0.25] and out["pos.y"].tolist() == [-1.0]
    assert out["pair.0"] == 1
    np.testing.assert_array_equal(out["pair.1"], [1, 0, 1])
    assert new.contains(out)


def test_text_observations_are_dropped_with_a_warning_leaving_a_bare_space():
    space = spaces.Dict({"label": spaces.Text(10), "pos": spaces.Box(-1, 1, (2,))})
    with pytest.warns(UserWarning, match="'label'.*no Stable-Baselines3 form"):
        new, fn = obs_t(space)
    assert new == spaces.Box(-1, 1, (2,))
    np.testing.assert_array_equal(fn({"label": "hi", "pos": np.array([0.5, 0.0], np.float32)}), [0.5, 0.0])


def test_only_unsupported_observations_is_an_error():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="no observation .* has a Stable-Baselines3 form"):
            obs_t(spaces.Dict({"label": spaces.Text(5)}))


def test_colliding_dotted_observation_names_are_an_error():
    space = spaces.Dict({"pos.x": spaces.Box(0, 1, (1,)), "pos": spaces.Dict({"x": spaces.Box(0, 1, (1,))})})
    with pytest.raises(ValueError, match="'pos.x' occurs twice"):
        obs_t(space)


# -- actions ---------------------------------------------------------------------------------
def test_bounded_box_action_is_rescaled_to_unit_float32_and_back():
    space = spaces.Box(np.array([0.0, -10.0]), np.array([4.0, 10.0]), (2,), np.float64)
    new, to_env = act_t(space)
    assert new == spaces.Box(-1.0, 1.0, (2,), np.float32)
    out = to_env(np.array([-1.0, 1.0], np.float32))
    np.testing.assert_array_equal(out, [0.0, 10.0])
    assert out.dtype == np.float64
    np.testing.assert_array_equal(to_env(np.array([0.0, 0.5], np.float32)), [2.0, 5.0])
    # Out of range is clipped to the bounds; batch axes are kept.
    np.testing.assert_array_equal(to_env(np.array([[3.0, -7.0]], np.float32)), [[4.0, -10.0]])


def test_partially_bounded_box_action_rescales_only_bounded_elements():
    space = spaces.Box(np.array([-np.inf, 0.0], np.float32), np.array([np.inf, 2.0], np.float32))
    new, to_env = act_t(space)
    np.testing.assert_array_equal(new.low, [-np.inf, -1.0])
    np.testing.assert_array_equal(new.high, [np.inf, 1.0])
    np.testing.assert_array_equal(to_env(np.array([123.0, 0.0], np.float32)), [123.0, 1.0])


def test_unbounded_box_action_is_left_as_is():
    space = spaces.Box(-np.inf, np.inf, (3,), np.float64)
    new, to_env = act_t(space)
    assert new is space
    value = np.array([1e9, -2.0, 0.0])
    assert to_env(value) is value


def test_integer_box_action_is_rescaled_and_rounded():
    space = spaces.Box(0, 255, (2,), np.uint8)
    new, to_env = act_t(space)
    assert new == spaces.Box(-1.0, 1.0, (2,), np.float32)
    out = to_env(np.array([-1.0, 1.0], np.float32))
    assert out.dtype == np.uint8 and out.tolist() == [0, 255]
    assert to_env(np.array([0.0, 2.0 / 255 - 1.0], np.float32)).tolist() == [128, 1]   # 127.5 rounds to even
    assert to_env(np.array([-5.0, 5.0], np.float32)).tolist() == [0, 255]


def test_full_range_integer_box_action_is_left_as_is():
    space = spaces.Box(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (2,), np.int64)
    new, to_env = act_t(space)
    assert new is space


def test_discrete_action_starts_at_zero_and_goes_back_with_its_dtype():
    space = spaces.Discrete(3, start=-1, dtype=np.int8)
    new, to_env = act_t(space)
    assert new == spaces.Discrete(3) and new.dtype == np.int64
    for sb3, env in ((0, -1), (1, 0), (2, 1)):
        out = to_env(np.int64(sb3))
        assert out == env and isinstance(out, np.int8) and space.contains(out)
    np.testing.assert_array_equal(to_env(np.array([0, 2])), np.array([-1, 1], np.int8))


def test_multi_discrete_action_is_flat_and_goes_back_to_its_shape():
    space = spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[1, -1], [0, 10]]), dtype=np.int32)
    new, to_env = act_t(space)
    assert new == spaces.MultiDiscrete([2, 3, 4, 5])
    out = to_env(np.array([1, 2, 0, 4]))
    np.testing.assert_array_equal(out, [[2, 1], [0, 14]])
    assert out.dtype == np.int32 and space.contains(out)
    assert to_env(np.zeros((7, 4), np.int64)).shape == (7, 2, 2)


def test_multi_binary_action_is_flat_and_goes_back_to_its_shape():
    space = spaces.MultiBinary([2, 3])
    new, to_env = act_t(space)
    assert new == spaces.MultiBinary(6)
    out = to_env(np.array([1, 0, 0, 1, 1, 0]))
    np.testing.assert_array_equal(out, [[1, 0, 0], [1, 1, 0]])
    assert space.contains(out)


def test_dict_of_boxes_action_becomes_one_box():
    space = spaces.Dict({"arm": spaces.Dict({"x": spaces.Box(0.0, 2.0, ())}), "grip": spaces.Box(-1, 1, (2,))})
    new, to_env = act_t(space)
    assert new == spaces.Box(-1.0, 1.0, (3,), np.float32)
    out = to_env(np.array([1.0, 0.5, -0.5], np.float32))
    assert out["arm"]["x"] == 2.0 and out["arm"]["x"].shape == ()
    np.testing.assert_array_equal(out["grip"], [0.5, -0.5])
    assert space.contains(out)
    batched = to_env(np.zeros((4, 3), np.float32))
    assert batched["arm"]["x"].shape == (4,) and batched["grip"].shape == (4, 2)


def test_dict_of_discretes_action_becomes_one_multi_discrete():
    space = spaces.Dict({"move": spaces.Discrete(3, start=-1, dtype=np.int8),
                         "aim": spaces.MultiDiscrete([4, 2], start=[1, 1])})
    new, to_env = act_t(space)
    assert new == spaces.MultiDiscrete([4, 2, 3])   # Dict keys are sorted: aim, move
    out = to_env(np.array([3, 1, 0]))
    np.testing.assert_array_equal(out["aim"], [4, 2])
    assert out["move"] == -1 and out["move"].dtype == np.int8
    assert space.contains(out)


def test_tuple_of_multi_binaries_action_becomes_one_multi_binary():
    space = spaces.Tuple((spaces.MultiBinary(2), spaces.MultiBinary([1, 2])))
    new, to_env = act_t(space)
    assert new == spaces.MultiBinary(4)
    out = to_env(np.array([1, 0, 0, 1]))
    assert isinstance(out, tuple)
    np.testing.assert_array_equal(out[0], [1, 0])
    np.testing.assert_array_equal(out[1], [[0, 1]])
    assert space.contains(out)


def test_single_action_in_a_dict_becomes_bare_and_goes_back_in_the_dict():
    space = spaces.Dict({"move": spaces.Discrete(3, start=-1)})
    new, to_env = act_t(space)
    assert new == spaces.Discrete(3)
    assert to_env(np.int64(2)) == {"move": 1}


def test_mixed_action_kinds_are_an_error_naming_them():
    with pytest.raises(ValueError, match=r"mix kinds.*Box.*Discrete"):
        act_t(spaces.Dict({"a": spaces.Box(-1, 1, (1,)), "b": spaces.Discrete(2)}))


def test_text_action_is_an_error_naming_it():
    with pytest.raises(ValueError, match="action 'say' has no Stable-Baselines3 form"):
        act_t(spaces.Dict({"say": spaces.Text(5), "b": spaces.Discrete(2)}))


SPACES = [
    spaces.Box(-3.0, 5.0, (2, 2)), spaces.Box(0, 255, (3,), np.uint8), spaces.Box(-1.0, 1.0, ()),
    spaces.Discrete(5, start=-2), spaces.MultiDiscrete([[2, 3]], start=[[0, 7]]), spaces.MultiBinary([2, 2]),
    spaces.Dict({"a": spaces.Discrete(2, start=1), "b": spaces.MultiDiscrete([3, 3])}),
    spaces.Dict({"a": spaces.Box(0.0, 1.0, ()), "b": spaces.Dict({"c": spaces.Box(-5, 5, (2,))})}),
]


@pytest.mark.parametrize("space", SPACES, ids=str)
def test_transformed_values_land_in_the_target_space(space):
    new_obs, to_sb3 = obs_t(space)
    new_act, to_env = act_t(space)
    assert sb3_spaces(space, space) == (new_obs, new_act)
    space.seed(0)
    new_act.seed(0)
    for _ in range(30):
        assert new_obs.contains(to_sb3(space.sample()))
        assert space.contains(to_env(new_act.sample()))


# -- the wrapper on a plain gymnasium env --------------------------------------------------------
class _Nested(gym.Env):
    """Nested Dict observations (with Text) and Dict actions: what a dm_env_rpc world may offer."""

    action_space = spaces.Dict({"push": spaces.Box(0.0, 2.0, ()), "turn": spaces.Box(-4.0, 4.0, (2,))})
    observation_space = spaces.Dict({
        "pos": spaces.Dict({"x": spaces.Box(-1.0, 1.0, ()), "y": spaces.Box(-1.0, 1.0, ())}),
        "cell": spaces.Discrete(4, start=-2), "label": spaces.Text(8), "echo": action_space})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.last_action = {"push": np.zeros((), np.float32), "turn": np.zeros(2, np.float32)}
        return self._obs(), {}

    def _obs(self):
        return {"pos": {"x": np.array(0.5, np.float32), "y": np.array(-0.5, np.float32)},
                "cell": np.int64(self.t - 2), "label": "t%d" % self.t,
                "echo": {k: np.asarray(v, np.float32) for k, v in self.last_action.items()}}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.t += 1
        self.last_action = action
        return self._obs(), 1.5, self.t >= 3, False, {}


def test_flat_spaces_wraps_a_nested_env():
    with pytest.warns(UserWarning, match="'label'"):
        env = FlatSpaces(_Nested())
    assert set(env.observation_space.spaces) == {"pos.x", "pos.y", "cell", "echo.push", "echo.turn"}
    assert env.action_space == spaces.Box(-1.0, 1.0, (3,), np.float32)
    obs, info = env.reset(seed=0)
    assert obs["cell"] == 0 and obs["pos.x"].shape == (1,) and info["label"] == "t0"
    obs, reward, terminated, truncated, info = env.step(np.array([1.0, -1.0, 0.0], np.float32))
    assert type(reward) is float and reward == 1.5
    assert terminated is False and truncated is False
    assert obs["cell"] == 1 and info["label"] == "t1"
    assert env.unwrapped.last_action["push"] == 2.0
    np.testing.assert_array_equal(env.unwrapped.last_action["turn"], [-4.0, 0.0])


def test_sb3_check_env_passes_on_a_wrapped_nested_env():
    from stable_baselines3.common.env_checker import check_env
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = FlatSpaces(_Nested())
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # not even a warning from SB3's checker
        check_env(env)


@pytest.fixture(scope="module")
def nested_server():
    from dmrpc_gym.server import Server
    with Server(_Nested) as server:
        yield server


def test_flat_spaces_over_dm_env_rpc_rescales_actions_and_flattens_observations(nested_server):
    from dmrpc_gym.client.env import DmRpcEnv
    with pytest.warns(UserWarning, match="'label'"):
        env = FlatSpaces(DmRpcEnv(nested_server.address, nested=True))
    try:
        assert set(env.observation_space.spaces) == {"pos.x", "pos.y", "cell", "echo.push", "echo.turn"}
        assert env.action_space == spaces.Box(-1.0, 1.0, (3,), np.float32)
        obs, info = env.reset(seed=0)
        assert obs["cell"] == 0 and info["label"] == "t0"
        obs, reward, terminated, truncated, info = env.step(np.array([1.0, -1.0, 0.5], np.float32))
        # The server's env got push=2.0, turn=[-4, 2] and echoed them.
        assert obs["echo.push"].tolist() == [2.0] and obs["echo.turn"].tolist() == [-4.0, 2.0]
        assert obs["cell"] == 1 and info["label"] == "t1" and type(reward) is float and reward == 1.5
    finally:
        env.close()


def test_sb3_check_env_passes_over_dm_env_rpc_with_nested_spaces(nested_server):
    from stable_baselines3.common.env_checker import check_env
    from dmrpc_gym.client.env import DmRpcEnv
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = FlatSpaces(DmRpcEnv(nested_server.address, nested=True))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env)
    finally:
        env.close()


# -- the wrapper on the bundled Catch world (embedded server, real gRPC) ----------------------------
@pytest.fixture
def catch():
    env = FlatSpaces(gym.make("dmrpc/Catch-v0"))
    yield env
    env.close()


def test_flat_spaces_on_catch(catch):
    inner = catch.unwrapped
    assert catch.observation_space.shape == (int(np.prod(inner.observation_space.shape)),)
    assert catch.action_space == spaces.Discrete(3)
    obs, info = catch.reset(seed=3)
    assert catch.observation_space.contains(obs)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, info = catch.step(catch.action_space.sample())
        assert type(reward) is float and catch.observation_space.contains(obs)
        total += reward
        done = terminated or truncated
    assert total in (-1.0, 1.0)


def test_sb3_check_env_passes_on_catch(catch):
    from stable_baselines3.common.env_checker import check_env
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(catch)


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")
def test_gymnasium_check_env_passes_on_catch(catch):
    from gymnasium.utils.env_checker import check_env
    check_env(catch, skip_render_check=True)


def test_the_former_names_warn_and_name_their_replacements():
    """Issue 33: one public name, ``FlatSpaces``; ``SB3Compat`` and ``sb3_compat=`` still work and warn."""
    from dmrpc_gym.integrations.flat_spaces import FlatSpaces
    for module in ("dmrpc_gym.integrations.flat_spaces", "dmrpc_gym.integrations.sb3"):
        with pytest.warns(DeprecationWarning, match=r"SB3Compat is deprecated: use dmrpc_gym\.integrations\.flat_spaces\.FlatSpaces"):
            old = getattr(__import__(module, fromlist=["SB3Compat"]), "SB3Compat")
        assert old is FlatSpaces
    from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv
    with pytest.warns(DeprecationWarning, match="use flat_spaces="):
        venv = DmRpcSB3VecEnv(2, "catch", sb3_compat=True)
    try:
        assert venv.observation_space.shape == (100,)
    finally:
        venv.close()
