"""DmRpcParallelEnv over real gRPC: against our server (the bundled Tag world) and a
multi-agent server written with the official dm-env-rpc package."""
from __future__ import annotations

import concurrent.futures as cf
import pickle
import warnings

import cloudpickle
import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

import dmrpc_gym
from dmrpc_gym import DmRpcError, DmRpcParallelEnv
from dmrpc_gym.client.agent import State
from dmrpc_gym.worlds.embedded import tag_env
from dmrpc_gym.client.parallel import join_settings
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.tag import Tag

from official_multiagent_server import OfficialMultiAgentServer

TIMEOUT = 10.0      # bounds every answer a test waits for


@pytest.fixture(scope="module")
def official():
    with OfficialMultiAgentServer() as server:
        yield server


@pytest.fixture
def own_official():
    """A server of this test's own (for tests that break or stop it)."""
    with OfficialMultiAgentServer() as server:
        yield server


def ab_env(server, **kwargs) -> DmRpcParallelEnv:
    kwargs.setdefault("agents", ["a", "b"])
    kwargs.setdefault("step_timeout", TIMEOUT)
    return dmrpc_gym.parallel_env(server.address, **kwargs)


def ab_actions(move=1, force=(0.5, -0.25)):
    return {"a": np.int32(move), "b": np.array(force, np.float32)}


def trajectory(env, seed, action_seed, **reset):
    """Play one episode with seeded random actions; everything seen, as comparable bytes."""
    rng = np.random.default_rng(action_seed)
    obs, _ = env.reset(seed=seed, **reset)
    seen = [sorted((a, o.tobytes()) for a, o in obs.items())]
    while env.agents:
        actions = {a: int(rng.integers(5)) for a in env.agents}
        obs, rew, term, trunc, _ = env.step(actions)
        seen.append(sorted((a, obs[a].tobytes(), rew[a], term[a], trunc[a]) for a in obs))
    return seen


# -- the PettingZoo API test, against both servers -------------------------------------

@pytest.mark.parametrize("settings", [{}, {"homogeneous": True, "evaders": 1, "size": 4}])
def test_parallel_api_test_bundled_world(settings):
    env = tag_env(step_timeout=TIMEOUT, **settings)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # its "agent was given ... but was dead" warnings too
        parallel_api_test(env, num_cycles=60)
    env.close()


def test_parallel_api_test_official_server(official):
    env = ab_env(official, seed_setting=None)     # a foreign server: seeds are not sent (no warning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_api_test(env, num_cycles=20)
    env.close()


# -- spaces, finishing, rewards ------------------------------------------------------------

def test_each_agent_gets_the_spaces_of_its_own_specs(official):
    env = ab_env(official)
    a_obs, a_act = env.observation_space("a"), env.action_space("a")
    assert (a_obs.shape, a_obs.dtype) == ((3,), np.float32)
    assert (a_act.n, a_act.start, a_act.dtype) == (3, 0, np.int32)
    b_obs, b_act = env.observation_space("b"), env.action_space("b")
    assert (b_obs.shape, b_obs.dtype) == ((4, 4), np.uint8)
    assert (b_act.shape, b_act.dtype) == ((2,), np.float32)
    assert b_act.low.tolist() == [-1, -1] and b_act.high.tolist() == [1, 1]
    env.reset()
    env.step(ab_actions())
    assert env.observation_space("a") is a_obs and env.action_space("b") is b_act
    assert env.possible_agents == ["a", "b"]
    env.close()


