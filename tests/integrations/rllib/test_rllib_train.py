"""RLlib PPO (new API stack) learns Catch over dm_env_rpc, trains two policies on multi-agent Tag, and
outlives its server process killed by SIGKILL and started again."""
from __future__ import annotations

import sys
import threading

import gymnasium as gym
import numpy as np
import pytest
from rllib_support import ROOT, require_ray

ray = require_ray()

from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.rllib.connectors.env_to_module import FlattenObservations  # noqa: E402

from dmrpc_gym.integrations import rllib as dmrpc_rllib  # noqa: E402
from dmrpc_gym.integrations.rllib import role  # noqa: E402
from dmrpc_gym.server import Server  # noqa: E402
from dmrpc_gym.worlds.catch import Catch  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "support"))
from processes import ServedProcess, free_port  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    dmrpc_rllib.register()
    yield
    ray.shutdown()


def _flat_weights(state: dict) -> np.ndarray:
    return np.concatenate([np.asarray(value, dtype=np.float64).reshape(-1) for value in state.values()])


@pytest.mark.timeout(1200)    # 25 iterations at most; minutes on a busy 2-core machine
def test_ppo_learns_catch_with_two_env_runners_within_25_iterations():
    config = (
        PPOConfig()
        .environment("dmrpc/Catch-v0", env_config={})
        .env_runners(num_env_runners=2, num_envs_per_env_runner=2, num_cpus_per_env_runner=0.5)
        .training(train_batch_size_per_learner=2000, minibatch_size=128, num_epochs=10, lr=1e-3,
                  lambda_=0.95)
        .rl_module(model_config={"fcnet_hiddens": [64, 64]})
        .debugging(seed=0)
    )
    algo = config.build_algo()
    returns = []
    try:
        for _ in range(25):
            result = algo.train()
            returns.append(result["env_runners"]["episode_return_mean"])
            if returns[-1] > 0.6:
                break
    finally:
        algo.stop()
    print(f"mean episode return per iteration: {returns}")
    assert returns[0] < 0.0, returns            # a random policy misses most balls (about -0.8)
    assert returns[-1] > 0.6, f"mean episode return per iteration: {returns}"


def test_two_policies_train_on_multi_agent_tag():
    config = (
        PPOConfig()
        .environment("dmrpc/Tag-v0", env_config={"world_settings": {"size": 5, "max_steps": 20}})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2, num_cpus_per_env_runner=0.5)
        .multi_agent(policies={"pursuer", "evader"},
                     policy_mapping_fn=lambda agent_id, episode, **kwargs: role(agent_id))
        .training(train_batch_size_per_learner=400, minibatch_size=100, num_epochs=2)
        .rl_module(model_config={"fcnet_hiddens": [32]})
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        before = algo.learner_group.get_weights()
        results = [algo.train() for _ in range(2)]
        after = algo.learner_group.get_weights()
    finally:
        algo.stop()
    assert set(before) == set(after) == {"pursuer", "evader"}
    for policy in ("pursuer", "evader"):
        stats = results[-1]["learners"][policy]
        assert stats["num_module_steps_trained"] > 0, stats
        assert np.isfinite(stats["policy_loss"]) and stats["vf_loss"] != 0.0, stats
        change = np.abs(_flat_weights(after[policy]) - _flat_weights(before[policy])).max()
        assert change > 0.0, f"the {policy} policy's weights did not change"
    sampled = results[-1]["env_runners"]["num_agent_steps_sampled_lifetime"]
    assert set(sampled) == {"pursuer_0", "pursuer_1", "evader_0", "evader_1"}, sampled


