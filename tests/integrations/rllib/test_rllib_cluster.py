"""A real Ray cluster: `ray start --head` on loopback, env runners stepping worlds on two `dmrpc-gym serve` processes."""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from rllib_support import ROOT, child_env, require_ray, served, server_worlds

ray = require_ray()

from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402

from dmrpc_gym.integrations import rllib as dmrpc_rllib  # noqa: E402

RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ray(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess:
    return subprocess.run([RAY, *args], cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def head():
    """A head node started with the `ray start` command on 127.0.0.1; `ray stop` always follows."""
    address = f"127.0.0.1:{_free_port()}"
    try:
        # The cluster checks a token (RAY_AUTH_MODE=token, see conftest.py): make one if this machine has none.
        token = _ray("get-auth-token", "--generate")
        assert token.returncode == 0, token.stderr
        started = _ray("start", "--head", f"--port={address.rsplit(':', 1)[1]}", "--node-ip-address=127.0.0.1",
                       "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats")
        assert started.returncode == 0, started.stdout + started.stderr
        ray.init(address=address, _node_ip_address="127.0.0.1", log_to_driver=False)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _ray("stop", "--force", timeout=120)


def test_env_runners_on_a_cluster_step_worlds_on_two_servers_as_the_rule_says(head):
    assert ray.get_runtime_context().gcs_address == head
    dmrpc_rllib.register()
    with served("dmrpc_gym.worlds:Catch") as a, served("dmrpc_gym.worlds:Catch") as b:
        addresses = [a, a, b]
        config = (
            PPOConfig()
            .environment("dmrpc/Catch-v0", env_config={"addresses": addresses})
            .env_runners(num_env_runners=2, num_envs_per_env_runner=2, num_cpus_per_env_runner=0.5)
            .training(train_batch_size_per_learner=200, minibatch_size=100, num_epochs=1)
            .rl_module(model_config={"fcnet_hiddens": [16]})
        )
        algo = config.build_algo()
        try:
            placed = algo.env_runner_group.foreach_env_runner(
                lambda runner: (runner.worker_index, [(env.unwrapped.connection.address, env.unwrapped.world_name)
                                                      for env in runner.env.unwrapped.envs]),
                local_env_runner=False)
            worlds = {a: server_worlds(a), b: server_worlds(b)}
            results = [algo.train() for _ in range(2)]
        finally:
            algo.stop()
        # index = vector_index * num_env_runners + (worker_index - 1); address = addresses[index % 3]
        by_runner = dict(placed)
        assert sorted(by_runner) == [1, 2]
        for worker, envs in by_runner.items():
            expected = [addresses[(vector * 2 + worker - 1) % 3] for vector in range(2)]
            assert [address for address, _ in envs] == expected, (worker, envs)
        # From the servers' side: each one holds exactly the worlds the runners say they play there.
        for address in (a, b):
            claimed = {world for envs in by_runner.values() for where, world in envs if where == address}
            assert worlds[address] == claimed, (address, worlds[address], claimed)
        assert len(worlds[a]) == 3 and len(worlds[b]) == 1
        assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] >= 400
        assert results[-1]["env_runners"]["num_episodes_lifetime"] > 0
