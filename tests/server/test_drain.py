"""The graceful drain (issue 34, item 4): ``Server.drain(grace)`` and SIGTERM in ``dmrpc-gym serve``.

New worlds are refused (UNAVAILABLE, saying the server drains) while running episodes go on; the drain
ends when no episode runs, or when the grace is over (what is left ends UNAVAILABLE "server shutting
down"); ``serve`` then exits 0. A second SIGTERM, or SIGINT, stops at once. Waits are bounded far below
the grace they test, never asserted as durations."""
from __future__ import annotations

import queue
import signal
import threading

import numpy as np
import pytest
from processes import ServedProcess, free_port

from dmrpc_gym import DmRpcEnv
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.catch import Catch


class Lines:
    """What a ``serve`` process prints after its serving line, read in a thread; ``expect`` waits (bounded)."""

    def __init__(self, process):
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(process.stdout,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    def expect(self, start: str, timeout: float = 30.0) -> str:
        seen = []
        while True:
            line = self._lines.get(timeout=timeout)
            assert line is not None, f"serve ended before printing {start!r}: {''.join(seen)}"
            seen.append(line)
            if line.startswith(start):
                return line


def refused_world(address: str) -> DmRpcError:
    with Connection(address, connect_timeout=None) as conn:
        with pytest.raises(DmRpcError) as err:
            conn.send(pb.CreateWorldRequest())
    return err.value


def play_out(env: DmRpcEnv) -> int:
    """Step the running episode to its end; how many steps it took."""
    steps, over = 0, False
    while not over:
        _, _, terminated, truncated, _ = env.step(np.int8(0))
        steps, over = steps + 1, terminated or truncated
    return steps


def test_drain_refuses_new_worlds_and_lets_episodes_finish():
    server = Server(Catch).start()
    made = Connection(server.address)
    try:
        kept = made.send(pb.CreateWorldRequest()).world_name          # a world made before the drain
        env = DmRpcEnv(server.address)
        env.reset(seed=0)
        drained, begun = [], threading.Event()
        drainer = threading.Thread(target=lambda: drained.append(server.drain(grace=60, begun=begun.set)))
        drainer.start()
        assert begun.wait(30)
        refused = refused_world(server.address)
        assert refused.code_name == "UNAVAILABLE" and "draining" in refused.message
        with Connection(server.address, connect_timeout=None) as conn:   # nor the default world
            with pytest.raises(DmRpcError, match="UNAVAILABLE.*draining"):
                conn.send(pb.JoinWorldRequest(world_name=""))
        with Connection(server.address, connect_timeout=None) as conn:   # a world held may be joined
            assert conn.send(pb.JoinWorldRequest(world_name=kept)).specs.observations
            conn.send(pb.LeaveWorldRequest())
        assert server.draining and drainer.is_alive()
        assert play_out(env) > 0                                          # the episode runs to its end
        env.close()
        drainer.join(30)
        assert drained == [True] and server.wait(0)
    finally:
        made.close()
        server.stop()


def test_what_outlives_the_grace_ends_unavailable():
    server = Server(Catch).start()
    env = DmRpcEnv(server.address)
    try:
        env.reset(seed=0)
        assert server.drain(grace=0.5) is False                          # the agent stayed joined
        with pytest.raises(ConnectionError, match="server shutting down"):
            env.step(np.int8(0))
    finally:
        env.close()
        server.stop()


def test_drain_argument_is_checked():
    with Server(Catch) as server:
        with pytest.raises(ValueError, match="grace"):
            server.drain(grace=-1)
        assert not server.draining


def test_sigterm_drains_serve_and_it_exits_0():
    served = ServedProcess(0, args=("--grace", "600"))
    process = served.processes[-1]
    try:
        lines = Lines(process)
        env = DmRpcEnv(served.address)
        env.reset(seed=0)
        process.send_signal(signal.SIGTERM)
        assert "600 s" in lines.expect("draining:")
        refused = refused_world(served.address)
        assert refused.code_name == "UNAVAILABLE" and "draining" in refused.message
        assert play_out(env) > 0
        env.close()                                    # the last episode is over: the drain ends
        assert process.wait(timeout=60) == 0
    finally:
        served.close()


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_second_signal_stops_serve_at_once(second):
    served = ServedProcess(0, args=("--grace", "600"))
    process = served.processes[-1]
    env = DmRpcEnv(served.address)
    try:
        lines = Lines(process)
        env.reset(seed=0)
        process.send_signal(signal.SIGTERM)
        lines.expect("draining:")
        process.send_signal(second)
        assert process.wait(timeout=60) == 0           # far within the 600 s grace
        with pytest.raises(ConnectionError):
            env.step(np.int8(0))
    finally:
        env.close()
        served.close()


def test_sigint_alone_stops_serve_at_once():
    served = ServedProcess(0, args=("--grace", "600"))
    process = served.processes[-1]
    env = DmRpcEnv(served.address)
    try:
        env.reset(seed=0)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        with pytest.raises(ConnectionError, match="server shutting down"):
            env.step(np.int8(0))
    finally:
        env.close()
        served.close()


def test_a_reconnecting_client_rejoins_the_server_that_replaces_a_drained_one():
    """One address (a load balancer's, or a restarted server's): the drained server's episode ends
    with the grace, and the next reset() of a ``reconnect=True`` env reaches its successor."""
    served = ServedProcess(free_port(), args=("--grace", "0.5"))
    process = served.processes[-1]
    env = DmRpcEnv(served.address, reconnect=True, connect_timeout=60)
    try:
        env.reset(seed=0)
        play_out(env)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0           # joined between episodes: not waited for
        served.start()                                 # its successor, on the same address
        with pytest.warns(RuntimeWarning, match="reconnected"):
            env.reset(seed=1)
        assert env.reconnects == 1 and play_out(env) > 0
    finally:
        env.close()
        served.close()
