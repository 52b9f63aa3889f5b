"""One HTTP/2 connection per server for a vector env's sub-envs (a stream each), against our
server and the foreign ones: grpcio (a server written with the official package) and grpclib
here, grpc-js in test_interop_grpcjs."""
from __future__ import annotations

import pickle
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import servers
from interop_peers import GrpclibServer, echo_on_one_connection, self_signed
from official_servers import OfficialServer

from dmrpc_gym.client.fanout import Batch
from dmrpc_gym.client.vector import DmRpcVectorEnv
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.transport.limits import ConnectionLimits
from dmrpc_gym.worlds.catch import Catch

TIMEOUT = 10.0


def sockets(envs) -> set[int]:
    return {env.connection.fileno() for env in envs}


def episodes(address: str, share: bool, steps: int = 25) -> list[np.ndarray]:
    """The observations of a seeded run of 4 Catch sub-envs."""
    env = DmRpcVectorEnv(4, address, share_connections=share, step_timeout=TIMEOUT)
    try:
        assert len(sockets(env.envs)) == (1 if share else 4)
        obs, _ = env.reset(seed=[1, 2, 3, 4])
        seen, rng = [obs], np.random.default_rng(0)
        for _ in range(steps):
            obs, *_ = env.step(rng.integers(-1, 2, 4).astype(np.int8))
            seen.append(obs)
        return seen
    finally:
        env.close()


def test_sub_envs_share_one_connection_and_get_their_own_answers():
    with servers.start(Catch) as server:
        shared = episodes(server.address, share=True)
        deadline = time.monotonic() + 5
        while server._connections and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not server._connections                 # closed with the last sub-env
        separate = episodes(server.address, share=False)
    # The same seeds give the same episodes: no sub-env was handed another's answer.
    assert all(np.array_equal(a, b) for a, b in zip(shared, separate))
    assert len({obs.tobytes() for obs in shared[1]}) > 1      # the seeds made the worlds differ


def test_the_server_sees_one_connection():
    with servers.start(Catch) as server:
        env = DmRpcVectorEnv(3, server.address)
        env.reset(seed=0)
        assert len(server._connections) == 1
        env.close()


def test_streams_past_the_servers_limit_go_on_another_connection():
    with servers.start(Catch, limits=ConnectionLimits(max_streams=2)) as server:
        env = DmRpcVectorEnv(5, server.address, step_timeout=TIMEOUT)
        try:
            assert len(sockets(env.envs)) == 3 and len(env._batch.env_kwargs["connections"]) == 3
            env.reset(seed=0)
            for _ in range(5):
                env.step(np.zeros(5, np.int8))
        finally:
            env.close()


class Flaky(gym.Env):
    """Catch-like: the third env made fails on its third step."""
    made = 0

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 1, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.index, Flaky.made = Flaky.made, Flaky.made + 1
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.index == 2 and self.t == 3:
            raise RuntimeError("the third world broke")
        return np.full(2, self.t / 100, np.float32), 0.0, False, False, {}


def test_a_failing_sub_env_is_named_and_the_others_go_on():
    Flaky.made = 0
    with servers.start(Flaky, kind="gym") as server:
        batch = Batch(4, server.address, step_timeout=TIMEOUT)
        try:
            assert len(sockets(batch.envs)) == 1
            batch.reset(range(4), seeds=[None] * 4)
            for _ in range(2):
                batch.step({i: 0 for i in range(4)})
            with pytest.raises(DmRpcError, match="sub-env 2") as caught:
                batch.step({i: 0 for i in range(4)})
            assert "the third world broke" in caught.value.message
            results = batch.step({i: 0 for i in (0, 1, 3)})       # the others' streams go on
            assert {i: r[0][0] for i, r in results.items()} == {i: np.float32(0.04) for i in (0, 1, 3)}
            batch.envs[1].close()                                  # one stream ends, not the connection
            results = batch.step({i: 0 for i in (0, 3)})
            assert results[3][0][0] == np.float32(0.05)
        finally:
            batch.close()


