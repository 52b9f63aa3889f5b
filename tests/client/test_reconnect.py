"""reconnect=True: envs outlive a server that restarts (issue 21 item 8), against real servers."""
from __future__ import annotations

import signal
import threading
import warnings

import numpy as np
import pytest

import dmrpc_gym
from dmrpc_gym import DmRpcEnv, DmRpcError
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.properties import Properties
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.catch import Catch
from dmrpc_gym.worlds.tag import Tag
from processes import Proxy, ServedProcess, free_port

STILL = np.int8(0)


class Restartable:
    """A server of ``factory`` that a test restarts on the same address; stopped on leaving ``with``."""

    def __init__(self, factory):
        self.server = Server(factory).start()
        self.address = self.server.address

    def restart(self) -> None:
        self.server.stop()
        self.server = Server(self.server.factory.target, address=self.address).start()

    def __enter__(self) -> "Restartable":
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop()


def test_env_reconnects_on_the_reset_after_a_lost_connection():
    with Restartable(Catch) as served:
        env = DmRpcEnv(served.address, reconnect=True, connect_timeout=30)
        env.reset(seed=0)
        env.step(STILL)
        served.restart()
        with pytest.raises(ConnectionError, match=served.address):       # mid-episode: raised, as before
            env.step(STILL)
        with pytest.warns(RuntimeWarning, match="reconnected .* created world 'world-1' again"):
            obs, _ = env.reset(seed=0)
        assert obs.shape == (10, 10) and env.reconnects == 1
        env.step(STILL)
        served.restart()                  # between episodes: nothing noticed it yet
        with pytest.warns(RuntimeWarning, match="reconnected"):
            env.reset(seed=1)
        env.step(STILL)
        assert env.reconnects == 2
        env.close()


def test_without_reconnect_a_lost_connection_stays_lost():
    with Restartable(Catch) as served:
        env = DmRpcEnv(served.address)
        env.reset(seed=0)
        served.restart()
        with pytest.raises(ConnectionError):
            env.reset(seed=0)
        with pytest.raises(ConnectionError):
            env.reset(seed=0)
        env.close()


def test_a_world_joined_by_name_is_joined_again_by_name():
    with Restartable(Catch) as served:
        with Connection(served.address) as host:
            name = host.send(pb.CreateWorldRequest()).world_name
            env = DmRpcEnv(served.address, world_name=name, reconnect=True)
            env.reset(seed=0)
        served.restart()
        with Connection(served.address) as host:       # whoever hosts the world makes it again
            assert host.send(pb.CreateWorldRequest()).world_name == name
            with pytest.warns(RuntimeWarning, match=f"joined world {name!r} again"):
                env.reset(seed=0)
            env.step(STILL)
            env.close()
        served.restart()                          # and now nobody makes it again
        env = DmRpcEnv(served.address, world_settings={"rows": 5}, reconnect=True)
        joined = DmRpcEnv(served.address, world_name=env.world_name, reconnect=True)
        joined.reset()
        served.restart()
        with pytest.raises(DmRpcError, match="NOT_FOUND"):
            joined.reset()
        joined.close()
        env.close()


def test_vector_env_reconnects_its_lost_sub_envs_on_reset():
    with Restartable(Catch) as served:
        envs = dmrpc_gym.DmRpcVectorEnv(3, served.address, reconnect=True)
        envs.reset(seed=0)
        envs.step(np.zeros(3, np.int8))
        served.restart()
        with pytest.raises(ConnectionError, match="sub-env 0"):
            envs.step(np.zeros(3, np.int8))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            obs, _ = envs.reset(seed=0)
        assert obs.shape == (3, 10, 10) and [env.reconnects for env in envs.envs] == [1, 1, 1]
        for _ in range(12):                          # through an autoreset too
            envs.step(np.zeros(3, np.int8))
        envs.close()


def test_sb3_training_survives_a_server_killed_and_restarted():
    """PPO over DmRpcSB3VecEnv while the server PROCESS is SIGKILLed and started again on its port."""
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.callbacks import BaseCallback

    from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv

    port = free_port()
    served = ServedProcess(port)
    restarter: list[threading.Thread] = []
    try:
        venv = DmRpcSB3VecEnv(2, f"127.0.0.1:{port}", reconnect=True, connect_timeout=60,
                              flat_spaces=True)

        class KillAt(BaseCallback):
            def _on_step(self) -> bool:
                if self.num_timesteps == 300:
                    served.kill()
                    thread = threading.Thread(target=served.start)     # back after its start-up time
                    thread.start()
                    restarter.append(thread)
                return True

        lost = []

        class Count(BaseCallback):
            def _on_step(self) -> bool:
                lost.extend(info["connection_lost"] for info in self.locals["infos"] if "connection_lost" in info)
                return True

        model = sb3.PPO("MlpPolicy", venv, n_steps=128, batch_size=64, n_epochs=1, seed=0, device="cpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            model.learn(total_timesteps=1024, callback=[KillAt(), Count()])
        for thread in restarter:
            thread.join()
        assert model.num_timesteps >= 1024
        assert len(served.processes) == 2 and served.processes[0].returncode == -signal.SIGKILL
        assert [env.reconnects for env in venv.envs] == [1, 1]
        assert len(lost) == 2 and all(f"127.0.0.1:{port}" in why for why in lost)
        venv.close()
    finally:
        for thread in restarter:
            thread.join()
        served.close()


def test_a_created_world_is_joined_again_when_the_same_server_still_has_it():
    """A network failure, not a restart: the env joins the world it created again (none is left behind)."""
    with Restartable(Catch) as served:
        proxy = Proxy(served.address)
        try:
            # (shared_memory=False: over the relay, not moved past it to the server's same-host socket)
            env = DmRpcEnv(proxy.address, world_settings={"rows": 6}, reconnect=True, shared_memory=False)
            env.reset(seed=0)
            env.step(STILL)
            proxy.cut()
            with pytest.raises(ConnectionError):
                env.step(STILL)
            with pytest.warns(RuntimeWarning, match="joined world 'world-1' again"):
                obs, _ = env.reset(seed=0)
            assert obs.shape == (6, 10) and env.world_name == "world-1"
            env.step(STILL)
            with Connection(served.address) as conn:
                assert Properties(conn)["worlds"].tolist() == ["world-1"]
            env.close()
        finally:
            proxy.close()


@pytest.mark.parametrize("cut", [False, True], ids=["server_restarted", "network_cut"])
def test_parallel_env_reconnects_every_agent_on_reset(cut):
    """After a restart the world is created again; after a network cut the same world is joined again."""
    with Restartable(Tag) as served:
        proxy = Proxy(served.address)
        try:
            env = dmrpc_gym.DmRpcParallelEnv(proxy.address, world_settings={"size": 5}, reconnect=True,
                                             shared_memory=False)    # (over the relay: see above)
            env.reset(seed=0)
            env.step({agent: 0 for agent in env.agents})
            proxy.cut() if cut else served.restart()
            with pytest.raises(ConnectionError):
                env.step({agent: 0 for agent in env.agents})
            with pytest.warns(RuntimeWarning, match=f"{'joined' if cut else 'created'} world 'world-1' again"):
                observations, _ = env.reset(seed=0)
            assert sorted(observations) == sorted(env.possible_agents) and env.reconnects == 1
            env.step({agent: 0 for agent in env.agents})
            with Connection(served.address) as conn:
                assert Properties(conn)["worlds"].tolist() == ["world-1"]
            env.close()
            with Connection(served.address) as conn:      # the env still owns it: destroyed on close
                assert Properties(conn)["worlds"].tolist() == []
        finally:
            proxy.close()
