"""A list of addresses and the drain (issue 34, item 4): clients fail over along their list, and a
draining server ends the stream of any request that would start a new episode, so that its drain is
over once the running episodes are. Real servers on port 0, real clients; waits are bounded far
below the grace they test, never asserted as durations."""
from __future__ import annotations

import threading
import warnings

import gymnasium as gym
import numpy as np
import pytest
from processes import free_port

import dmrpc_gym
from dmrpc_gym import DmRpcEnv
from dmrpc_gym.client.connection import Connection, settings_tensors
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.catch import Catch
from dmrpc_gym.worlds.tag import Tag

STILL = np.int8(0)
GRACE = 600          # a drain that waited for it would outlive every bounded wait below


class Draining:
    """``server.drain(GRACE)`` in a thread, begun on entering; ``ended()`` waits (bounded) for its outcome."""

    def __init__(self, server: Server):
        self.server, self.outcome, self._begun = server, [], threading.Event()
        self._thread = threading.Thread(target=lambda: self.outcome.append(server.drain(GRACE, self._begun.set)))

    def __enter__(self) -> "Draining":
        self._thread.start()
        assert self._begun.wait(30)
        return self

    def ended(self, timeout: float = 60) -> list:
        self._thread.join(timeout)
        return self.outcome

    def __exit__(self, *exc) -> None:
        self.server.stop()                  # ends a drain still waiting
        self._thread.join(30)


def play_out(env) -> int:
    steps, over = 0, False
    while not over:
        _, _, terminated, truncated, _ = env.step(STILL)
        steps, over = steps + 1, terminated or truncated
    return steps


@pytest.fixture
def two():
    servers = [Server(Catch).start(), Server(Catch).start()]
    yield servers
    for server in servers:
        server.stop()


def test_a_draining_server_lets_the_episode_finish_and_the_next_reset_moves_on(two):
    first, second = two
    env = DmRpcEnv([first.address, second.address], reconnect=True, connect_timeout=30)
    try:
        assert env.connection.address == first.address
        env.reset(seed=0)
        env.step(STILL)
        with Draining(first) as drain:
            assert play_out(env) > 0                       # the running episode ends on the first server
            assert drain.ended() == [True]                 # and so does the drain, the env still joined
            assert env.connection.address == first.address and env.reconnects == 0
            with pytest.warns(RuntimeWarning) as said:
                obs, _ = env.reset(seed=1)
            moved = [str(w.message) for w in said if "reconnected" in str(w.message)]
            assert len(moved) == 1
            assert f"server at {second.address} (moved from {first.address}" in moved[0]
            assert "UNAVAILABLE" in moved[0]
            assert obs.shape == (10, 10) and env.connection.address == second.address and env.reconnects == 1
        assert play_out(env) > 0                           # the next episode, on the second server
    finally:
        env.close()


def test_a_draining_server_ends_the_stream_of_whatever_would_start_an_episode(two):
    server = two[0]
    env, holder = DmRpcEnv(server.address), DmRpcEnv(server.address)
    try:
        env.reset(seed=0)
        play_out(env)
        holder.reset(seed=0)                              # an episode that runs holds the drain open
        with Draining(server) as drain:
            with pytest.raises(ConnectionError, match=r"UNAVAILABLE: this server is draining \(Server.drain\(\), "
                                                      r"or SIGTERM to dmrpc-gym serve\): it starts no new episodes"):
                env.agent.step(None)                      # the step that would call env.reset
            assert play_out(holder) > 0
            assert drain.ended() == [True]
    finally:
        env.close()
        holder.close()


@pytest.mark.parametrize("field", ["reset", "reset_world"])
def test_reset_and_reset_world_end_their_stream_while_draining(two, field):
    server = two[0]
    conn = Connection(server.address)
    try:
        name = conn.send(pb.CreateWorldRequest()).world_name
        conn.send(pb.JoinWorldRequest(world_name=name))
        conn.send(pb.StepRequest())                       # a sequence runs
        request = pb.ResetRequest() if field == "reset" else pb.ResetWorldRequest(world_name=name)
        with Draining(server) as drain:
            with pytest.raises(ConnectionError, match=f"during {field}: UNAVAILABLE: this server is draining"):
                conn.send(request)
            assert conn.failure is not None               # the stream is over, and so the agent left
            assert drain.ended() == [True]
    finally:
        conn.close()


def test_an_agent_waiting_to_start_an_episode_is_told_of_the_drain():
    """A multi-agent world: an agent whose step waits for the others to join (to start an episode) plays
    in no episode: the drain does not wait for it, and its stream ends (woken by the drain, or ended
    with the server) rather than waiting out the server's timeout (300 s)."""
    server = Server(Tag, timeout=300).start()
    conn = Connection(server.address)
    try:
        name = conn.send(pb.CreateWorldRequest(settings=settings_tensors({"pursuers": 1, "evaders": 1}))).world_name
        conn.send(pb.JoinWorldRequest(world_name=name))
        conn.submit(pb.StepRequest())                     # waits for the other agent to join
        threading.Event().wait(0.3)                       # (most likely waiting by now; either way refused)
        with Draining(server) as drain:
            with pytest.raises(ConnectionError, match="during step: UNAVAILABLE: "):   # draining, or shutting down
                conn.receive()
            assert drain.ended() == [True]
    finally:
        conn.close()
        server.stop()


