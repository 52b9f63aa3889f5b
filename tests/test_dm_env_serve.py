"""Serving a dm_env.Environment (issue 20 item 1): exact specs, the env's discount, step types,
and the TimeSteps read back bit for bit by the official DmEnvAdaptor over real gRPC."""
from __future__ import annotations

import dm_env
import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_adaptor
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb

from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.server.factories import Factory
from tests import dm_worlds, servers

ACTIONS = [{"move": np.int32(m), "force": np.float32(f)}
           for m, f in [(0, [0.5, -1.0]), (1, [1.0, 2.0]), (0, [-1.0, 0.0]), (2, [0.0, 0.0]),
                        (1, [0.2, 0.2]), (0, [0.0, -2.0]), (2, [1.0, 1.0]), (1, [0.0, 0.0])]]


def local_sequence(seed: int, limit: int, actions: list, episodes: int = 2) -> list[dm_env.TimeStep]:
    """The TimeSteps of the env itself for these actions (a new sequence after each LAST)."""
    env = dm_worlds.probe(limit)
    env.seed(seed)
    return _run(env, actions, episodes)


def _run(env, actions, episodes):
    out = [env.reset()]
    i = 0
    for _ in range(episodes):
        while not out[-1].last():
            out.append(env.step(actions[i % len(actions)]))
            i += 1
        if len(out) and _ < episodes - 1:
            out.append(env.reset())
    return out


def assert_same_timesteps(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.step_type == w.step_type
        if w.first():   # DmEnvAdaptor gives the discount observation of a first step (1.0) as it came
            assert g.reward is None and g.discount in (None, 1.0)
        else:
            assert g.reward == w.reward and type(g.reward) in (float, np.float64)
            assert g.discount == w.discount
        flat_g, flat_w = _flat(g.observation), _flat(w.observation)
        assert flat_g.keys() == flat_w.keys()
        for key, value in flat_w.items():
            value = np.asarray(value)
            if value.dtype.kind == "U":
                assert str(flat_g[key]) == str(value)
            else:
                assert flat_g[key].dtype == value.dtype, key
                assert flat_g[key].tobytes() == value.tobytes(), key


def _flat(nest, prefix=""):
    if isinstance(nest, dict):
        out = {}
        for key, value in nest.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1] or "observation": np.asarray(nest)}     # a bare value is served as 'observation'


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
            got = _run(env, ACTIONS, 3)
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
        with pytest.raises(Exception, match=r"unknown world setting .*speed.* for tests.dm_worlds:probe \(accepted: limit, seed\)"):
            conn.send(dpb.CreateWorldRequest(settings={"speed": dpb.Tensor(int64s={"array": [1]})}))


def test_a_factory_returning_no_known_env_kind_is_named():
    factory = Factory(dm_worlds.not_an_env)
    with pytest.raises(DmRpcError, match="returned a object, expected a gymnasium Env, a PettingZoo "
                                         "ParallelEnv or a dm_env.Environment"):
        factory.make({})


def test_a_dm_env_factory_by_module_name_is_served():
    factory = Factory("tests.dm_worlds:probe")
    env, kind = factory.make({"limit": 2})
    assert kind == "dm_env" and env.dm_env.limit == 2
    env.close()


def test_worker_processes_refuse_a_dm_env_by_name():
    from dmrpc_gym import DmRpcEnv
    with servers.start("tests.dm_worlds:probe", processes=1) as server:
        with pytest.raises(DmRpcError, match=r"tests.dm_worlds:probe makes dm_env envs, which are served "
                                             r"in the server's own process only"):
            DmRpcEnv(server.address)
