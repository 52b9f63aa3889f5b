"""The RLlib env names: creators, flat spaces, the spread rule, the multi-agent env (no training here)."""
from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
from rllib_support import require_ray

ray = require_ray()

from ray.rllib.env.env_context import EnvContext  # noqa: E402
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv  # noqa: E402
from ray.rllib.utils.pre_checks.env import check_multiagent_environments  # noqa: E402
from ray.tune.registry import ENV_CREATOR, _global_registry  # noqa: E402

import dmrpc_gym  # noqa: E402
from dmrpc_gym.integrations import rllib as dmrpc_rllib  # noqa: E402
from dmrpc_gym.integrations.rllib import DmRpcMultiAgentEnv, role  # noqa: E402
from dmrpc_gym.server import Server  # noqa: E402
from dmrpc_gym.worlds.catch import Catch  # noqa: E402
from dmrpc_gym.worlds.tag import Tag  # noqa: E402
from dmrpc_gym.integrations.flat_spaces import FlatSpaces  # noqa: E402


@pytest.fixture(scope="module")
def catch_servers():
    servers = [Server(Catch).start() for _ in range(2)]
    yield [server.address for server in servers]
    for server in servers:
        server.stop(grace=0)


def test_register_puts_every_name_in_rays_registry():
    names = dmrpc_rllib.register()
    assert names == ["dmrpc/Remote-v0", "dmrpc/Catch-v0", "dmrpc/Tag-v0", "dmrpc/Godot-v0"]
    for name in names:
        assert _global_registry.contains(ENV_CREATOR, name)
    creator = _global_registry.get(ENV_CREATOR, "dmrpc/Catch-v0")
    env = creator(EnvContext({"world_settings": {"rows": 4, "columns": 3}}, worker_index=1))
    try:
        assert env.observation_space.shape == (12,)
    finally:
        env.close()


def test_flat_spaces_is_the_sb3_wrapper_under_its_new_name():
    with pytest.warns(DeprecationWarning, match="use dmrpc_gym.integrations.flat_spaces.FlatSpaces"):
        from dmrpc_gym.integrations.flat_spaces import SB3Compat
    assert SB3Compat is FlatSpaces


def test_catch_comes_flat_and_its_discrete_start_is_shifted_back():
    """RLlib ignores ``Discrete.start``: action 0 must reach the world as paddle -1 (left)."""
    env = dmrpc_rllib.catch_env(EnvContext({}, worker_index=1))
    try:
        assert isinstance(env, FlatSpaces)
        assert env.observation_space == gym.spaces.Box(0.0, 1.0, (100,), np.float32)
        assert env.action_space == gym.spaces.Discrete(3)
        obs, _ = env.reset(seed=1)
        paddle = int(np.argmax(obs.reshape(10, 10)[9]))
        obs, reward, terminated, truncated, _ = env.step(0)
        assert int(np.argmax(obs.reshape(10, 10)[9])) == paddle - 1
        assert isinstance(reward, float) and not terminated and not truncated
    finally:
        env.close()


def test_bad_env_configs_get_clear_errors(catch_servers):
    with pytest.raises(ValueError, match=r"dmrpc/Remote-v0 needs env_config\['address'\]"):
        dmrpc_rllib.remote_env({})
    with pytest.raises(ValueError, match=r"unknown keys \['speed'\]"):
        dmrpc_rllib.remote_env({"address": catch_servers[0], "speed": 2})
    with pytest.raises(ValueError, match="both 'address' and 'addresses'"):
        dmrpc_rllib.remote_env({"address": catch_servers[0], "addresses": catch_servers})
    with pytest.raises(ValueError, match="expected a non-empty list"):
        dmrpc_rllib.remote_env({"addresses": catch_servers[0]})
    with pytest.raises(ValueError, match="expected a non-empty list"):
        dmrpc_rllib.catch_env({"addresses": []})
    with pytest.raises(ValueError, match="are not Tag's"):
        dmrpc_rllib.tag_env({"world_settings": {"colour": 1}})
    with pytest.raises(ValueError, match="use dmrpc/Remote-v0"):
        dmrpc_rllib.godot_env({"addresses": catch_servers})


def test_the_godot_name_plays_a_godot_game_in_the_flat_view():
    """``dmrpc/Godot-v0`` runs the real engine inside the runner, in the spaces RLlib takes."""
    from dmrpc_gym.integrations.godot import CATCH_PROJECT, godot_available
    from dmrpc_gym.integrations.godot.catch import CATCH_OBSERVATION_SPACE
    if not godot_available():
        if os.environ.get("DMRPC_REQUIRE_GODOT") == "1":
            pytest.fail("DMRPC_REQUIRE_GODOT=1 but no Godot engine was found", pytrace=False)
        pytest.skip("no Godot engine (apt-get install godot3-server)")
    env = dmrpc_rllib.godot_env({"project": str(CATCH_PROJECT), "scene": "res://catch.tscn",
                                 "observation_space": CATCH_OBSERVATION_SPACE,
                                 "action_space": gym.spaces.Discrete(3), "step_timeout": 60})
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space == gym.spaces.Box(0.0, 1.0, (3,), np.float32)
        assert env.action_space == gym.spaces.Discrete(3) and env.observation_space.contains(obs)
        for _ in range(20):
            obs, reward, terminated, truncated, _ = env.step(2)
            assert env.observation_space.contains(obs) and type(reward) is float
            if terminated:
                break
        assert terminated, "the ball never landed in 20 steps"
    finally:
        env.close()


