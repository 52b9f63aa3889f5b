"""Large step tensors outside protobuf (``dmrpc_gym.protocol.large_tensors``): what it writes is plain
protobuf, what it reads is what protobuf reads, and both ends agree with the official package."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_rpc_pb2 as official_pb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dmrpc_gym import DmRpcEnv
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from official_servers import start_official_server

NUMERIC = ["float32", "float64", "int8", "uint8", "bool", "int32", "uint64"]
MEMORY = {"float32", "float64", "int8", "uint8", "bool"}
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])


@st.composite
def tensor(draw) -> pb.Tensor:
    """A Tensor as any peer may send it: tight, broadcast from one element, or with a -1 dimension."""
    dtype = draw(st.sampled_from(NUMERIC))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    arr = draw(hnp.arrays(dtype, shape, elements={"allow_nan": False} if dtype.startswith("float") else None))
    out = tensors.pack(arr)
    how = draw(st.sampled_from(["tight", "broadcast", "infer"]))
    if how == "broadcast" and arr.size:
        single = tensors.pack(arr.reshape(-1)[:1])
        single.ClearField("shape")
        single.shape.extend(shape)
        out = single
    elif how == "infer" and arr.ndim:
        out.shape[draw(st.integers(0, arr.ndim - 1))] = -1
    return out


def full_unpack(observations) -> dict[int, np.ndarray]:
    return {uid: tensors.unpack(t) for uid, t in observations.items()}


def assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for uid, array in want.items():
        assert got[uid].dtype == array.dtype and got[uid].shape == array.shape, uid
        np.testing.assert_array_equal(got[uid], array)


@FAST
@given(parts=st.lists(st.dictionaries(st.integers(0, 4), tensor(), max_size=4), min_size=1, max_size=2),
       state=st.sampled_from([0, 1, 2]), kind=st.sampled_from(["response", "request"]),
       writable=st.booleans())
def test_split_reads_exactly_what_protobuf_reads(monkeypatch, parts, state, kind, writable):
    """Serialized by protobuf (as any peer would), concatenated (later entries win): the same values."""
    monkeypatch.setattr(large_tensors, "LARGE", 8)
    envelope = pb.EnvironmentResponse if kind == "response" else pb.EnvironmentRequest
    map_field = large_tensors.OBSERVATIONS if kind == "response" else large_tensors.ACTIONS
    chunks = []
    for part in parts:
        message = envelope()
        step = message.step
        target = step.observations if kind == "response" else step.actions
        for uid, t in part.items():
            target[uid].CopyFrom(t)
        if kind == "response":
            step.state = state
        else:
            step.requested_observations.extend([3, 1])
        chunks.append(message.SerializeToString())
    raw = b"".join(chunks)
    whole = envelope.FromString(raw)
    want = full_unpack(whole.step.observations if kind == "response" else whole.step.actions)

    rest, large = large_tensors.split(bytearray(raw) if writable else raw, map_field)
    parsed = envelope.FromString(rest)
    got = full_unpack(parsed.step.observations if kind == "response" else parsed.step.actions)
    got.update((uid, array) for uid, (_, array) in large.items())
    assert_same(got, want)
    if kind == "response":
        assert parsed.step.state == whole.step.state
    else:
        assert list(parsed.step.requested_observations) == list(whole.step.requested_observations)
    final = whole.step.observations if kind == "response" else whole.step.actions
    for uid, (payload, array) in large.items():
        assert payload == final[uid].WhichOneof("payload")
        assert array.flags.writeable
    for uid, t in final.items():   # every large memory-kind tensor took the path
        if t.WhichOneof("payload") in ("floats", "doubles", "int8s", "uint8s") and t.ByteSize() >= 8:
            assert uid in large, (uid, t)


IMAGE = (np.arange(300 * 300 * 3) % 251).astype(np.uint8).reshape(300, 300, 3)


def large_values() -> dict[int, np.ndarray]:
    rng = np.random.default_rng(0)
    return {1: IMAGE, 7: rng.standard_normal((128, 129)).astype(np.float32),
            300: rng.integers(0, 2, 70_000).astype(bool),
            2**40: rng.standard_normal((200, 100))[:, ::2],          # float64, not contiguous
            5: rng.integers(-128, 128, 1 << 17).astype(np.int8)}


def test_pieces_are_canonical_protobuf_that_the_official_package_reads():
    response = pb.EnvironmentResponse()
    response.step.state = pb.RUNNING
    response.step.observations[9].CopyFrom(tensors.pack(np.float64(0.5)))
    pieces = large_tensors.Pieces(large_tensors.OBSERVATIONS)
    for uid, value in large_values().items():
        assert pieces.take(uid, value, None)
    assert not pieces.take(11, np.zeros(3, np.float32), None)         # small: left to protobuf
    assert not pieces.take(12, np.zeros(1 << 15, np.int64), None)     # varint kind: left to protobuf
    raw = b"".join(pieces.envelope(large_tensors.STEP_TAG, response.step.SerializeToString()))
    official = official_pb.EnvironmentResponse.FromString(raw)
    assert official.ByteSize() == len(raw)             # no byte more than protobuf would write
    ours = pb.EnvironmentResponse.FromString(raw)
    assert_same(full_unpack(ours.step.observations), {9: np.array(0.5), **large_values()})
    assert official.step.state == official_pb.RUNNING


def test_large_arrays_are_read_in_place_from_a_writable_buffer():
    pieces = large_tensors.Pieces(large_tensors.ACTIONS)
    pieces.take(3, IMAGE, None)
    message = bytearray(b"".join(pieces.envelope(large_tensors.STEP_TAG, b"")))
    _, large = large_tensors.split(message, large_tensors.ACTIONS)
    payload, array = large[3]
    assert payload == "uint8s" and array.shape == IMAGE.shape and array.flags.writeable
    assert np.shares_memory(array, np.frombuffer(message, np.uint8))
    _, copied = large_tensors.split(bytes(message), large_tensors.ACTIONS)
    assert copied[3][1].flags.writeable and not np.shares_memory(copied[3][1], array)
    np.testing.assert_array_equal(copied[3][1], IMAGE)


@pytest.mark.parametrize("uid", [1, 200, 20000, 2**30])   # the payload lands at every offset mod 4
def test_misaligned_floats_come_back_aligned(uid):
    values = np.linspace(-1, 1, 1 << 15, dtype=np.float32)
    pieces = large_tensors.Pieces(large_tensors.OBSERVATIONS)
    pieces.take(uid, values, None)
    _, large = large_tensors.split(bytearray(b"".join(pieces.envelope(large_tensors.STEP_TAG, b""))), large_tensors.OBSERVATIONS)
    assert large[uid][1].flags.aligned
    np.testing.assert_array_equal(large[uid][1], values)


@pytest.mark.parametrize("case", ["bool byte 2", "unknown field", "unpacked shape", "two payloads"])
def test_layouts_it_does_not_expect_are_left_to_protobuf(case):
    n = large_tensors.LARGE
    if case == "bool byte 2":               # protobuf reads any nonzero varint as True
        inner = b"\x0a" + tensors.varint(n + 1) + b"\x02" + bytes(n)
        body = b"\x4a" + tensors.varint(len(inner)) + inner
    else:
        body = tensors.pack(np.ones(n, np.uint8)).SerializeToString()
        body += {"unknown field": b"\xa0\x01\x05", "unpacked shape": b"\x78" + tensors.varint(n),
                 "two payloads": tensors.pack(np.ones(2, np.uint8)).SerializeToString()}[case]
    entry = b"\x08\x01\x12" + tensors.varint(len(body)) + body
    step = b"\x12" + tensors.varint(len(entry)) + entry
    raw = b"\x1a" + tensors.varint(len(step)) + step
    rest, large = large_tensors.split(bytearray(raw), large_tensors.OBSERVATIONS)
    assert large == {} and bytes(rest) == raw
    observation = pb.EnvironmentResponse.FromString(raw).step.observations[1]    # protobuf reads it
    assert observation.WhichOneof("payload") == ("bools" if case == "bool byte 2" else "uint8s")


# -- end to end --------------------------------------------------------------------------------------


class Images(gym.Env):
    """Echoes a Dict action of large tensors of every memory kind as its observation."""

    observation_space = action_space = gym.spaces.Dict({
        "image": gym.spaces.Box(0, 255, IMAGE.shape, np.uint8),
        "depth": gym.spaces.Box(-1.0, 1.0, (128, 129), np.float32),
        "mask": gym.spaces.MultiBinary(70_000),
        "small": gym.spaces.Box(-1.0, 1.0, (2,), np.float64),
    })

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return action, 1.0, False, False, {}


def test_large_dict_actions_and_observations_our_client_our_server():
    with Server(Images) as server:
        env = DmRpcEnv(server.address, step_timeout=30)
        try:
            env.reset(seed=0)
            env.action_space.seed(0)
            for _ in range(3):
                action = env.action_space.sample()
                obs, *_ = env.step(action)
                for name, value in action.items():
                    assert obs[name].dtype == value.dtype
                    np.testing.assert_array_equal(obs[name], value, err_msg=name)
                assert obs["image"].flags.writeable
        finally:
            env.close()


def test_large_tensors_with_the_official_client_against_our_server():
    from dm_env_rpc.v1 import connection, dm_env_adaptor
    import grpc

    with Server(Images) as server:
        limits = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        channel = grpc.insecure_channel(server.address, options=limits)
        try:
            conn = connection.Connection(channel)
            env, _ = dm_env_adaptor.create_and_join_world(conn, {}, {})
            env.reset()
            rng = np.random.default_rng(1)
            action = {"image": rng.integers(0, 256, IMAGE.shape).astype(np.uint8),
                      "depth": rng.uniform(-1, 1, (128, 129)).astype(np.float32),
                      "mask": rng.integers(0, 2, 70_000).astype(np.int8), "small": np.zeros(2)}
            observation = env.step(action).observation
            for name, value in action.items():
                np.testing.assert_array_equal(observation[name], value, err_msg=name)
            env.close()
        finally:
            channel.close()


def test_large_actions_echoed_by_an_official_server():
    specs = {"image": dict(kind="action", dtype="uint8", shape=list(IMAGE.shape)),
             "depth": dict(kind="action", dtype="float32", shape=[128, 129], min=-1.0, max=1.0),
             "flags": dict(kind="action", dtype="bool", shape=[70_000])}
    with start_official_server(specs, episode_length=100) as server:
        env = DmRpcEnv(server.address, step_timeout=30)
        try:
            env.reset()
            env.action_space.seed(2)
            for _ in range(2):
                action = env.action_space.sample()
                obs, *_ = env.step(action)
                for name, value in action.items():
                    np.testing.assert_array_equal(obs[f"echo.{name}"], value, err_msg=name)
        finally:
            env.close()


class InPlace(gym.Env):
    """Returns one buffer, overwritten in place every step (as many fast envs do)."""

    observation_space = gym.spaces.Box(0, 255, (1 << 20,), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.n, self.buffer = 0, np.zeros(1 << 20, np.uint8)
        return self.buffer, {}

    def step(self, action):
        self.n += 1
        self.buffer[:] = self.n
        return self.buffer, 0.0, False, False, {}


def test_pipelined_answers_keep_what_each_step_observed():
    """Large answers are sent from the env's memory, yet a pipelined next step that overwrites
    that memory does not change an answer already given."""
    from dmrpc_gym import Connection

    with Server(InPlace) as server, Connection(server.address, timeout=30) as conn:
        world = conn.send(pb.CreateWorldRequest()).world_name
        conn.send(pb.JoinWorldRequest(world_name=world))
        conn.send(pb.StepRequest())                       # starts the sequence
        for _ in range(6):
            conn.submit(pb.StepRequest(requested_observations=[1]))
        firsts = []
        for _ in range(6):
            _, large = conn.receive_step()
            payload, observation = large[1]
            assert payload == "uint8s" and observation.min() == observation.max()
            firsts.append(int(observation[0]))
    assert firsts == [1, 2, 3, 4, 5, 6]
