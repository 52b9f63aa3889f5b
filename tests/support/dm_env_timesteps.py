"""dm_env TimeSteps compared bit for bit, and dm_env's conformance mixin against a served world (shared
by the dm_env tests of the client, the server and the suites)."""
from __future__ import annotations

import dm_env
import numpy as np
from dm_env import test_utils

import dm_worlds
import dmrpc_gym
import servers

__all__ = ["ACTIONS", "local_sequence", "run_timesteps", "assert_same_timesteps", "ServedConformance"]

ACTIONS = [{"move": np.int32(m), "force": np.float32(f)}
           for m, f in [(0, [0.5, -1.0]), (1, [1.0, 2.0]), (0, [-1.0, 0.0]), (2, [0.0, 0.0]),
                        (1, [0.2, 0.2]), (0, [0.0, -2.0]), (2, [1.0, 1.0]), (1, [0.0, 0.0])]]


def local_sequence(seed: int, limit: int, actions: list, episodes: int = 2) -> list[dm_env.TimeStep]:
    """The TimeSteps of the env itself for these actions (a new sequence after each LAST)."""
    env = dm_worlds.probe(limit)
    env.seed(seed)
    return run_timesteps(env, actions, episodes)


def run_timesteps(env, actions, episodes):
    """The TimeSteps of ``env`` for ``actions``, over ``episodes`` sequences."""
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


class ServedConformance(test_utils.EnvironmentTestMixin):
    """dm_env's conformance mixin against ``factory`` served by our server, read by ``connect_dm_env``."""

    factory = None
    settings: dict = {}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.server = servers.start(cls.factory)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        super().tearDownClass()

    def make_object_under_test(self):
        return dmrpc_gym.connect_dm_env(self.server.address, dict(self.settings))