def test_agents_finish_independently(official):
    env = ab_env(official)
    obs, infos = env.reset()
    assert env.agents == ["a", "b"] and env.states["a"] == State.RUNNING and infos["a"] == {}
    for tick in (1, 2):
        obs, rew, term, trunc, _ = env.step(ab_actions(move=2, force=(0.5, 0.25)))
        assert not any(term.values()) and not any(trunc.values())
    # Each agent sees the other's actions: the world is shared.
    assert obs["a"].tolist() == [2.0, 2.0, 0.5]
    assert obs["b"][0, 0] == 2 and obs["b"][0, 1] == 105 and obs["b"][3, 3] == 2
    obs, rew, term, trunc, info = env.step(ab_actions(move=1))
    assert term == {"a": True, "b": False} and trunc == {"a": False, "b": False}
    assert env.last_discounts["a"] == 0.0 and rew["a"] == 1.0
    assert env.agents == ["b"]
    obs, rew, term, trunc, _ = env.step({"b": np.array([1.0, 1.0], np.float32)})
    assert set(obs) == {"b"} and env.agents == ["b"] and rew == {"b": 2.0}
    obs, rew, term, trunc, info = env.step({"b": np.array([0.0, 0.0], np.float32), "a": None})
    assert trunc == {"b": True} and term == {"b": False} and env.last_discounts["b"] == 1.0
    assert obs["b"][3, 3] == 5 and env.agents == []
    with pytest.raises(RuntimeError, match="reset"):
        env.step({})
    obs, _ = env.reset()
    assert env.agents == ["a", "b"] and obs["a"].tolist() == [0.0, 0.0, 0.0]
    env.close()


def test_reward_and_discount_callables_get_the_agent_name(official):
    calls = []

    def reward(obs, state, agent):
        calls.append((agent, state))
        return {"a": 10.0, "b": 20.0}[agent] + float(obs["reward"])

    env = ab_env(official, reward=reward, discount=lambda obs, state: 0.5)
    env.reset()
    _, rew, _, _, info = env.step(ab_actions(move=2, force=(0.5, 0.25)))
    assert rew == {"a": 12.0, "b": 20.75}
    assert env.last_discounts == {"a": 0.5, "b": 0.5}
    assert sorted(calls[-2:]) == [("a", State.RUNNING), ("b", State.RUNNING)]
    env.close()
    # A dict gives each agent its own: "b" keeps the server's reward observation.
    env = ab_env(official, reward={"a": lambda obs, state, agent: len(agent) * 7.0})
    env.reset()
    _, rew, _, _, _ = env.step(ab_actions(move=0, force=(1.0, 1.0)))
    assert rew == {"a": 7.0, "b": 2.0}
    env.close()


def test_actions_are_checked_before_anything_is_sent(official):
    env = ab_env(official)
    env.reset()
    with pytest.raises(ValueError, match="agent 'a'.*move"):
        env.step(ab_actions(move=3))
    with pytest.raises(ValueError, match=r"no action for agents \['b'\]"):
        env.step({"a": np.int32(0)})
    with pytest.raises(ValueError, match="unknown agents"):
        env.step({**ab_actions(), "zed": 0})
    obs, *_ = env.step(ab_actions(move=2))           # nothing was sent: tick 1 now
    assert obs["a"].tolist() == [1.0, 2.0, 0.5]
    env.close()


def test_agents_argument_forms():
    assert join_settings(3) == {f"agent_{i}": {"agent": f"agent_{i}"} for i in range(3)}
    assert join_settings(["x", "y"]) == {"x": {"agent": "x"}, "y": {"agent": "y"}}
    assert join_settings({"r": {"team": 0}, "s": None, "t": 1}) == \
        {"r": {"team": 0}, "s": {"agent": "s"}, "t": {"agent": 1}}
    for bad, err in [(0, ValueError), ([], ValueError), ("ab", TypeError), (["x", "x"], ValueError),
                     (True, TypeError), ({"x": 1.5}, TypeError)]:
        with pytest.raises(err):
            join_settings(bad)


def test_local_names_map_to_server_agents(official):
    env = ab_env(official, agents={"red": "a", "blue": {"agent": "b"}})
    assert env.possible_agents == ["red", "blue"]
    assert env.observation_space("red").shape == (3,) and env.observation_space("blue").shape == (4, 4)
    obs, _ = env.reset()
    assert set(obs) == {"red", "blue"}
    env.close()


