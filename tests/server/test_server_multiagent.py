"""PettingZoo worlds on dmrpc_gym.server: several official Connections, one per agent, from threads."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb
from dm_env_rpc.v1 import error as dm_error
from dm_env_rpc.v1.extensions import properties as dm_properties
from pettingzoo import ParallelEnv

import servers

INVALID_ARGUMENT, DEADLINE_EXCEEDED, FAILED_PRECONDITION, INTERNAL = 3, 4, 9, 13
RUNNING, TERMINATED, INTERRUPTED = dpb.RUNNING, dpb.TERMINATED, dpb.INTERRUPTED
WAIT = 20  # seconds any test thread may take


class Relay(ParallelEnv):
    """Agents finish at known steps: 'a' terminates after 2 steps, 'b' is truncated after 3, 'c' terminates after 4.

    Observation: (step, the sum of this round's actions, a random number from the
    seeded RNG). Reward: the agent's own action. ``step`` insists on an action
    from every live agent, which proves the server collects them all.
    """

    metadata = {"name": "relay_v0", "render_modes": ["rgb_array"]}

    def __init__(self, a: int = 2, b: int = 3, c: int = 4, fail_at: int = -1, render_mode=None):
        self.ends = {"a": (a, "terminated"), "b": (b, "truncated"), "c": (c, "terminated")}
        self.possible_agents = ["a", "b", "c"]
        self.fail_at = fail_at
        self.render_mode = render_mode
        self.agents: list[str] = []
        self.t = 0
        self.rng = np.random.default_rng()

    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 100.0, (3,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(5)

    def _obs(self, total: float):
        return {a: np.array([self.t, total, self.rng.uniform(0, 1)], np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._obs(0.0), {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (sorted(actions), self.agents)
        self.t += 1
        if self.t == self.fail_at:
            raise RuntimeError("the relay dropped the baton")
        total = float(sum(int(v) for v in actions.values()))
        obs = self._obs(total)
        rewards = {a: float(actions[a]) for a in self.agents}
        terminations = {a: self.ends[a] == (self.t, "terminated") for a in self.agents}
        truncations = {a: self.ends[a] == (self.t, "truncated") for a in self.agents}
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return obs, rewards, terminations, truncations, {a: {} for a in obs}

    def render(self):
        frame = np.zeros((4, 6, 3), np.uint8)
        frame[:, : self.t] = 255
        return frame


@pytest.fixture(scope="module")
def relay_module_server():
    server = servers.start(Relay, timeout=WAIT)
    yield server
    server.stop()


@pytest.fixture(params=["workers", "inline"])
def relay_server(request, relay_module_server):
    """The module's server (a world's first steps on worker threads, its round a task of its own), and one
    whose env calls all run inline (``workers=0``): there the agent whose action completes a round runs it,
    in its own step."""
    if request.param == "workers":
        yield relay_module_server
        return
    server = servers.start(Relay, timeout=WAIT, workers=0)
    yield server
    server.stop()


def _step(conn, action=None, requested=(1, 2)):
    actions = {} if action is None else {1: servers.tensor(np.int64(action))}
    return conn.send(dpb.StepRequest(actions=actions, requested_observations=list(requested)))


def _obs(response, uid=1):
    return servers.unpack(response.observations[uid])


def _reward(response):
    return float(servers.unpack(response.observations[2]))


def _create(address, **settings) -> str:
    with servers.official(address) as conn:
        return conn.send(dpb.CreateWorldRequest(
            settings={k: servers.tensor(v) for k, v in settings.items()})).world_name


def _destroy(address, world) -> None:
    with servers.official(address) as conn:
        conn.send(dpb.DestroyWorldRequest(world_name=world))


def _play(address, world, agent, steps, log, barrier):
    """One agent's thread: join, then `steps` steps with action 1; logs (agent, state, t, reward).

    Everyone joins before anyone steps, and everyone has stepped before anyone
    leaves (a running agent's leave would end the episode for the others).
    """
    with servers.official(address) as conn:
        conn.send(dpb.JoinWorldRequest(world_name=world, settings={"agent": servers.tensor(agent)}))
        barrier.wait(WAIT)
        for _ in range(steps):
            response = _step(conn, 1)
            log.append((agent, response.state, int(_obs(response)[0]), _reward(response)))
        barrier.wait(WAIT)
        conn.send(dpb.LeaveWorldRequest())


def test_agents_step_together_and_finish_independently(relay_server):
    world = _create(relay_server.address, seed=1)
    logs = {a: [] for a in "abc"}
    barrier = threading.Barrier(3)
    # Each agent: its first step (t=0), its steps to the end of its sequence, then one
    # more, which waits for the episode to end and returns the first step of the next.
    plan = {"a": 4, "b": 5, "c": 6}
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(_play, relay_server.address, world, a, plan[a], logs[a], barrier) for a in "abc"]
        for future in futures:
            future.result(timeout=WAIT)
    assert logs["a"] == [("a", RUNNING, 0, 0.0), ("a", RUNNING, 1, 1.0), ("a", TERMINATED, 2, 1.0),
                         ("a", RUNNING, 0, 0.0)]
    assert logs["b"] == [("b", RUNNING, 0, 0.0), ("b", RUNNING, 1, 1.0), ("b", RUNNING, 2, 1.0),
                         ("b", INTERRUPTED, 3, 1.0), ("b", RUNNING, 0, 0.0)]
    assert [entry[1:3] for entry in logs["c"]] == [
        (RUNNING, 0), (RUNNING, 1), (RUNNING, 2), (RUNNING, 3), (TERMINATED, 4), (RUNNING, 0)]
    _destroy(relay_server.address, world)


def test_first_step_waits_for_every_agent_to_join(relay_server):
    world = _create(relay_server.address)
    with servers.official(relay_server.address) as a:
        a.send(dpb.JoinWorldRequest(world_name=world))       # the first free agent: 'a'
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(_step, a)
            time.sleep(0.2)
            assert not first.done()  # 'b' and 'c' have not joined
            with servers.official(relay_server.address) as b, servers.official(relay_server.address) as c:
                b.send(dpb.JoinWorldRequest(world_name=world))
                assert not first.done()
                c.send(dpb.JoinWorldRequest(world_name=world, settings={"agent": servers.tensor(2)}))
                assert first.result(timeout=WAIT).state == RUNNING
                props = dm_properties.PropertiesExtension(c)
                assert props["agent"] == "c" and props["world_name"] == world
                b.send(dpb.LeaveWorldRequest())
                c.send(dpb.LeaveWorldRequest())
        a.send(dpb.LeaveWorldRequest())
    _destroy(relay_server.address, world)


def test_join_errors(relay_server):
    world = _create(relay_server.address)
    with servers.official(relay_server.address) as a, servers.official(relay_server.address) as other:
        a.send(dpb.JoinWorldRequest(world_name=world, settings={"agent": servers.tensor("b")}))
        for settings, code, text in [
            ({"agent": servers.tensor("b")}, FAILED_PRECONDITION, "agent 'b' of world"),
            ({"agent": servers.tensor("z")}, INVALID_ARGUMENT, "has no agent 'z' (agents: 'a', 'b', 'c')"),
            ({"agent": servers.tensor(7)}, INVALID_ARGUMENT, "has no agent 7"),
            ({"team": servers.tensor(1)}, INVALID_ARGUMENT, "unknown join setting 'team'"),
        ]:
            with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
                other.send(dpb.JoinWorldRequest(world_name=world, settings=settings))
            assert excinfo.value.code == code and text in excinfo.value.message
        specs = other.send(dpb.JoinWorldRequest(world_name=world)).specs   # 'a': the first free one
        assert dm_properties.PropertiesExtension(other)["agent"] == "a"
        assert [s.name for s in specs.observations.values()] == ["observation", "reward", "discount", "RGB"]
        assert [s.name for s in specs.actions.values()] == ["action"]
        with servers.official(relay_server.address) as third, servers.official(relay_server.address) as fourth:
            third.send(dpb.JoinWorldRequest(world_name=world))
            with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
                fourth.send(dpb.JoinWorldRequest(world_name=world))
            assert excinfo.value.code == FAILED_PRECONDITION and "every agent" in excinfo.value.message
            third.send(dpb.LeaveWorldRequest())
        a.send(dpb.LeaveWorldRequest())
        other.send(dpb.LeaveWorldRequest())
    _destroy(relay_server.address, world)


def _joined_trio(address, world):
    clients = [servers.OfficialClient(address) for _ in range(3)]
    for client, agent in zip(clients, "abc"):
        client.send(dpb.JoinWorldRequest(world_name=world, settings={"agent": servers.tensor(agent)}))
    return clients


def _round(pool, clients, action=1):
    futures = [pool.submit(_step, client.connection, action) for client in clients]
    return [future.result(timeout=WAIT) for future in futures]


def test_a_silent_agent_makes_waits_fail_not_hang():
    with servers.start(Relay, timeout=0.3) as server, ThreadPoolExecutor(3) as pool:
        world = _create(server.address)
        a, b, c = clients = _joined_trio(server.address, world)
        assert [r.state for r in _round(pool, clients)] == [RUNNING] * 3
        # 'c' goes silent: the others' steps end with DEADLINE_EXCEEDED naming it.
        futures = [pool.submit(_step, client.connection, 1) for client in (a, b)]
        for future in futures:
            with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
                future.result(timeout=WAIT)
            message = excinfo.value.message
            assert excinfo.value.code == DEADLINE_EXCEEDED and "'c'" in message and "to step" in message
        # Nothing was lost: the round completes when all three step again.
        assert [int(_obs(r)[0]) for r in _round(pool, clients)] == [1, 1, 1]
        # A first step while an agent is missing times out too.
        c.send(dpb.LeaveWorldRequest())
        a.send(dpb.ResetRequest())
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            _step(a.connection)
        assert excinfo.value.code == DEADLINE_EXCEEDED and "agent 'c' to join" in excinfo.value.message
        for client in clients:
            client.close()


def test_a_disconnect_mid_wait_interrupts_the_others_and_frees_the_agent(relay_server):
    world = _create(relay_server.address)
    with ThreadPoolExecutor(3) as pool:
        a, b, c = clients = _joined_trio(relay_server.address, world)
        _round(pool, clients)
        # 'a' and 'b' wait for 'c'; 'a' disconnects while waiting.
        waiting_a = pool.submit(_step, a.connection, 1)
        waiting_b = pool.submit(_step, b.connection, 1)
        time.sleep(0.2)
        assert not waiting_a.done() and not waiting_b.done()
        a.close()
        # The episode ends for everyone still in it: 'b' (waiting) and 'c' are interrupted.
        assert waiting_b.result(timeout=WAIT).state == INTERRUPTED
        assert _step(c.connection, 1).state == INTERRUPTED
        # Agent 'a' is free again: a new client takes it and a new episode starts.
        with servers.official(relay_server.address) as new_a:
            new_a.send(dpb.JoinWorldRequest(world_name=world, settings={"agent": servers.tensor("a")}))
            futures = [pool.submit(_step, conn, None) for conn in (new_a, b.connection, c.connection)]
            assert [f.result(timeout=WAIT).state for f in futures] == [RUNNING] * 3
            futures = [pool.submit(_step, conn, 1) for conn in (new_a, b.connection, c.connection)]
            assert [int(_obs(f.result(timeout=WAIT))[0]) for f in futures] == [1, 1, 1]
            new_a.send(dpb.LeaveWorldRequest())
        for client in clients[1:]:
            client.send(dpb.LeaveWorldRequest())
            client.close()
    _destroy(relay_server.address, world)


def test_reset_and_reset_world_end_the_episode_and_seed_the_next(relay_server):
    world = _create(relay_server.address, seed=5)
    with ThreadPoolExecutor(3) as pool:
        a, b, c = clients = _joined_trio(relay_server.address, world)
        first = [_obs(r) for r in _round(pool, clients, None)]
        assert [int(o[0]) for o in first] == [0, 0, 0]
        _round(pool, clients)
        # Reset from one running agent ends the episode: the others get INTERRUPTED.
        a.send(dpb.ResetRequest(settings={"seed": servers.tensor(5)}))
        assert _step(b.connection, 1).state == INTERRUPTED
        assert _step(c.connection, 1).state == INTERRUPTED
        again = [_obs(r) for r in _round(pool, clients, None)]
        assert all(np.array_equal(x, y) for x, y in zip(first, again))  # same seed, same first observation
        # ResetWorld from a connection that is not joined: everyone is interrupted, then seed 5 again.
        _round(pool, clients)
        with servers.official(relay_server.address) as host:
            host.send(dpb.ResetWorldRequest(world_name=world, settings={"seed": servers.tensor(5)}))
            assert dm_properties.PropertiesExtension(host)["worlds"].tolist().count(world) == 1
        assert [r.state for r in _round(pool, clients)] == [INTERRUPTED] * 3
        assert all(np.array_equal(_obs(r), x) for r, x in zip(_round(pool, clients, None), first))
        # The seed property seeds the next episode too.
        props = dm_properties.PropertiesExtension(b.connection)
        assert props["seed"] == 5
        props["seed"] = 5
        for client in clients:
            client.send(dpb.ResetRequest())
        assert all(np.array_equal(_obs(r), x) for r, x in zip(_round(pool, clients, None), first))
        for client in clients:
            client.send(dpb.LeaveWorldRequest())
            client.close()
    _destroy(relay_server.address, world)


def test_an_env_error_reaches_every_waiting_agent(relay_server):
    world = _create(relay_server.address, fail_at=2)
    with ThreadPoolExecutor(3) as pool:
        clients = _joined_trio(relay_server.address, world)
        _round(pool, clients, None)
        _round(pool, clients)
        futures = [pool.submit(_step, client.connection, 1) for client in clients]
        for future in futures:
            with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
                future.result(timeout=WAIT)
            assert excinfo.value.code == INTERNAL and "dropped the baton" in excinfo.value.message
        # The next step starts a new episode for everyone.
        assert [r.state for r in _round(pool, clients, None)] == [RUNNING] * 3
        for client in clients:
            client.send(dpb.LeaveWorldRequest())
            client.close()
    _destroy(relay_server.address, world)


def test_rgb_and_world_settings(relay_server):
    world = _create(relay_server.address, a=1, b=1, c=1)
    with ThreadPoolExecutor(3) as pool:
        clients = _joined_trio(relay_server.address, world)
        futures = [pool.submit(_step, client.connection, 1, (4,)) for client in clients]
        frames = [servers.unpack(f.result(timeout=WAIT).observations[4]) for f in futures]
        assert all(frame.shape == (4, 6, 3) and frame.dtype == np.uint8 for frame in frames)
        # With every agent finishing after one step, one round ends the episode for all.
        assert [r.state for r in _round(pool, clients)] == [TERMINATED, INTERRUPTED, TERMINATED]
        assert [r.state for r in _round(pool, clients, None)] == [RUNNING] * 3
        with pytest.raises(dm_error.DmEnvRpcError) as excinfo:
            clients[0].send(dpb.CreateWorldRequest(settings={"d": servers.tensor(1)}))
        assert excinfo.value.code == INVALID_ARGUMENT and "'d'" in excinfo.value.message
        for client in clients:
            client.send(dpb.LeaveWorldRequest())
            client.close()
    _destroy(relay_server.address, world)


def test_the_bundled_tag_world_served_like_the_cli():
    pytest.importorskip("dmrpc_gym.worlds.tag")
    server = servers.serve_like_cli("dmrpc_gym.worlds.tag:Tag", "--timeout", str(WAIT))
    try:
        world = _create(server.address, seed=0, size=5, max_steps=30)
        names = ["pursuer_0", "pursuer_1", "evader_0", "evader_1"]
        results = {}

        def play(agent):
            rng = np.random.default_rng(len(agent))
            states, total = [], 0.0
            with servers.official(server.address) as conn:
                conn.send(dpb.JoinWorldRequest(world_name=world, settings={"agent": servers.tensor(agent)}))
                states.append(_step(conn).state)
                while states[-1] == RUNNING:
                    response = _step(conn, int(rng.integers(5)))
                    states.append(response.state)
                    total += _reward(response)
                conn.send(dpb.LeaveWorldRequest())
            results[agent] = (states, total)

        with ThreadPoolExecutor(4) as pool:
            for future in [pool.submit(play, agent) for agent in names]:
                future.result(timeout=WAIT)
        for agent, (states, total) in results.items():
            assert states[0] == RUNNING and states[-1] in (TERMINATED, INTERRUPTED), agent
            assert set(states[1:-1]) <= {RUNNING}
            assert len(states) - 2 < 30
        lengths = {agent: len(states) for agent, (states, _) in results.items()}
        # Nobody outlives the pursuers, who play until the last evader is caught or time runs out.
        assert max(lengths.values()) == lengths["pursuer_0"] == lengths["pursuer_1"]
        _destroy(server.address, world)
    finally:
        server.stop()


def test_stopping_the_server_ends_waiting_streams():
    server = servers.start(Relay, timeout=WAIT)
    try:
        world = _create(server.address)
        with ThreadPoolExecutor(3) as pool:
            clients = _joined_trio(server.address, world)
            _round(pool, clients)
            waiting = pool.submit(_step, clients[0].connection, 1)   # waits for 'b' and 'c'
            time.sleep(0.1)
            server.stop()
            with pytest.raises(Exception) as excinfo:
                waiting.result(timeout=WAIT)
            assert not isinstance(excinfo.value, TimeoutError)
            for client in clients:
                client.close()
    finally:
        server.stop()


def test_a_pettingzoo_env_module_is_served_through_its_parallel_env(monkeypatch):
    import sys
    import types
    package, module = types.ModuleType("fakezoo"), types.ModuleType("fakezoo.relay_v0")
    module.parallel_env = lambda **kwargs: Relay(**kwargs)
    package.relay_v0 = module
    monkeypatch.setitem(sys.modules, "fakezoo", package)
    monkeypatch.setitem(sys.modules, "fakezoo.relay_v0", module)
    server = servers.serve_like_cli("fakezoo:relay_v0")
    try:
        assert server.factory.kind == "pettingzoo"
        with servers.official(server.address) as conn:
            specs = conn.send(dpb.JoinWorldRequest(world_name="", settings={"agent": servers.tensor("c")})).specs
            assert [s.name for s in specs.actions.values()] == ["action"]
            assert dm_properties.PropertiesExtension(conn)["agent"] == "c"
    finally:
        server.stop()


# -- PettingZoo AEC envs and env modules ------------------------------------------------------

def test_an_aec_env_is_served_through_aec_to_parallel(caplog):
    """``serve module:env`` where env() is an AEC env (PettingZoo's usual form) plays, and the
    server says once how it serves it; one that is not parallelizable is served turn by turn
    (tests/client/test_aec.py), and parallel_env says so instead of waiting for turns."""
    import logging

    import dmrpc_gym
    from servers import serve_like_cli
    with caplog.at_level(logging.INFO, logger="dmrpc_gym.server"):
        with serve_like_cli("aec_worlds:env") as server:
            for _ in range(2):
                env = dmrpc_gym.parallel_env(server.address)
                try:
                    assert env.possible_agents == ["red", "blue"]
                    env.reset(seed=0)
                    for t in range(3):
                        _, rewards, terminations, _, _ = env.step({"red": 2, "blue": 1})
                    assert rewards == {"red": 2.0, "blue": 1.0} and all(terminations.values())
                finally:
                    env.close()
    assert sum("aec_to_parallel" in r.getMessage() for r in caplog.records) == 1
    with serve_like_cli("aec_worlds:tangled_env") as server:
        with pytest.raises(ValueError, match=r"is turn-based .* read it with dmrpc_gym.aec_env\(\)"):
            dmrpc_gym.parallel_env(server.address, agents=["red", "blue"])
        env = dmrpc_gym.aec_env(server.address)
        try:
            env.reset(seed=0)
            for agent in env.agent_iter():
                env.step(None if env.terminations[agent] else 2)
            assert env.agents == [] and env.agent_selection in ("red", "blue")
        finally:
            env.close()


def test_a_pettingzoo_env_module_is_served_by_its_parallel_env():
    import dmrpc_gym
    from servers import serve_like_cli
    with serve_like_cli("aec_worlds") as server:
        assert server.factory.kind == "pettingzoo"
        env = dmrpc_gym.parallel_env(server.address)
        try:
            assert env.possible_agents == ["red", "blue"]
            observations, _ = env.reset(seed=1)
            assert set(observations) == {"red", "blue"}
        finally:
            env.close()