@pytest.mark.parametrize("tls", [False, True])
def test_threads_on_streams_of_one_connection_do_not_wait_for_each_other(tmp_path, tls):
    """A read that waits for its answer lets the connection go: another thread's request on
    another stream is sent (and answered) meanwhile; over plain TCP and over TLS."""
    from dmrpc_gym.protocol.wire import pb

    served, used = {}, {}
    if tls:
        cert, key = self_signed(tmp_path)
        served, used = {"tls": (cert, key)}, {"tls": cert}
    with servers.start(Catch, **served) as server:
        batch = Batch(2, server.address, step_timeout=TIMEOUT, **used)
        try:
            a, b = (env.connection for env in batch.envs)
            assert a.fileno() == b.fileno()
            # Stream a reads with no request out: no answer comes, and it waits 3 s.
            stuck = threading.Thread(target=lambda: pytest.raises(TimeoutError, a._transport.read, 3.0), daemon=True)
            stuck.start()
            time.sleep(0.2)
            started = time.monotonic()
            b.send(pb.EnvironmentRequest(step=pb.StepRequest()).step)
            assert time.monotonic() - started < 1.0
            stuck.join(5)
            assert not stuck.is_alive()
            batch.reset([0, 1], seeds=[5, 5])
            for _ in range(20):             # each read waits for its socket with the lock let go
                results = batch.step({0: np.int8(1), 1: np.int8(1)})
                assert np.array_equal(results[0][0], results[1][0])
        finally:
            batch.close()


class Slow(gym.Env):
    """Counts its steps; each takes 0.5 s while ``Slow.slow`` is set."""
    slow = threading.Event()

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 1000, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if Slow.slow.is_set():
            time.sleep(0.5)
        self.t += 1
        return np.full(1, self.t, np.float32), 0.0, False, False, {}


class _Interrupt(BaseException):
    """Stands in for KeyboardInterrupt, without risking pytest's own handling of it."""


def test_an_interrupt_while_a_read_waits_for_the_shared_socket_leaves_every_sub_env_in_step():
    import os
    import signal

    def raise_interrupt(signum, frame):
        raise _Interrupt()

    previous = signal.signal(signal.SIGUSR1, raise_interrupt)
    try:
        with servers.start(Slow, kind="gym") as server:
            batch = Batch(2, server.address, step_timeout=TIMEOUT)
            try:
                batch.reset([0, 1], seeds=[None, None])
                Slow.slow.set()
                timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))
                timer.start()
                with pytest.raises(_Interrupt):
                    batch.step({0: 0, 1: 0})       # waiting for the socket, the lock let go
                timer.join()
                Slow.slow.clear()
                for t in (2, 3):                    # the late answers of step 1 are dropped, not taken
                    results = batch.step({0: 0, 1: 0})
                    assert [results[i][0][0] for i in (0, 1)] == [t, t]
            finally:
                Slow.slow.clear()
                batch.close()
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_sub_env_pickles_without_its_siblings_connection():
    with servers.start(Catch) as server:
        batch = Batch(2, server.address)
        try:
            copy = pickle.loads(pickle.dumps(batch.envs[0]))
            assert copy.connection.fileno() not in sockets(batch.envs)
            copy.reset(seed=3)
            copy.close()
        finally:
            batch.close()


# -- foreign servers: many streams on one connection -------------------------------------------
def test_grpclib_server_takes_every_sub_env_on_one_connection():
    with GrpclibServer() as server:
        echo_on_one_connection(server.address)


class PeerRecording(OfficialServer):
    """The official-package server, noting the peer (the TCP connection) of every stream."""

    def __init__(self, *args, **kwargs):
        self.peers: list[str] = []
        super().__init__(*args, **kwargs)

    def Process(self, request_iterator, context):  # noqa: N802 (gRPC's name)
        self.peers.append(context.peer())
        yield from super().Process(request_iterator, context)


def test_grpcio_server_takes_every_sub_env_on_one_connection():
    with PeerRecording({"act": dict(kind="action", dtype="int32", shape=[])}, episode_length=100) as server:
        env = DmRpcVectorEnv(3, server.address, seed_setting=None, step_timeout=TIMEOUT,
                             actions="act", observations="echo.act")
        try:
            env.reset()
            for t in range(6):
                actions = np.array([t, t + 10, t + 20], np.int32)
                obs, *_ = env.step(actions)
                assert (obs == actions).all()
        finally:
            env.close()
    assert len(server.peers) == 3 and len(set(server.peers)) == 1, server.peers
