"""DmRpcEnv against our own server: semantics, reward/discount, resets, errors, pickling."""
from __future__ import annotations

import pickle
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import dmrpc_gym
from dmrpc_gym import DmRpcError, DmRpcEnv, State
from dmrpc_gym.server import Server


class Walker(gym.Env):
    """A small env with a Dict observation and Dict action, ending as its settings say."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, length: int = 5, ending: str = "terminate", render_mode=None):
        self.length, self.ending, self.render_mode = length, ending, render_mode
        self.observation_space = spaces.Dict({
            "pos": spaces.Box(-10.0, 10.0, (2,), np.float32),
            "steps": spaces.Discrete(100),
        })
        self.action_space = spaces.Dict({
            "move": spaces.Box(-1.0, 1.0, (2,), np.float32),
            "turbo": spaces.Discrete(3, start=-1),
        })
        self.pos = np.zeros(2, np.float32)
        self.t = 0

    def _obs(self):
        return {"pos": self.pos.copy(), "steps": self.t}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        scale = 1 + int(action["turbo"]) if "turbo" in action else 1
        self.pos = np.clip(self.pos + scale * np.asarray(action["move"], np.float32), -10, 10)
        self.t += 1
        done = self.t >= self.length
        return (self._obs(), float(self.t), done and self.ending == "terminate",
                done and self.ending == "truncate", {})

    def render(self):
        frame = np.zeros((4, 6, 3), np.uint8)
        frame[..., 0] = self.t
        return frame


@pytest.fixture(scope="module")
def server():
    with Server(Walker) as s:
        yield s


def make(server, **kwargs) -> DmRpcEnv:
    kwargs.setdefault("seed_setting", "seed")
    return DmRpcEnv(server.address, **kwargs)


def test_spaces_state_mapping_and_types(server):
    env = make(server, world_settings={"length": 3})
    try:
        assert env.observation_space == spaces.Dict({
            "pos": spaces.Box(-10.0, 10.0, (2,), np.float32), "steps": spaces.Discrete(100)})
        assert env.action_space["turbo"] == spaces.Discrete(3, start=-1)
        obs, info = env.reset(seed=3)
        assert obs in env.observation_space and env.unwrapped.state == State.RUNNING and "state" not in info
        for t in range(1, 4):
            obs, reward, terminated, truncated, info = env.step(
                {"move": np.ones(2, np.float32), "turbo": np.int64(0)})
            assert type(reward) is float and reward == float(t)
            assert type(terminated) is bool and type(truncated) is bool
            assert obs["steps"] == t
        assert terminated and not truncated
        assert env.unwrapped.state == State.TERMINATED and env.unwrapped.last_discount == 0.0
    finally:
        env.close()


def test_interrupted_is_truncated(server):
    env = make(server, world_settings={"length": 2, "ending": "truncate"})
    try:
        env.reset(seed=0)
        env.step({"move": np.zeros(2, np.float32)})
        _, _, terminated, truncated, info = env.step({"move": np.zeros(2, np.float32)})
        assert truncated and not terminated and env.unwrapped.state == State.INTERRUPTED
    finally:
        env.close()


def test_seeded_resets_are_deterministic_and_observations_fresh(server):
    env = make(server)
    try:
        first, _ = env.reset(seed=42)
        first["pos"][:] = 99          # writable, and ours: must not leak into the next call
        again, _ = env.reset(seed=42)
        other, _ = env.reset(seed=7)
        assert again["pos"].flags.writeable
        assert not np.array_equal(again["pos"], first["pos"])
        np.testing.assert_array_equal(again["pos"], make_reference_pos(42))
        assert not np.array_equal(other["pos"], again["pos"])
    finally:
        env.close()


def make_reference_pos(seed):
    walker = Walker()
    obs, _ = walker.reset(seed=seed)
    return obs["pos"]


def test_sparse_dict_actions_only_send_given_keys(server):
    env = make(server)
    try:
        env.reset(seed=1)
        start = env.agent.last_observations["pos"].copy()
        obs, *_ = env.step({"move": np.array([0.5, -0.5], np.float32)})      # no "turbo"
        np.testing.assert_allclose(obs["pos"], np.clip(start + [0.5, -0.5], -10, 10), rtol=1e-6)
    finally:
        env.close()


def test_reward_and_discount_callables_and_none(server):
    seen = []

    def reward(obs, state):
        seen.append((sorted(obs), state))
        return 10.0 * float(obs["steps"])

    env = make(server, reward=reward, discount=lambda obs, state: 0.5)
    try:
        env.reset(seed=0)
        _, r, _, _, info = env.step({"move": np.zeros(2, np.float32)})
        assert r == 10.0 and env.unwrapped.last_discount == 0.5
        assert "pos" in seen[-1][0] and seen[-1][1] == State.RUNNING
    finally:
        env.close()
    env = make(server, reward=None, discount=None)
    try:
        env.reset(seed=0)
        _, r, _, _, info = env.step({"move": np.zeros(2, np.float32)})
        assert r == 0.0 and env.unwrapped.last_discount == 1.0
    finally:
        env.close()


def test_observation_and_action_selection(server):
    env = make(server, observations="pos", actions=["move"])
    try:
        assert env.observation_space == spaces.Box(-10.0, 10.0, (2,), np.float32)
        assert env.action_space == spaces.Dict({"move": spaces.Box(-1.0, 1.0, (2,), np.float32)})
        obs, _ = env.reset(seed=0)
        assert obs.shape == (2,)
    finally:
        env.close()
    with pytest.raises(ValueError, match="unknown observations"):
        make(server, observations=["nope"])


def test_reset_options_settings_and_world_settings(server):
    env = make(server, world_settings={"length": 50})
    try:
        env.reset(seed=0, options={"world_settings": {"length": 2}})
        env.step({"move": np.zeros(2, np.float32)})
        _, _, terminated, _, _ = env.step({"move": np.zeros(2, np.float32)})
        assert terminated
        obs, _ = env.reset(options={"settings": {"seed": 5}})
        np.testing.assert_array_equal(obs["pos"], make_reference_pos(5))
    finally:
        env.close()


@pytest.mark.parametrize("action, message", [
    ({"move": np.array([2.0, 0.0], np.float32)}, "move"),            # out of bounds
    ({"move": np.zeros(3, np.float32)}, "shape"),                     # wrong shape
    ({"move": np.zeros(2, np.float32), "turbo": 0.5}, "turbo"),       # wrong dtype
    ({"move": np.zeros(2, np.float32), "turbo": 2}, "turbo"),         # above max
    ({"fly": 1}, "fly"),                                              # unknown name
    (np.zeros(2), "mapping"),                                         # not a dict
])
def test_bad_actions_raise_before_leaving(server, action, message):
    env = make(server)
    try:
        env.reset(seed=0)
        steps = env.agent.last_observations["steps"]
        with pytest.raises(ValueError, match=message):
            env.step(action)
        obs, *_ = env.step({"move": np.zeros(2, np.float32)})
        assert obs["steps"] == steps + 1        # the bad action never reached the server
    finally:
        env.close()


def test_server_error_is_dmrpc_error(server):
    with pytest.raises(DmRpcError) as err:
        make(server, world_settings={"no_such_setting": 1})
    assert err.value.code_name == "INVALID_ARGUMENT"
    assert "no_such_setting" in str(err.value)


def test_server_killed_mid_episode_fails_promptly_and_close_returns():
    s = Server(Walker).start()
    env = make(s)
    env.reset(seed=0)
    s.stop(grace=0)
    with pytest.raises(ConnectionError):
        for _ in range(3):
            env.step({"move": np.zeros(2, np.float32)})
    env.close()
    env.close()


def test_unreachable_address():
    with pytest.raises(ConnectionError, match="127.0.0.1:1"):
        DmRpcEnv("127.0.0.1:1", connect_timeout=1)


def test_close_is_idempotent_and_step_after_close_is_clear(server):
    env = make(server)
    env.reset(seed=0)
    env.close()
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.step({"move": np.zeros(2, np.float32)})


def test_pickling_recreates_from_constructor_arguments(server):
    env = make(server, world_settings={"length": 4})
    try:
        clone = pickle.loads(pickle.dumps(env))
        try:
            assert clone.world_name != env.world_name        # a fresh connection and world
            a, _ = env.reset(seed=9)
            b, _ = clone.reset(seed=9)
            np.testing.assert_array_equal(a["pos"], b["pos"])
        finally:
            clone.close()
    finally:
        env.close()


def test_render_rgb_array(server):
    env = make(server, render_mode="rgb_array")
    try:
        env.reset(seed=0)
        env.step({"move": np.zeros(2, np.float32)})
        frame = env.render()
        assert frame.dtype == np.uint8 and frame.shape == (4, 6, 3) and frame[0, 0, 0] == 1
        assert "RGB" not in env.observation_space.spaces
    finally:
        env.close()


def test_gymnasium_check_env_on_remote(server):
    from gymnasium.utils.env_checker import check_env
    env = gym.make("dmrpc/Remote-v0", address=server.address, seed_setting="seed")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)   # the checker's complaints are warnings
            check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_cartpole_served_and_checked():
    from gymnasium.utils.env_checker import check_env
    with Server("CartPole-v1") as s:
        env = gym.make("dmrpc/Remote-v0", address=s.address, seed_setting="seed")
        try:
            assert env.observation_space == gym.make("CartPole-v1").observation_space
            assert env.action_space == spaces.Discrete(2)
            check_env(env.unwrapped, skip_render_check=True)
            obs, _ = env.reset(seed=0)
            total, done = 0.0, False
            while not done:
                obs, r, term, trunc, _ = env.step(env.action_space.sample())
                total += r
                done = term or trunc
            assert total >= 1
        finally:
            env.close()


def test_catch_registered_and_make_without_prior_import():
    code = ("import gymnasium as gym; env = gym.make('dmrpc_gym:dmrpc/Catch-v0'); "
            "obs, _ = env.reset(seed=0); print(obs.shape, env.action_space); env.close()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "(10, 10) Discrete(3, start=-1, dtype=int8)" in out.stdout


def test_catch_is_deterministic_with_a_seed():
    def episode(seed):
        env = gym.make("dmrpc/Catch-v0")
        try:
            obs, _ = env.reset(seed=seed)
            frames = [obs]
            done = False
            while not done:
                obs, r, term, trunc, _ = env.step(np.int8(1))
                frames.append(obs)
                done = term or trunc
            return np.stack(frames), r
        finally:
            env.close()

    a, ra = episode(11)
    b, rb = episode(11)
    np.testing.assert_array_equal(a, b)
    assert ra == rb and ra in (-1.0, 1.0)
    assert gym.spec("dmrpc/Catch-v0").nondeterministic is False
    assert gym.spec("dmrpc/Remote-v0").nondeterministic is True


def test_properties_read_write_list():
    env = gym.make("dmrpc/Catch-v0")
    try:
        env.reset(seed=3)
        props = env.unwrapped.properties
        keys = list(props)
        assert "env_id" in keys and "seed" in keys
        specs = props.specs()
        assert specs["seed"].is_readable
        assert int(props["seed"]) == 3
        with pytest.raises(KeyError):
            props["no_such_property"]
    finally:
        env.close()


class Mirror(gym.Env):
    """Observes its last action: large payloads both ways, through every flow-control path."""

    observation_space = spaces.Box(-1.0, 1.0, (1_000_000,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (1_000_000,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.last = np.zeros(1_000_000, np.float32)
        return self.last, {}

    def step(self, action):
        self.last = np.asarray(action, np.float32)
        return self.last, 0.0, False, False, {}


def test_megabyte_payloads_both_ways():
    with Server(Mirror) as s:
        env = DmRpcEnv(s.address, step_timeout=30)
        try:
            env.reset()
            for seed in range(3):
                action = np.random.default_rng(seed).uniform(-1, 1, 1_000_000).astype(np.float32)
                obs, *_ = env.step(action)
                np.testing.assert_array_equal(obs, action)
        finally:
            env.close()


def test_frames_as_observations_through_gymnasiums_wrapper(server):
    """Our server offers our client no RGB observation (frames are made when render() asks):
    gymnasium's AddRenderObservation gives pixel observations, as it does locally."""
    env = gym.wrappers.AddRenderObservation(make(server, render_mode="rgb_array"), render_only=False)
    try:
        assert "RGB" not in env.unwrapped.agent.specs.observations.specs or \
            "RGB" not in env.unwrapped.observation_space.spaces
        obs, _ = env.reset(seed=0)
        assert obs["pixels"].shape == (4, 6, 3) and obs["pixels"].dtype == np.uint8
        obs, *_ = env.step({"move": np.zeros(2, np.float32)})
        assert np.array_equal(obs["pixels"], env.unwrapped.render())
    finally:
        env.close()