@pytest.mark.parametrize("share", [True, False])
def test_joins_are_sent_concurrently(official, share):
    # This world answers a JoinWorld only once both agents have joined. On one shared HTTP/2
    # connection (a grpcio server), agent a's join waits for its answer while agent b's is sent.
    env = ab_env(official, world_settings={"hold_joins": True}, connect_timeout=TIMEOUT, share_connections=share)
    sockets = {conn.fileno() for conn in env.connections.values()}
    assert len(sockets) == (1 if share else 2)
    obs, _ = env.reset()
    assert set(obs) == {"a", "b"}
    env.close()


def test_a_refused_join_names_the_agent_and_cleans_up(own_official):
    with pytest.raises(DmRpcError, match="agent 'c'") as caught:
        ab_env(own_official, agents=["a", "c"])
    assert caught.value.agent == "c" and "expected one of" in caught.value.message
    assert own_official.worlds == {}            # the world it created was destroyed
    env = ab_env(own_official)                  # and agent "a" is free again
    env.close()


# -- reset: seeds, settings, world resets ------------------------------------------

def test_bundled_world_matches_the_local_world_step_for_step():
    env = tag_env(size=5, render_mode="rgb_array", step_timeout=TIMEOUT)
    local = Tag(size=5, render_mode="rgb_array")
    rng = np.random.default_rng(1)
    finish_steps = set()
    for seed in (11, 12):
        obs, _ = env.reset(seed=seed)
        expected, _ = local.reset(seed=seed)
        assert all(np.array_equal(obs[a], expected[a]) for a in expected)
        step = 0
        while local.agents:
            actions = {a: int(rng.integers(5)) for a in local.agents}
            got, want = env.step(actions), local.step(actions)
            step += 1
            for mine, theirs in zip(got, want):
                assert mine.keys() == theirs.keys()
            assert all(np.array_equal(got[0][a], want[0][a]) for a in want[0])
            assert got[1:4] == want[1:4]
            assert np.array_equal(env.render(), local.render())
            assert env.agents == local.agents
            finish_steps |= {step for a in want[2] if want[2][a] or want[3][a]}
    assert len(finish_steps) > 1, "agents should finish at different steps"
    env.close()


def test_same_seed_same_episode_and_world_settings_reset():
    env = tag_env(size=6, step_timeout=TIMEOUT)
    first = trajectory(env, seed=4, action_seed=0)
    assert trajectory(env, seed=4, action_seed=0) == first
    assert trajectory(env, seed=5, action_seed=0) != first
    # options["world_settings"] resets the world (ResetWorld) with new settings.
    obs, _ = env.reset(options={"world_settings": {"seed": 9}})
    expected, _ = Tag(size=6).reset(seed=9)
    assert all(np.array_equal(obs[a], expected[a]) for a in expected)
    env.close()


def test_world_reset_on_the_official_server(official):
    env = ab_env(official)
    env.reset()
    env.step(ab_actions())
    env.reset(options={"world_settings": {"a_steps": 1}})
    _, _, term, _, _ = env.step(ab_actions())
    assert term == {"a": True, "b": False} and env.agents == ["b"]
    env.close()


# -- independence of worlds ------------------------------------------------------------

def test_two_worlds_stepped_from_two_threads_stay_independent():
    def play(seed, action_seed):
        env = tag_env(size=6, step_timeout=TIMEOUT)
        try:
            return trajectory(env, seed, action_seed)
        finally:
            env.close()

    alone = play(3, 0)
    with cf.ThreadPoolExecutor(2) as pool:
        same = pool.submit(play, 3, 0)
        other = pool.submit(play, 3, 1)
        same, other = same.result(timeout=60), other.result(timeout=60)
    assert same == alone
    assert other[0] == alone[0] and other != alone   # same start, its own actions


