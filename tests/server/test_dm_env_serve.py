"""Serving a dm_env.Environment (issue 20 item 1): exact specs, the env's discount, step types,
and the TimeSteps read back bit for bit by the official DmEnvAdaptor over real gRPC."""
from __future__ import annotations

import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_adaptor
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb

from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.server.envs.factories import Factory
import dm_worlds
import servers
from dm_env_timesteps import ACTIONS, assert_same_timesteps, local_sequence, run_timesteps

def test_specs_are_the_dm_env_specs_exactly():
    with servers.start(dm_worlds.probe) as server, servers.official(server.address) as conn:
        conn.send(dpb.CreateWorldRequest())
        specs = conn.send(dpb.JoinWorldRequest(world_name="world-1")).specs
    obs = {s.name: s for s in specs.observations.values()}
    act = {s.name: s for s in specs.actions.values()}
    assert sorted(obs) == ["discount", "inner.count", "inner.flags", "pos", "reward", "text"]
    pos = obs["pos"]
    assert pos.dtype == dpb.DOUBLE and list(pos.shape) == [3]
    assert list(pos.min.doubles.array) == [-1.0, 0.0, -5.0] and list(pos.max.doubles.array) == [1.0, 2.0, 5.0]
    assert obs["inner.count"].dtype == dpb.INT32 and obs["inner.flags"].dtype == dpb.UINT8
    assert obs["text"].dtype == dpb.STRING
    assert obs["reward"].dtype == dpb.DOUBLE and not obs["reward"].HasField("min")
    assert list(obs["discount"].min.doubles.array) == [0.0] and list(obs["discount"].max.doubles.array) == [1.0]
    move, force = act["move"], act["force"]
    assert move.dtype == dpb.INT32 and list(move.min.int32s.array) == [0] and list(move.max.int32s.array) == [2]
    assert force.dtype == dpb.FLOAT and list(force.min.floats.array) == [-1.0, -2.0]
    assert list(force.max.floats.array) == [1.0, 2.0]


def test_dm_env_adaptor_reads_the_env_timesteps_bit_for_bit():
    want = local_sequence(3, 6, ACTIONS, episodes=3)
    assert {w.discount for w in want if w.last()} == {0.0, dm_worlds.TRUNCATION_DISCOUNT}  # both ends
    with servers.start(dm_worlds.probe) as server, servers.official(server.address) as conn:
        env, _ = dm_env_adaptor.create_and_join_world(conn, {"seed": 3, "limit": 6}, {})
        try:
            got = run_timesteps(env, ACTIONS, 3)
        finally:
            env.close()
    assert_same_timesteps(got, want)


def test_truncation_is_interrupted_with_the_env_discount_and_termination_is_terminated():
    with servers.start(dm_worlds.probe) as server, servers.official(server.address) as conn:
        conn.send(dpb.CreateWorldRequest(settings={}))
        specs = conn.send(dpb.JoinWorldRequest(world_name="world-1")).specs
        uid = {s.name: u for u, s in specs.actions.items()}
        discount_uid = next(u for u, s in specs.observations.items() if s.name == "discount")

        def step(move):
            request = dpb.StepRequest(requested_observations=[discount_uid])
            request.actions[uid["move"]].int32s.array.append(move)
            request.actions[uid["force"]].floats.array.extend([0.0, 0.0])
            request.actions[uid["force"]].shape.append(2)
            response = conn.send(request)
            return response.state, response.observations[discount_uid].doubles.array[0]

        states = [step(0) for _ in range(7)]       # start + 6 steps: the limit
        assert states[-1] == (dpb.INTERRUPTED, dm_worlds.TRUNCATION_DISCOUNT)
        assert all(s == (dpb.RUNNING, 0.99) for s in states[1:-1])
        assert step(0)[0] == dpb.RUNNING and step(2) == (dpb.TERMINATED, 0.0)


def test_an_action_outside_its_bounded_array_is_refused_by_name():
    with servers.start(dm_worlds.probe) as server, servers.official(server.address) as conn:
        env, _ = dm_env_adaptor.create_and_join_world(conn, {}, {})
        try:
            env.reset()
            with pytest.raises(Exception, match="force") as caught:
                env.step({"move": np.int32(0), "force": np.float32([0.0, 3.0])})
            assert "INVALID_ARGUMENT" in str(caught.value) or "3" in str(caught.value)
        finally:
            env.close()


def test_unknown_settings_are_refused_with_the_accepted_list():
    with servers.start(dm_worlds.probe) as server, servers.official(server.address) as conn:
        with pytest.raises(Exception, match=r"unknown world setting .*speed.* for dm_worlds:probe \(accepted: limit, seed\)"):
            conn.send(dpb.CreateWorldRequest(settings={"speed": dpb.Tensor(int64s={"array": [1]})}))


def test_a_factory_returning_no_known_env_kind_is_named():
    factory = Factory(dm_worlds.not_an_env)
    with pytest.raises(DmRpcError, match="returned a object, expected a gymnasium Env, a PettingZoo "
                                         "ParallelEnv or a dm_env.Environment"):
        factory.make({})


def test_a_dm_env_factory_by_module_name_is_served():
    factory = Factory("tests.support.dm_worlds:probe")
    env, kind = factory.make({"limit": 2})
    assert kind == "dm_env" and env.dm_env.limit == 2
    env.close()


def test_worker_processes_refuse_a_dm_env_by_name():
    from dmrpc_gym import DmRpcEnv
    with servers.start("tests.support.dm_worlds:probe", processes=1) as server:
        with pytest.raises(DmRpcError, match=r"tests.support.dm_worlds:probe makes dm_env envs, which are served "
                                             r"in the server's own process only"):
            DmRpcEnv(server.address)