CATCH_BOARD = spaces.Box(0.0, 1.0, (10, 10), np.float32)
OBSERVATIONS = {None: CATCH_BOARD, "board": CATCH_BOARD,
                ("board", "reward"): spaces.Dict({"board": CATCH_BOARD,
                                                  "reward": spaces.Box(-np.inf, np.inf, (), np.float64)})}
#: reward= / discount= choices: leave the default, a callable reading observations, or None.
SCALARS = {"reward": {"callable": lambda obs, state: float(obs["reward"]) + 100.0, "none": None},
           "discount": {"callable": lambda obs, state: 0.25 + float(obs["discount"]), "none": None}}


@pytest.mark.parametrize("observations", list(OBSERVATIONS), ids=str)
@pytest.mark.parametrize("reward", ["default", "callable", "none"])
@pytest.mark.parametrize("discount", ["default", "callable", "none"])
def test_observation_space_is_independent_of_reward_and_discount(observations, reward, discount):
    """The space is what ``observations=`` asks for, whatever reward= / discount= are; a
    callable reads observations the space leaves out (Catch's ``reward`` and ``discount``)."""
    kwargs = {"observations": list(observations) if isinstance(observations, tuple) else observations}
    for kind, choice in (("reward", reward), ("discount", discount)):
        if choice != "default":
            kwargs[kind] = SCALARS[kind][choice]
    env = gym.make("dmrpc/Catch-v0", **kwargs)
    try:
        assert env.observation_space == OBSERVATIONS[observations]
        obs, _ = env.reset(seed=0)
        assert obs in env.observation_space
        terminated = False
        while not terminated:                 # Catch ends with a reward of +-1 and discount 0
            obs, r, terminated, _, info = env.step(np.int8(0))
            assert obs in env.observation_space
        assert r in {"default": (-1.0, 1.0), "callable": (99.0, 101.0), "none": (0.0,)}[reward]
        assert env.unwrapped.last_discount == {"default": 0.0, "callable": 0.25, "none": 1.0}[discount]
    finally:
        env.close()