class TwoSensors(gym.Env):
    """A world with two observations (a 2-D grid and a cell index from -1) and a Discrete(2, start=-1) action."""

    observation_space = gym.spaces.Dict({"grid": gym.spaces.Box(0.0, 1.0, (2, 3), np.float32),
                                         "cell": gym.spaces.Discrete(3, start=-1)})
    action_space = gym.spaces.Discrete(2, start=-1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        assert action in (-1, 0), action
        self.t += 1
        return self.observation_space.sample(), float(action == 0), self.t >= 5, False, {}


def test_remote_world_with_several_observations_trains_with_rllibs_flatten_connector():
    with Server(TwoSensors) as server:
        config = (
            PPOConfig()
            .environment("dmrpc/Remote-v0", env_config={"address": server.address, "world_settings": {}})
            .env_runners(num_env_runners=0,
                         env_to_module_connector=lambda env, spaces, device: FlattenObservations())
            .training(train_batch_size_per_learner=100, minibatch_size=50, num_epochs=1)
            .rl_module(model_config={"fcnet_hiddens": [8]})
        )
        algo = config.build_algo()
        try:
            spaces = algo.env_runner.env.single_observation_space
            result = algo.train()
        finally:
            algo.stop()
    assert set(spaces) == {"cell", "grid"} and spaces["grid"].shape == (6,), spaces
    assert result["env_runners"]["num_env_steps_sampled_lifetime"] >= 100
    assert result["env_runners"]["episode_return_mean"] > 0.0     # reward 1 per action that reached the world as 0


def test_rllib_runners_in_vector_entry_point_mode_step_dm_env_rpc_vector_envs():
    """Real env runners in RLlib's vector_entry_point mode: one pipelined DmRpcVectorEnv each, spread by the rule."""
    servers = [Server(Catch).start() for _ in range(2)]
    a, b = [server.address for server in servers]
    config = (PPOConfig().environment("dmrpc/Catch-v0", env_config={"addresses": [a, b]})
              .env_runners(num_env_runners=2, num_envs_per_env_runner=2, num_cpus_per_env_runner=0.5,
                           gym_env_vectorize_mode="vector_entry_point"))
    algo = config.build_algo()
    try:
        found = algo.env_runner_group.foreach_env_runner(
            lambda r: (r.worker_index, type(r.env.unwrapped).__name__,
                       [sub.connection.address for sub in r.env.unwrapped.envs],
                       sum(len(e) for e in r.sample(num_timesteps=40))), local_env_runner=False)
    finally:
        algo.stop()
        for server in servers:
            server.stop(grace=0)
    # index = vector * 2 + (worker - 1) over [a, b]: runner 1 steps both sub-envs on a, runner 2 on b.
    assert sorted(found) == [(1, "DmRpcVectorEnv", [a, a], 40), (2, "DmRpcVectorEnv", [b, b], 40)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("vector", [False, True], ids=["envs", "vector_env"])
def test_ppo_survives_a_server_killed_and_restarted(vector):
    port = free_port()
    served = ServedProcess(port)
    env_config = {"address": f"127.0.0.1:{port}", "reconnect": True, "connect_timeout": 60}
    config = (
        PPOConfig()
        .environment("dmrpc/Remote-v0", env_config=env_config)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
        # RLlib makes the env again after a failed step; that env waits for the server.
        .fault_tolerance(restart_failed_sub_environments=True)
        .training(train_batch_size_per_learner=200, minibatch_size=100, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [16]})
        .debugging(seed=0)
    )
    if vector:                                           # one DmRpcVectorEnv per runner
        config = config.env_runners(gym_env_vectorize_mode="vector_entry_point")
    algo = restarter = None
    try:
        algo = config.build_algo()
        algo.train()
        served.kill()                                    # killed between iterations: the next one's
        restarter = threading.Timer(2.0, served.start)   # steps find it dead (a timer could fire after
        restarter.start()                                # a fast machine's last step); back 2 s later
        results = [algo.train() for _ in range(3)]
    finally:
        if restarter is not None:
            restarter.join()
        if algo is not None:
            algo.stop()
        served.close()
    assert len(served.processes) == 2 and served.processes[0].returncode == -9
    # The failure count is per iteration: the kill may be felt in any of the three.
    failures = [r["env_runners"].get("num_env_step_failures", 0) for r in results]
    assert sum(failures) >= 1, failures                                  # the kill was felt by a step
    assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] >= 800
