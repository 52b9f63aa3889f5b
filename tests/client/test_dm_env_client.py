"""connect_dm_env (issue 20 item 2): a dm_env.Environment for any dm_env_rpc world over real gRPC;
the TimeSteps of a served dm_env come back bit for bit, and dm_env's own conformance mixin passes."""
from __future__ import annotations

import dm_env
import numpy as np
import pytest
from absl.testing import absltest
from dm_env import specs

import dmrpc_gym
from dmrpc_gym.worlds.catch import Catch
import dm_worlds
import servers
from dm_env_timesteps import ACTIONS, ServedConformance, assert_same_timesteps, local_sequence, run_timesteps


def test_timesteps_of_a_served_dm_env_come_back_bit_for_bit():
    want = local_sequence(5, 6, ACTIONS, episodes=3)
    with servers.start(dm_worlds.probe) as server:
        env = dmrpc_gym.connect_dm_env(server.address, {"seed": 5, "limit": 6})
        try:
            got = run_timesteps(env, ACTIONS, 3)
        finally:
            env.close()
    assert_same_timesteps(got, want)
    assert [type(w.observation["text"]) for w in want] == [str] * len(want)
    assert all(isinstance(g.observation["text"], str) for g in got)


def test_specs_are_nested_again_with_dtypes_and_bounds():
    local = dm_worlds.probe()
    with servers.start(dm_worlds.probe) as server:
        env = dmrpc_gym.connect_dm_env(server.address)
        try:
            obs, act = env.observation_spec(), env.action_spec()
            reward, discount = env.reward_spec(), env.discount_spec()
        finally:
            env.close()
    want = local.observation_spec()
    assert obs.keys() == want.keys() and obs["inner"].keys() == want["inner"].keys()
    for got_spec, want_spec in [(obs["pos"], want["pos"]), (obs["inner"]["count"], want["inner"]["count"]),
                                (obs["inner"]["flags"], want["inner"]["flags"]),
                                (act["force"], local.action_spec()["force"])]:
        assert type(got_spec) is type(want_spec) and got_spec.dtype == want_spec.dtype
        assert got_spec.shape == want_spec.shape
        if isinstance(want_spec, specs.BoundedArray):
            assert np.array_equal(np.broadcast_to(got_spec.minimum, got_spec.shape),
                                  np.broadcast_to(want_spec.minimum, want_spec.shape))
            assert np.array_equal(np.broadcast_to(got_spec.maximum, got_spec.shape),
                                  np.broadcast_to(want_spec.maximum, want_spec.shape))
    assert isinstance(obs["text"], specs.StringArray)
    assert isinstance(act["move"], specs.DiscreteArray) and act["move"].num_values == 3
    assert act["move"].dtype == np.int32
    assert reward.dtype == np.float64 and discount.minimum == 0.0 and discount.maximum == 1.0


def test_a_step_before_any_reset_and_after_last_starts_a_sequence():
    with servers.start(dm_worlds.probe) as server:
        env = dmrpc_gym.connect_dm_env(server.address, {"limit": 1})
        try:
            action = {"move": np.int32(0), "force": np.zeros(2, np.float32)}
            kinds = [env.step(action).step_type for _ in range(4)]
        finally:
            env.close()
    assert kinds == [dm_env.StepType.FIRST, dm_env.StepType.LAST] * 2


def test_a_lone_named_observation_stays_a_key_and_a_bare_one_bare():
    with servers.start(Catch) as server:
        env = dmrpc_gym.connect_dm_env(server.address)
        try:
            assert list(env.observation_spec()) == ["board"] and list(env.action_spec()) == ["paddle"]
            assert env.reset().observation["board"].shape == (10, 10)
            assert env.step({"paddle": np.int8(1)}).step_type == dm_env.StepType.MID
        finally:
            env.close()


def test_options_it_sets_itself_are_refused_by_name():
    with pytest.raises(TypeError, match="sets nested= itself"):
        dmrpc_gym.connect_dm_env("127.0.0.1:1", nested=False)


class ProbeConformance(ServedConformance, absltest.TestCase):
    factory = staticmethod(dm_worlds.probe)
    settings = {"limit": 3}

    def make_action_sequence(self):
        return iter(ACTIONS * 3)


class CatchConformance(ServedConformance, absltest.TestCase):
    factory = Catch
    settings = {"rows": 4}