def test_sub_envs_are_spread_over_the_servers_by_the_rule(catch_servers):
    """Two runners with two sub-envs each, built as RLlib's new stack builds them (one context per runner)."""
    a, b = catch_servers
    addresses = [a, a, b]
    placed = {}
    envs = []
    try:
        for worker in (1, 2):
            context = EnvContext({"addresses": addresses}, worker_index=worker, num_workers=2)
            for vector in range(2):
                env = dmrpc_rllib.remote_env(context)
                envs.append(env)
                placed[worker, vector] = env.unwrapped.connection.address
        # index = vector * 2 + (worker - 1); address = addresses[index % 3]
        expected = {(1, 0): addresses[0], (2, 0): addresses[1], (1, 1): addresses[2], (2, 1): addresses[0]}
        assert placed == expected
        assert [dmrpc_rllib.spread_index(w, v, 2) for w, v in sorted(expected)] == [0, 2, 1, 3]
    finally:
        for env in envs:
            env.close()


def test_vector_entry_point_gives_one_pipelined_vector_env_spread_by_the_rule(catch_servers):
    """RLlib's vector_entry_point mode calls the creator with ``env_ctx | {"num_envs": n}`` (a plain dict):
    the runner's context is recovered, and its sub-envs go where the rule says."""
    a, b = catch_servers
    addresses = [a, a, b]
    placed = {}
    for worker in (1, 2):
        env_ctx = EnvContext({"addresses": addresses}, worker_index=worker, num_workers=2)
        entry = lambda num_envs: dmrpc_rllib.catch_env(env_ctx | {"num_envs": num_envs})  # noqa: E731 - as RLlib
        envs = entry(2)
        try:
            assert isinstance(envs, gym.vector.VectorEnv) and envs.num_envs == 2
            assert envs.single_observation_space.shape == (100,) and envs.single_action_space == gym.spaces.Discrete(3)
            obs, _ = envs.reset(seed=0)
            obs, rewards, terminated, truncated, _ = envs.step(np.array([0, 2]))
            assert obs.shape == (2, 100) and rewards.shape == (2,)
            for vector, sub in enumerate(envs.unwrapped.envs):
                placed[worker, vector] = sub.connection.address
        finally:
            envs.close()
    assert placed == {(w, v): addresses[(v * 2 + w - 1) % 3] for w in (1, 2) for v in (0, 1)}


def test_old_stack_contexts_carry_their_vector_index(catch_servers):
    a, b = catch_servers
    contexts = [EnvContext({"addresses": [a, b]}, worker_index=3, vector_index=v, num_workers=4) for v in range(2)]
    got = [dmrpc_rllib.spread_address([a, b], context) for context in contexts]
    assert got == [[a, b][(v * 4 + 2) % 2] for v in range(2)] == [a, a]
    assert dmrpc_rllib.spread_address([a, b], {}) == a       # a plain dict: runner 1, sub-env 0


def _mixed_ending():
    """A seed and first moves after which, on Tag's last step, one evader is caught and the rest time out."""
    settings = dict(size=3, pursuers=1, evaders=2, max_steps=1)
    for seed in range(200):
        for move in range(5):
            world = Tag(**settings)
            world.reset(seed=seed)
            _, _, terminations, _, _ = world.step({"pursuer_0": move, "evader_0": 0, "evader_1": 0})
            if sum(terminations.values()) == 1:
                return settings, seed, move
    raise AssertionError("no Tag start with a mixed ending in 200 seeds")


def test_an_episode_where_agents_end_differently_is_over_for_rllib():
    settings, seed, move = _mixed_ending()
    actions = {"pursuer_0": move, "evader_0": 0, "evader_1": 0}
    env = dmrpc_rllib.tag_env({"world_settings": settings})
    try:
        assert isinstance(env, DmRpcMultiAgentEnv)
        env.reset(seed=seed)
        _, rewards, terminateds, truncateds, _ = env.step(actions)
        assert sum(terminateds[a] for a in env.possible_agents) == 1
        assert sum(truncateds[a] for a in env.possible_agents) == 2
        assert truncateds["__all__"] and not terminateds["__all__"]
        assert set(rewards) == set(env.possible_agents) == set(env.agents)
        with pytest.raises(RuntimeError, match="episode is over"):
            env.step(actions)
        env.reset(seed=seed)                       # the next episode starts as RLlib's autoreset asks
    finally:
        env.close()
    # Why ours: RLlib's own wrapper sees neither "all terminated" nor "all truncated" here.
    wrapped = ParallelPettingZooEnv(dmrpc_gym.parallel_env(world_settings=settings))
    try:
        wrapped.reset(seed=seed)
        _, _, terminateds, truncateds, _ = wrapped.step(actions)
        assert not terminateds["__all__"] and not truncateds["__all__"]
    finally:
        wrapped.close()