def test_a_vector_env_with_the_list_moves_every_sub_env(two):
    first, second = two
    envs = dmrpc_gym.DmRpcVectorEnv(2, [first.address, second.address], reconnect=True, connect_timeout=30)
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int8))
        assert [env.connection.address for env in envs.envs] == [first.address] * 2
        with Draining(first) as drain:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                obs, _ = envs.reset(seed=1)           # mid-episode: its ResetRequests are refused
            assert sum(f"moved from {first.address}" in str(w.message) for w in said) == 2
            assert obs.shape == (2, 10, 10)
            assert [env.connection.address for env in envs.envs] == [second.address] * 2
            assert drain.ended() == [True]
        for _ in range(12):                           # through an autoreset, on the second server
            envs.step(np.zeros(2, np.int8))
    finally:
        envs.close()


def test_spread_sub_envs_may_each_have_a_list_to_fail_over_along(two):
    """``addresses=`` spreads sub-envs over its entries; an entry may itself be a list (RLlib's
    env_config['address'] in vector mode is given as such an entry)."""
    first, second = two
    envs = dmrpc_gym.DmRpcVectorEnv(addresses=[[first.address, second.address], [second.address, first.address]])
    try:
        assert [env.connection.address for env in envs.envs] == [first.address, second.address]
    finally:
        envs.close()


def test_an_sb3_vec_env_with_the_list_restarts_its_episodes_on_the_next_server(two):
    """SB3 restarts a finished sub-env within its step: that restart is refused by the draining server,
    and the sub-env's next episode runs on the next address, with no episode cut short."""
    pytest.importorskip("stable_baselines3")
    from dmrpc_gym.integrations.sb3.vec_env import DmRpcSB3VecEnv
    first, second = two
    venv = DmRpcSB3VecEnv(2, [first.address, second.address], reconnect=True, connect_timeout=30)
    try:
        venv.reset()
        with Draining(first) as drain, warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            infos = []
            for _ in range(30):                          # three Catch episodes of 9 steps
                infos += venv.step(np.zeros(2, np.int64))[3]
            assert [env.connection.address for env in venv.envs] == [second.address] * 2
            assert not any("connection_lost" in info for info in infos)
            assert drain.ended() == [True]
    finally:
        venv.close()


def test_a_parallel_env_moves_all_its_agents_to_one_server():
    first, second = Server(Tag).start(), Server(Tag).start()
    env = dmrpc_gym.parallel_env([first.address, second.address], world_settings={"evaders": 1}, reconnect=True)
    try:
        env.reset(seed=0)
        env.step({agent: 0 for agent in env.agents})
        with Draining(first) as drain:
            with pytest.warns(RuntimeWarning, match=f"server at {second.address} \\(moved from {first.address}"):
                observations, _ = env.reset(seed=1)
            assert sorted(observations) == sorted(env.possible_agents)
            assert {c.address for c in env.connections.values()} == {second.address}
            assert drain.ended() == [True]
        env.step({agent: 0 for agent in env.agents})
    finally:
        env.close()
        first.stop()
        second.stop()


def test_without_reconnect_a_list_means_the_first_that_serves_at_connect_time(two):
    first, second = two
    dead = f"127.0.0.1:{free_port()}"
    env = DmRpcEnv([dead, first.address], connect_timeout=30)          # refused: the next one
    try:
        assert env.connection.address == first.address
        env.reset(seed=0)
        with Draining(first) as drain:
            late = DmRpcEnv([first.address, second.address], connect_timeout=30)   # CreateWorld refused
            assert late.connection.address == second.address
            late.close()
            play_out(env)
            with pytest.raises(ConnectionError, match="UNAVAILABLE"):    # no reconnect: no move
                env.reset(seed=1)
            assert env.connection.address == first.address
            assert drain.ended() == [True]
    finally:
        env.close()


def test_gymnasium_make_passes_the_list_through(two):
    env = gym.make("dmrpc/Remote-v0", address=[two[0].address, two[1].address], reconnect=True)
    try:
        assert env.unwrapped.connection.address == two[0].address
        assert env.reset(seed=0)[0].shape == (10, 10)
    finally:
        env.close()


def test_bad_lists_are_refused_by_name():
    with pytest.raises(ValueError, match="address= is an empty list"):
        DmRpcEnv([])
    with pytest.raises(ValueError, match=r"address\[1\] of \['127.0.0.1:1', 'http://h:2'\]: .*host:port"):
        DmRpcEnv(["127.0.0.1:1", "http://h:2"])
    with pytest.raises(TypeError, match=r"address\[0\] of \[5\]"):
        Connection([5])
    with pytest.raises(ValueError, match="lists an address twice"):
        DmRpcEnv(["127.0.0.1:1", "127.0.0.1:1"])
    with pytest.raises(TypeError, match="a list of them"):
        DmRpcEnv(b"127.0.0.1:1")
    with pytest.raises(ValueError, match="address= is an empty list"):
        dmrpc_gym.DmRpcVectorEnv(2, [])


def test_nothing_serving_on_the_list_gives_up_naming_every_address():
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    with pytest.raises(ConnectionError) as err:
        Connection(dead, connect_timeout=None)                 # one attempt at each
    message = str(err.value)
    assert f"servers at {dead[0]}, {dead[1]} (tried in turn) after 2 attempts" in message
    assert f"{dead[0]}: " in message and f"{dead[1]}: " in message
    with pytest.raises(ConnectionError, match=r"attempts in 1.0 s \(connect_timeout\); the last error at each"):
        Connection(dead, connect_timeout=1.0)
