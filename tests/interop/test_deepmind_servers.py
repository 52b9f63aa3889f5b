"""What DeepMind's own dm_env_rpc servers do (issue 20 item 4), against a server of our own that
does it: pre-1.1 scalar bounds, partial (sticky) actions, a string observation, a -1 shape."""
from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

from dmrpc_gym import DmRpcEnv
from official_servers import start_official_server

SPECS = {
    "thrust": dict(kind="action", dtype="float32", shape=[2]),
    "gear": dict(kind="action", dtype="int32", shape=[]),
    "speed": dict(dtype="float64", shape=[]),
    "instruction": dict(dtype="str", shape=[]),
    "trail": dict(dtype="float32", shape=[-1]),
}


def legacy_bounds(spec, low: bytes, high: bytes) -> None:
    """Give ``spec`` pre-1.1 scalar bounds: serialized Value fields 1-8, as old servers send them."""
    spec.min.Clear()
    spec.max.Clear()
    spec.min.MergeFromString(low)
    spec.max.MergeFromString(high)


def by_name(specs, name):
    return next(spec for spec in specs.values() if spec.name == name)


def test_pre_1_1_scalar_bounds_are_read_as_bounds():
    """Fields 1-8 of TensorSpec.Value were removed in dm_env_rpc 1.1.0 but old servers send them."""
    with start_official_server(SPECS) as server:
        # float (field 1, fixed32): -1.5 .. 2.5 on thrust; int32 (field 4, varint): -3 .. 4 on gear
        # (a negative int32 is a ten-byte varint); double (field 2, fixed64): 0 .. 9 on speed.
        legacy_bounds(by_name(server.action_specs, "thrust"),
                      bytes([0x0D]) + np.float32(-1.5).tobytes(), bytes([0x0D]) + np.float32(2.5).tobytes())
        minus_three = bytes([0xFD] + [0xFF] * 8 + [0x01])
        legacy_bounds(by_name(server.action_specs, "gear"), bytes([0x20]) + minus_three, bytes([0x20, 0x04]))
        legacy_bounds(by_name(server.observation_specs, "speed"),
                      bytes([0x11]) + np.float64(0).tobytes(), bytes([0x11]) + np.float64(9).tobytes())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")                       # the -1 'trail' is left out, said
            env = DmRpcEnv(server.address, seed_setting=None)
        try:
            assert env.action_space["thrust"] == gym.spaces.Box(-1.5, 2.5, (2,), np.float32)
            assert env.action_space["gear"] == gym.spaces.Discrete(8, start=-3, dtype=np.int32)
            assert env.observation_space["speed"] == gym.spaces.Box(0.0, 9.0, (), np.float64)
            env.reset()
            with pytest.raises(ValueError, match=r"action 'thrust'.*above the maximum"):
                env.step({"thrust": np.array([3.0, 0.0], np.float32)})
        finally:
            env.close()


def test_partial_actions_a_string_observation_and_a_variable_length_one():
    with start_official_server(SPECS) as server:
        with pytest.warns(UserWarning, match=r"observation 'trail' has no faithful gymnasium space"):
            env = DmRpcEnv(server.address, actions=["thrust"], seed_setting=None)
        try:
            assert set(env.action_space.spaces) == {"thrust"}
            assert isinstance(env.observation_space["instruction"], gym.spaces.Text)
            env.reset()
            obs, _, _, _, info = env.step({"thrust": np.array([0.5, -0.5], np.float32)})
            sent = server.received[-1]
            assert set(sent) == {"thrust"}                    # only the subset crosses: 'gear' stays sticky
            assert isinstance(obs["instruction"], str)
            assert info["trail"].dtype == np.float32 and info["trail"].ndim == 1   # in info, not lost
        finally:
            env.close()