def test_tag_passes_rllibs_multi_agent_env_check_and_maps_roles():
    env = dmrpc_rllib.tag_env({"world_settings": {"size": 5}})
    try:
        check_multiagent_environments(env)
        assert env.possible_agents == ["pursuer_0", "pursuer_1", "evader_0", "evader_1"]
        assert env.get_observation_space("pursuer_0").shape == (12,)
        assert env.get_observation_space("evader_1").shape == (7,)
        assert {role(agent) for agent in env.possible_agents} == {"pursuer", "evader"}
        with pytest.raises(ValueError, match=r"unknown agents \['ghost'\]"):
            env.step({"ghost": 0})
    finally:
        env.close()


def test_multi_agent_env_gives_each_agent_the_flat_view():
    """A world with Dict observations and a ``Discrete(start=-1)`` action, served multi-agent."""
    class Pair:
        """Two agents, each a Catch board under a nested name, acting with Catch's paddle."""

        metadata = {"name": "pair_v0"}
        possible_agents = ["left", "right"]

        def __init__(self):
            self.agents = []
            self.games = {agent: Catch(rows=3, columns=3) for agent in self.possible_agents}

        def observation_space(self, agent):
            return gym.spaces.Dict({"view": self.games[agent].observation_space})

        def action_space(self, agent):
            return self.games[agent].action_space

        def reset(self, seed=None, options=None):
            self.agents = list(self.possible_agents)
            return ({a: {"view": self.games[a].reset(seed=seed)[0]} for a in self.agents},
                    {a: {} for a in self.agents})

        def step(self, actions):
            out = {a: self.games[a].step(int(actions[a])) for a in self.agents}
            self.agents = [a for a in self.agents if not out[a][2]]
            return ({a: {"view": o[0]} for a, o in out.items()}, {a: o[1] for a, o in out.items()},
                    {a: o[2] for a, o in out.items()}, {a: o[3] for a, o in out.items()},
                    {a: {} for a in out})

    with Server(Pair, kind="pettingzoo") as server:
        env = DmRpcMultiAgentEnv(dmrpc_gym.parallel_env(server.address, world_settings={},
                                                        agents=["left", "right"]))
        try:
            assert env.get_observation_space("left") == gym.spaces.Box(0.0, 1.0, (9,), np.float32)
            assert env.get_action_space("right") == gym.spaces.Discrete(3)
            observations, _ = env.reset(seed=0)
            paddle = int(np.argmax(observations["left"].reshape(3, 3)[2]))
            observations, _, _, _, _ = env.step({"left": 0, "right": 2})
            assert int(np.argmax(observations["left"].reshape(3, 3)[2])) == max(paddle - 1, 0)
        finally:
            env.close()


def test_tag_sub_envs_are_spread_over_tag_servers():
    with Server(Tag) as a, Server(Tag) as b:
        context = EnvContext({"addresses": [a.address, b.address], "world_settings": {"size": 4}},
                             worker_index=1, num_workers=1)
        envs = [dmrpc_rllib.tag_env(context) for _ in range(2)]
        try:
            placed = [{c.address for c in env.par_env.connections.values()} for env in envs]
            assert placed == [{a.address}, {b.address}]
            observations, _ = envs[1].reset(seed=0)
            assert sorted(observations) == ["evader_0", "evader_1", "pursuer_0", "pursuer_1"]
        finally:
            for env in envs:
                env.close()


def test_seeds_reach_the_served_worlds_by_default():
    """RLlib seeds its envs with reset(seed=...): the same seed gives the same episode, from the
    served world's own randomness (CartPole's start; Tag's positions), without seed_setting."""
    def cartpole_start(address, seed):
        env = dmrpc_rllib.remote_env(EnvContext({"address": address}, worker_index=1))
        try:
            return env.reset(seed=seed)[0]
        finally:
            env.close()

    def tag_start(seed):
        env = dmrpc_rllib.tag_env(EnvContext({"world_settings": {"size": 6}}, worker_index=1))
        try:
            observations, _ = env.reset(seed=seed)
            return b"".join(np.asarray(observations[a]).tobytes() for a in sorted(observations))
        finally:
            env.close()

    server = Server("CartPole-v1").start()
    try:
        local, _ = gym.make("CartPole-v1").reset(seed=9)
        np.testing.assert_array_equal(cartpole_start(server.address, 9), local)
        assert cartpole_start(server.address, 9).tobytes() == cartpole_start(server.address, 9).tobytes()
    finally:
        server.stop(grace=0)
    assert tag_start(2) == tag_start(2) != tag_start(3)