def test_official_worlds_from_two_threads_see_only_their_own_actions(official):
    def play(move):
        env = ab_env(official)
        try:
            env.reset()
            seen = []
            while "a" in env.agents:
                obs, *_ = env.step(ab_actions(move=move, force=(move / 2, 0.0)))
                seen.append(obs["a"].tolist())
            return seen
        finally:
            env.close()

    with cf.ThreadPoolExecutor(2) as pool:
        zero, two = pool.submit(play, 0), pool.submit(play, 2)
        zero, two = zero.result(timeout=30), two.result(timeout=30)
    assert zero == [[t, 0.0, 0.0] for t in (1, 2, 3)]
    assert two == [[t, 2.0, 1.0] for t in (1, 2, 3)]


# -- failures: nothing hangs, the error names the agent ---------------------------------------

def test_a_closed_agent_connection_is_named_and_nothing_hangs(official):
    env = ab_env(official)
    env.reset()
    env.step(ab_actions())
    env.connections["b"].close()                # b's connection dies under it
    with pytest.raises(ConnectionError, match="agent 'b'") as caught:
        env.step(ab_actions())
    assert caught.value.agent == "b"
    with pytest.raises(RuntimeError, match="unusable since agent 'b'"):
        env.reset()
    env.close()
    env.close()


def test_answers_held_for_a_dead_agent_are_abandoned(official):
    # This world waits forever for an agent that disconnected mid-episode.
    env = ab_env(official, world_settings={"hold_on_leave": True}, step_timeout=None)
    env.abandon_timeout = 0.3
    env.reset()
    env.connections["b"].close()
    with pytest.raises(ConnectionError, match=r"agent 'b'.*\['a'\] were abandoned"):
        env.step(ab_actions())
    env.close()


def test_a_stream_dropped_by_the_server_is_named(own_official):
    env = ab_env(own_official)
    env.reset()
    env.step(ab_actions())
    own_official.drop(env.world_name, "b")
    with pytest.raises((ConnectionError, DmRpcError), match="agent 'b'") as caught:
        for _ in range(3):
            env.step(ab_actions())
    assert caught.value.agent == "b"
    env.close()


def test_agent_leaving_our_server_ends_the_episode_for_the_others():
    env = tag_env(size=6, step_timeout=TIMEOUT)
    env.reset(seed=0)
    env.connections["evader_1"].close()
    with pytest.raises(ConnectionError, match="agent 'evader_1'"):
        env.step({a: 0 for a in env.agents})
    env.close()


def test_a_stopped_server_raises_promptly_and_close_returns():
    server = Server(Tag).start()
    try:
        env = DmRpcParallelEnv(server.address, agents=Tag().possible_agents, step_timeout=TIMEOUT)
        env.reset(seed=0)
        env.step({a: 0 for a in env.agents})
    finally:
        server.stop(grace=0)
    with pytest.raises((ConnectionError, DmRpcError)) as caught:
        env.step({a: 0 for a in env.agents})
    assert caught.value.agent in env.possible_agents
    assert f"agent {caught.value.agent!r}" in str(caught.value)
    env.close()


def test_unreachable_server_names_the_address():
    server = OfficialMultiAgentServer()
    address = server.address
    server.stop()
    with pytest.raises(ConnectionError, match=address):
        DmRpcParallelEnv(address, agents=["a", "b"], connect_timeout=2.0)


# -- render, pickling, close --------------------------------------------------------------

def test_render_shows_the_render_agents_frame():
    env = tag_env(size=4, render_mode="rgb_array", render_agent="evader_0")
    env.reset(seed=2)
    local = Tag(size=4, render_mode="rgb_array")
    local.reset(seed=2)
    frame = env.render()
    assert frame.shape == (32, 32, 3) and frame.dtype == np.uint8
    assert np.array_equal(frame, local.render())
    env.close()
    plain = tag_env(size=4)
    plain.reset(seed=2)
    assert plain.render() is None
    plain.close()
    with pytest.raises(ValueError, match="render_agent"):
        tag_env(render_mode="rgb_array", render_agent="nobody")
    with pytest.raises(ValueError, match="render_mode"):
        tag_env(render_mode="human")


