"""Between our client and our server a served env is the local env (issue 29's defects, one test each).

Every comparison is with the env as a user builds it locally, never with what the bridge was given.
"""
from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest

import dmrpc_gym
import servers
from dmrpc_gym import DmRpcError
from dmrpc_gym.client.env import DmRpcEnv
from identity_worlds import Blind, Composite, Counted, Shapes, Tally


def assert_identical(a, b, where="value"):
    """Equal values of the same types, dtypes and shapes, through tuples, lists and dicts."""
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), (where, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, a, b)
        for k in a:
            assert_identical(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (np.ndarray, np.generic)):
        assert isinstance(b, (np.ndarray, np.generic)) and a.dtype == b.dtype and np.shape(a) == np.shape(b), \
            (where, a, b)
        assert np.array_equal(a, b), (where, a, b)
    else:
        assert a == b, (where, a, b)


# -- rendering ----------------------------------------------------------------------------

def test_rgb_array_makes_no_frame_until_render_is_called():
    """SB3's make_vec_env asks for rgb_array: stepping must not render (it pulled a frame a step)."""
    with servers.start(Counted) as server:
        env = DmRpcEnv(server.address, render_mode="rgb_array")
        local = Counted(render_mode="rgb_array")
        try:
            Counted.renders = 0
            env.reset(seed=3)
            local.reset(seed=3)
            for _ in range(20):
                if env.step(1)[3]:
                    env.reset(seed=3)
                if local.step(1)[3]:
                    local.reset(seed=3)
            assert Counted.renders == 0
            frame = env.render()
            assert Counted.renders == 1
            assert_identical(frame, local.render())          # the frame of the current state
        finally:
            env.close()


@pytest.mark.parametrize("render_mode", [None, "rgb_array"])
def test_the_server_builds_the_env_with_the_clients_render_mode(render_mode):
    """``serve``'s default render mode used to change an env whose observations depend on it."""
    with servers.serve_like_cli("identity_worlds:Counted") as server:
        env = gym.make("dmrpc/Remote-v0", address=server.address, render_mode=render_mode)
        local = Counted(render_mode=render_mode)
        try:
            assert_identical(env.reset(seed=5)[0], local.reset(seed=5)[0])
            assert_identical(env.step(0)[0], local.step(0)[0])
        finally:
            env.close()


def test_a_world_that_cannot_render_fails_only_when_asked_with_the_servers_reason():
    with servers.start(Blind) as server:
        env = DmRpcEnv(server.address, render_mode="rgb_array")     # as gym.make succeeds without pygame
        try:
            env.reset(seed=0)
            env.step(0)
            with pytest.raises(DmRpcError, match="pygame is not installed"):
                env.render()
        finally:
            env.close()


def test_a_foreign_client_still_gets_the_rgb_observation_without_a_hidden_reset():
    """A client with no render header (the official one) gets serve's default and an RGB observation;
    its shape is probed on an env of its own, so the client's env is not reset on the server's account."""
    with servers.start(Counted) as server, servers.official(server.address) as conn:
        from dm_env_rpc.v1 import dm_env_adaptor
        env, world = dm_env_adaptor.create_and_join_world(conn, {"seed": 4}, {})
        try:
            assert "RGB" in env.observation_spec() and env.observation_spec()["RGB"].shape == (3, 4, 3)
            first = env.reset().observation["observation"]
            local = Counted(render_mode="rgb_array")
            assert_identical(first, local.reset(seed=4)[0])
        finally:
            env.close()


# -- spaces -------------------------------------------------------------------------------

def test_composite_spaces_come_back_as_they_are():
    """A Tuple came back as a Dict; 16-bit dtypes widened; Discrete lost nothing only by luck."""
    with servers.start(Composite) as server:
        env = DmRpcEnv(server.address)
        local = Composite()
        try:
            assert env.observation_space == local.observation_space
            assert env.action_space == local.action_space
            obs, info = env.reset(seed=1)
            assert env.observation_space.contains(obs) and isinstance(obs, tuple)
            assert obs[1].dtype == np.float16 and obs[2]["hp"].dtype == np.uint16
            assert_identical(info, {"where": "reset", "seed": 1})
            action = (np.int64(2), np.array([3, 9], np.uint16))
            obs, reward, _, _, info = env.step(action)
            assert reward == 2.0
            assert_identical(info, {"action": np.array([3, 9], np.uint16), "kind": (1, "a")})
        finally:
            env.close()


def test_blackjack_is_a_tuple_of_discretes_with_the_local_values():
    with servers.serve_like_cli("Blackjack-v1") as server:
        env = gym.make("dmrpc/Remote-v0", address=server.address)
        local = gym.make("Blackjack-v1")
        try:
            assert env.observation_space == local.observation_space
            assert isinstance(env.observation_space, gym.spaces.Tuple)
            obs, _ = env.reset(seed=11)
            expected, _ = local.reset(seed=11)
            assert obs == expected and isinstance(obs, tuple)
        finally:
            env.close()


def test_info_is_the_served_envs_own():
    with servers.start(Counted) as server:
        env = DmRpcEnv(server.address)
        try:
            _, info = env.reset(seed=0)
            assert info == {}
            *_, info = env.step(0)
            assert info == {} and env.state == dmrpc_gym.State.RUNNING and env.last_discount == 1.0
        finally:
            env.close()


# -- dm_env -------------------------------------------------------------------------------

