"""dm_control and bsuite served and read back (issue 20 items 1-3, 5): bit-for-bit round trips,
dm_env's conformance mixin, gymnasium's check_env on the gymnasium view, and the errors."""
from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
from absl.testing import absltest
from gymnasium.utils.env_checker import check_env

import dmrpc_gym
from dmrpc_gym import DmRpcEnv
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.server.envs.factories import Factory
import dm_worlds
import servers
from dm_env_timesteps import ServedConformance, assert_same_timesteps, run_timesteps

os.environ.setdefault("MUJOCO_GL", "egl")
suite = pytest.importorskip("dm_control.suite", reason='pip install -e ".[dm_control]"')
bsuite = pytest.importorskip("bsuite", reason='pip install -e ".[bsuite]"')

CARTPOLE = "dm_control/cartpole-balance"


def cartpole_actions(n: int = 40) -> list:
    return [np.array([np.sin(i / 3.0)]) for i in range(n)]


def test_dm_control_cartpole_round_trip_bit_for_bit_with_a_time_limit():
    # time_limit 0.1 s (10 control steps): every sequence ends in a truncation (LAST, discount 1).
    local = suite.load("cartpole", "balance", task_kwargs={"random": 7, "time_limit": 0.1})
    want = run_timesteps(local, cartpole_actions(), 2)
    assert [w.discount for w in want if w.last()] == [1.0, 1.0]
    with servers.serve_like_cli(CARTPOLE) as server:
        env = dmrpc_gym.connect_dm_env(server.address, {"seed": 7, "time_limit": 0.1})
        try:
            got = run_timesteps(env, cartpole_actions(), 2)
        finally:
            env.close()
    assert_same_timesteps(got, want)


def test_bsuite_catch_round_trip_bit_for_bit():
    from bsuite.environments.catch import Catch as BsuiteCatch
    local = BsuiteCatch(seed=7)        # what bsuite/catch/0 builds, seeded as the world's seed does
    actions = [np.int64(i % 3) for i in range(40)]
    want = run_timesteps(local, actions, 3)
    assert [w.discount for w in want if w.last()] == [0.0, 0.0, 0.0]
    with servers.serve_like_cli("bsuite/catch/0") as server:
        env = dmrpc_gym.connect_dm_env(server.address, {"seed": 7})
        try:
            got = run_timesteps(env, actions, 3)
        finally:
            env.close()
    assert_same_timesteps(got, want)


def _local_cartpole():
    return suite.load("cartpole", "balance", task_kwargs={"random": 7, "time_limit": 0.1})


def _local_catch():
    from bsuite.environments.catch import Catch as BsuiteCatch
    return BsuiteCatch(seed=7)


@pytest.mark.parametrize("target, local, settings, actions", [
    (CARTPOLE, _local_cartpole, {"seed": 7, "time_limit": 0.1}, cartpole_actions()),
    ("bsuite/catch/0", _local_catch, {"seed": 7}, [np.int64(i % 3) for i in range(40)]),
])
def test_the_official_dm_env_adaptor_reads_the_same_sequence(target, local, settings, actions):
    from dm_env_rpc.v1 import dm_env_adaptor
    want = run_timesteps(local(), actions, 2)
    with servers.serve_like_cli(target) as server, servers.official(server.address) as conn:
        env, _ = dm_env_adaptor.create_and_join_world(conn, settings, {})
        try:
            got = run_timesteps(env, [{"action": a} for a in actions], 2)
            for timestep in got:           # the adaptor asks for every observation, the frame too
                assert timestep.observation.pop("RGB", np.zeros((240, 320, 3), np.uint8)).shape == (240, 320, 3)
        finally:
            env.close()
    assert_same_timesteps(got, want)


def test_dm_control_settings_reach_suite_load_and_unknown_ones_are_refused():
    factory = Factory(CARTPOLE)
    env, kind = factory.make({"time_limit": 0.05, "control_timestep": 0.02})
    try:
        assert kind == "dm_env" and env.dm_env.control_timestep() == 0.02
        assert env.dm_env._step_limit == 2.5
    finally:
        env.close()
    with pytest.raises(DmRpcError, match=r"unknown world setting 'speed' for dm_control/cartpole-balance "
                                         r"\(accepted: control_timestep, flat_observation, n_sub_steps, "
                                         r"random, seed, time_limit\)"):
        factory.check({"speed": 1}, "world")


@pytest.mark.parametrize("target, match", [
    ("dm_control/cartpol-balance", r"dm_control has no domain 'cartpol' \(domains: acrobot, .*cartpole"),
    ("dm_control/cartpole-balanse", r"domain 'cartpole' has no task 'balanse' \(tasks: balance, balance_sparse"),
    ("dm_control/cartpole", r"domain 'cartpole' has no task '' .*name one as dm_control/cartpole-TASK"),
    ("bsuite/catch/99", r"bsuite has no id 'catch/99'.*experiments: bandit, .*catch"),
])
def test_unknown_domain_task_or_id_names_what_is_available(target, match):
    with pytest.raises(ValueError, match=match):
        servers.serve_like_cli(target)