def test_render_needs_a_render_observation(own_official):
    """A foreign server without a render observation: asking for rgb_array is no error until render()."""
    env = ab_env(own_official, render_mode="rgb_array")
    env.reset()
    with pytest.raises(ValueError, match="render observation"):
        env.render()
    env.close()
    assert own_official.worlds == {}


def test_pickling_recreates_the_env_from_its_arguments(official):
    env = ab_env(official, reward=lambda obs, state, agent: 3.0 if agent == "a" else -3.0)
    copy = cloudpickle.loads(cloudpickle.dumps(env))
    assert copy.possible_agents == env.possible_agents and copy.world_name != env.world_name
    env.reset()
    copy.reset()
    _, rew, *_ = copy.step(ab_actions(move=0))
    assert rew == {"a": 3.0, "b": -3.0}
    obs, *_ = env.step(ab_actions(move=2))
    assert obs["a"].tolist() == [1.0, 2.0, 0.5]   # a callable reward leaves the space as it was
    copy.close()
    env.close()
    tag = tag_env(size=5)
    tag_copy = pickle.loads(pickle.dumps(tag))
    assert trajectory(tag_copy, 1, 2) == trajectory(tag, 1, 2)
    tag.close()
    tag_copy.close()


def test_close_is_idempotent_and_destroys_the_world(own_official):
    env = ab_env(own_official)
    env.reset()
    name = env.world_name
    assert name in own_official.worlds
    env.close()
    env.close()
    assert name not in own_official.worlds
    with pytest.raises(RuntimeError, match="closed"):
        env.step(ab_actions())
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_joining_an_existing_world(own_official):
    host = ab_env(own_official, agents=["a"])
    guest = ab_env(own_official, agents=["b"], world_name=host.world_name)
    with cf.ThreadPoolExecutor(1) as pool:
        # The world starts a sequence when both have asked: reset both at once.
        pending = pool.submit(guest.reset)
        obs, _ = host.reset()
        guest_obs, _ = pending.result(timeout=TIMEOUT)
        assert set(obs) == {"a"} and set(guest_obs) == {"b"}
        pending = pool.submit(guest.step, {"b": np.array([1.0, 0.0], np.float32)})
        obs, *_ = host.step({"a": np.int32(2)})
        pending.result(timeout=TIMEOUT)
    assert obs["a"].tolist() == [1.0, 2.0, 1.0]
    guest.close()
    host.close()
    assert own_official.worlds == {}


# -- the world's own agents ------------------------------------------------------------------

def test_without_agents_the_world_names_its_own():
    """No agents=: the env joins the agents the world has (Tag's pursuers and evaders), and a
    world joined by name gives the agents nobody has joined yet."""
    with Server(Tag) as server:
        env = dmrpc_gym.parallel_env(server.address, world_settings={"pursuers": 1, "evaders": 2})
        try:
            assert env.possible_agents == ["pursuer_0", "evader_0", "evader_1"]
            observations, _ = env.reset(seed=0)
            assert set(observations) == set(env.possible_agents)
        finally:
            env.close()
        host = dmrpc_gym.parallel_env(server.address, world_settings={"pursuers": 1, "evaders": 1},
                                      agents=["evader_0"])
        try:
            guest = dmrpc_gym.parallel_env(server.address, world_name=host.world_name)
            try:
                assert guest.possible_agents == ["pursuer_0"]
            finally:
                guest.close()
        finally:
            host.close()


def test_without_agents_a_world_that_does_not_say_is_a_clear_error(official):
    with pytest.raises(ValueError, match=r"does not say which agents it has.*pass agents="):
        dmrpc_gym.parallel_env(official.address)
    with Server("dmrpc_gym.worlds.catch:Catch") as catch:      # a single-agent world says no agents
        with pytest.raises(ValueError, match=r"world '.*' at .* does not say which agents"):
            dmrpc_gym.parallel_env(catch.address)
        assert catch._registry.names() == []        # the world it made is destroyed again