def test_a_served_dm_env_starts_at_its_first_episode_with_its_own_specs():
    """The server reset a rendering dm_env once before the client's first reset, and the specs
    changed on the way (names, bounds' shapes, classes, dtypes)."""
    with servers.start(Shapes) as server:
        env = dmrpc_gym.connect_dm_env(server.address)
        local = Shapes()
        try:
            for ours, theirs in ((env.action_spec(), local.action_spec()),
                                 *zip(env.observation_spec().values(), local.observation_spec().values())):
                assert type(ours) is type(theirs) and ours.name == theirs.name and ours.dtype == theirs.dtype
                assert ours.shape == theirs.shape
                if isinstance(theirs, type(local.action_spec())):
                    assert_identical(ours.minimum, theirs.minimum)
                    assert_identical(ours.maximum, theirs.maximum)
            assert list(env.observation_spec()) == list(local.observation_spec())
            for _ in range(2):                        # two episodes, from the very first reset
                ours, theirs = env.reset(), local.reset()
                assert_identical(dict(ours.observation), theirs.observation)
                while not theirs.last():
                    action = np.array([0.5])
                    ours, theirs = env.step(action), local.step(action)
                    assert ours.step_type == theirs.step_type and ours.reward == theirs.reward
                    assert ours.discount == theirs.discount
                    assert_identical(dict(ours.observation), theirs.observation)
        finally:
            env.close()


def test_dm_control_first_reset_is_the_local_first_reset():
    suite = pytest.importorskip("dm_control.suite")
    with servers.serve_like_cli("dm_control/cartpole-balance") as server:
        env = dmrpc_gym.connect_dm_env(server.address, {"random": 7})
        local = suite.load("cartpole", "balance", task_kwargs={"random": 7})
        try:
            spec, expected = env.action_spec(), local.action_spec()
            assert type(spec) is type(expected) and spec.minimum.shape == expected.minimum.shape == (1,)
            first, theirs = env.reset(), local.reset()
            for key, value in theirs.observation.items():
                assert_identical(first.observation[key], value, key)
        finally:
            env.close()
            local.close()


# -- errors -------------------------------------------------------------------------------

def failing_factory():
    raise RuntimeError("sim license missing")


def test_a_factory_that_raises_is_the_servers_failure_logged_once(caplog):
    with servers.start(failing_factory, kind="gym") as server, caplog.at_level(logging.ERROR, "dmrpc_gym.server"):
        for _ in range(2):
            with pytest.raises(DmRpcError, match="sim license missing") as raised:
                DmRpcEnv(server.address, world_settings={})
            assert raised.value.code_name == "INTERNAL"
    logged = [r for r in caplog.records if "could not be created" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


def test_a_wrong_keyword_is_still_invalid_argument():
    with servers.start(Counted) as server:
        with pytest.raises(DmRpcError, match="speed") as raised:
            DmRpcEnv(server.address, world_settings={"speed": 2})
        assert raised.value.code_name == "INVALID_ARGUMENT"


def test_sb3_make_vec_env_works_against_a_server_that_cannot_render():
    """make_vec_env passes render_mode="rgb_array"; it failed at construction against such a server."""
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_util import make_vec_env
    with servers.start(Blind) as server:
        Blind.renders = 0
        venv = make_vec_env("dmrpc/Remote-v0", n_envs=2, env_kwargs=dict(address=server.address))
        try:
            model = sb3.PPO("MlpPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, seed=0)
            model.learn(32)
            assert Blind.renders == 0 and venv.render_mode == "rgb_array"
        finally:
            venv.close()


def test_what_foreign_clients_lose_is_said_once_by_name(caplog):
    with servers.start(Composite) as server, caplog.at_level(logging.INFO, "dmrpc_gym.server"):
        for _ in range(2):
            DmRpcEnv(server.address, world_settings={}).close()
    said = [r.getMessage() for r in caplog.records if "exact space" in r.getMessage()]
    assert any("observation is a Tuple" in m for m in said) and any("float16: it travels as float32" in m for m in said)
    assert len(said) == len(set(said))


def test_reward_types_and_both_end_flags_are_the_envs():
    """Rewards came back as float whatever the env returned, and terminated-and-truncated as terminated."""
    with servers.start(Tally) as server:
        env = DmRpcEnv(server.address)
        local = Tally()
        try:
            env.reset(seed=0)
            local.reset(seed=0)
            for action in (1, 1, 0):
                ours, theirs = env.step(action), local.step(action)
                assert type(ours[1]) is type(theirs[1]) and ours[1] == theirs[1]
                assert ours[2:4] == theirs[2:4]
            assert ours[2:4] == (True, True)
        finally:
            env.close()


def test_scalars_are_held_as_the_env_holds_them():
    """A shape-() value is a 0-d array, a numpy scalar or a Python number as the env made it (FrozenLake's
    int, dm_control's np.float64, rock-paper-scissors' 0-d arrays)."""
    with servers.serve_like_cli("FrozenLake-v1") as server:
        env = gym.make("dmrpc/Remote-v0", address=server.address)
        local = gym.make("FrozenLake-v1")
        try:
            ours, theirs = env.reset(seed=3)[0], local.reset(seed=3)[0]
            assert type(ours) is type(theirs) is int and ours == theirs
            ours, theirs = env.step(1)[0], local.step(1)[0]
            assert type(ours) is type(theirs) and ours == theirs
        finally:
            env.close()


def test_a_foreign_servers_frames_come_with_every_step_and_that_is_said_once():
    """The official server renders nothing on demand: its camera observation is the frame source, and
    the client says once what that costs (8 x 6 x 3 bytes a step here)."""
    from official_servers import UNUSUAL_SPECS, start_official_server
    with start_official_server(UNUSUAL_SPECS, episode_length=3) as server:
        with pytest.warns(UserWarning, match=r"'camera' observation \(\[8, 6, 3\], 144 bytes\), sent with every step"):
            env = DmRpcEnv(server.address, render_mode="rgb_array", render_observation="camera")
        try:
            env.reset()
            assert env.render().shape == (8, 6, 3)
        finally:
            env.close()