def test_the_gymnasium_view_has_per_element_bounds_and_renders():
    with servers.serve_like_cli(CARTPOLE) as server:
        env = gym.make("dmrpc/Remote-v0", address=server.address, render_mode="rgb_array")
        try:
            space = env.observation_space
            assert isinstance(space, gym.spaces.Dict) and sorted(space) == ["position", "velocity"]
            assert space["position"].dtype == np.float64 and env.action_space.dtype == np.float64
            assert env.action_space.low.tolist() == [-1.0] and env.action_space.high.tolist() == [1.0]
            env.reset(seed=1)
            frame = env.render()
            assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8 and frame.any()
        finally:
            env.close()


def test_the_gymnasium_view_says_terminated_and_truncated_as_dm_env_meant():
    with servers.start(dm_worlds.probe) as server:
        env = DmRpcEnv(server.address, world_settings={"limit": 3})
        try:
            env.reset(seed=0)
            still = {"move": np.int32(0), "force": np.zeros(2, np.float32)}
            flags = [env.step(still)[2:4] for _ in range(3)]
            assert flags == [(False, False), (False, False), (False, True)]     # LAST, discount 0.5
            env.reset()
            _, _, terminated, truncated, info = env.step({**still, "move": np.int32(2)})
            assert (terminated, truncated, env.last_discount) == (True, False, 0.0)   # LAST, discount 0
        finally:
            env.close()


@pytest.mark.parametrize("target", [CARTPOLE, "bsuite/catch/0", "tests.support.dm_worlds:probe"])
def test_gymnasium_check_env_passes_on_the_gymnasium_view(target):
    with servers.serve_like_cli(target) as server:
        env = DmRpcEnv(server.address)
        try:
            check_env(env, skip_render_check=True)
        finally:
            env.close()


def test_a_factory_returning_no_env_is_refused_when_the_world_is_created():
    with servers.start(dm_worlds.not_an_env) as server:
        with pytest.raises(DmRpcError, match="returned a object, expected a gymnasium Env, a PettingZoo "
                                             "ParallelEnv or a dm_env.Environment"):
            DmRpcEnv(server.address)


def test_an_action_outside_a_bounded_array_is_refused_naming_it():
    with servers.serve_like_cli(CARTPOLE) as server:
        env = dmrpc_gym.connect_dm_env(server.address)
        try:
            env.reset()
            with pytest.raises(ValueError, match=r"'action'.*1\.5.*1\.0|'action'.*above"):
                env.step(np.array([1.5]))
        finally:
            env.close()


class CartpoleConformance(ServedConformance, absltest.TestCase):
    factory = CARTPOLE
    settings = {"time_limit": 0.2}

    def make_action_sequence(self):
        return iter(cartpole_actions(45))


class BsuiteCatchConformance(ServedConformance, absltest.TestCase):
    factory = "bsuite/catch/0"


def test_record_writes_a_dm_control_video(tmp_path):
    from PIL import Image
    from console import Served, console
    served = Served(CARTPOLE, tmp_path)
    try:
        result = console("record", served.address, "--out", "cartpole.gif", "--steps", "5",
                         "--no-progress", cwd=tmp_path)
    finally:
        served.stop()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("wrote cartpole.gif: 6 frames")
    with Image.open(tmp_path / "cartpole.gif") as gif:
        assert gif.n_frames == 6


def test_sb3_ppo_trains_on_a_served_dm_control_task_through_the_flat_spaces_view():
    torch = pytest.importorskip("torch")
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from dmrpc_gym.integrations.sb3 import FlatSpaces
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with servers.serve_like_cli(CARTPOLE) as server:
        # time_limit 0.5 s: 50-step episodes, each ended by the time limit (a truncation)
        env = make_vec_env(lambda: FlatSpaces(DmRpcEnv(server.address, world_settings={"time_limit": 0.5})),
                           n_envs=2, seed=0)
        try:
            assert sorted(env.observation_space) == ["position", "velocity"]
            assert env.action_space.shape == (1,)
            model = PPO("MultiInputPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0)
            model.learn(256)
        finally:
            env.close()
            torch.set_num_threads(threads)
    episodes = list(model.ep_info_buffer)
    assert len(episodes) >= 4 and {e["l"] for e in episodes} == {50}
    assert all(0.0 <= e["r"] <= 50.0 for e in episodes)      # cartpole-balance: reward in [0, 1] a step
