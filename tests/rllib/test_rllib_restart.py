"""An RLlib PPO run outlives its server PROCESS killed by SIGKILL and started again on the same port."""
from __future__ import annotations

import sys
import threading

import pytest
from rllib_support import ROOT, require_ray

ray = require_ray()

from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402

from dmrpc_gym.integrations import rllib as dmrpc_rllib  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from processes import ServedProcess, free_port  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    dmrpc_rllib.register()
    yield
    ray.shutdown()


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
    algo = config.build_algo()
    restarter = None
    try:
        algo.train()
        killer = threading.Timer(0.5, served.kill)
        killer.start()                                   # killed while the next iteration samples
        restarter = threading.Timer(2.0, served.start)   # and back a little later, on the same port
        restarter.start()
        results = [algo.train() for _ in range(3)]
        killer.join()
    finally:
        if restarter is not None:
            restarter.join()
        algo.stop()
        served.close()
    assert len(served.processes) == 2 and served.processes[0].returncode == -9
    runners = results[-1]["env_runners"]
    assert runners.get("num_env_step_failures", 0) >= 1, runners        # the kill was felt by a step
    assert runners["num_env_steps_sampled_lifetime"] >= 800
