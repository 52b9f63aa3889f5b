"""References into shared memory on the wire (dmrpc_gym.protocol.region_refs): what :func:`read` takes out of
a step message and what it leaves, byte for byte, for protobuf."""
from __future__ import annotations

import numpy as np
import pytest

from dmrpc_gym.protocol import large_tensors, tensors
from dmrpc_gym.protocol.protowire import varint
from dmrpc_gym.protocol.region_refs import (MAX_REFS, OBSERVATIONS_TAG, REF, STEP_TAG, entries, large_specs, read,
                                            reference, targets)
from dmrpc_gym.protocol.wire import pb

REF_TAG = varint((REF << 3) | 2)


def step(*parts: bytes) -> bytes:
    body = b"".join(parts)
    return STEP_TAG + varint(len(body)) + body


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_references_and_targets_come_out_and_the_rest_is_protobufs(kind):
    reward = entries(OBSERVATIONS_TAG, {9: tensors.tensor_bytes(0.5)})[0]
    ref = entries(OBSERVATIONS_TAG, {3: reference((4, 5), pb.FLOAT, 256)})[0]
    rest, refs, spans = read(kind(step(b"\x08\x01", ref, reward)), large_tensors.OBSERVATIONS)
    assert refs == {3: ((4, 5), pb.FLOAT, 0, 256)} and spans == {}
    assert rest == step(b"\x08\x01", reward)
    response = pb.EnvironmentResponse.FromString(rest).step
    assert response.state == pb.RUNNING and list(response.observations) == [9]
    request = pb.StepRequest(requested_observations=[3, 9])
    rest, refs, spans = read(kind(step(request.SerializeToString(), targets({3: (256, 80)}))), large_tensors.ACTIONS)
    assert spans == {3: (256, 80)} and pb.EnvironmentRequest.FromString(rest).step == request


def test_messages_without_references_come_back_as_they_are():
    image = np.frombuffer(REF_TAG * 100, np.uint8)              # a payload holding the tag's bytes: no reference
    plain = step(*entries(OBSERVATIONS_TAG, {1: tensors.tensor_bytes(image)}))
    assert read(plain, large_tensors.OBSERVATIONS) == (plain, {}, {})
    other = b"\x0a\x00"                                          # a CreateWorldRequest's envelope
    assert read(other, large_tensors.ACTIONS) == (other, {}, {})


def test_floods_and_malformed_references_are_refused_by_name():
    many = entries(OBSERVATIONS_TAG, {uid: reference((1,), pb.UINT8, 64 * uid) for uid in range(MAX_REFS + 1)})
    with pytest.raises(ValueError, match=f"more than {MAX_REFS} tensor references"):
        read(step(*many), large_tensors.OBSERVATIONS)
    with pytest.raises(ValueError, match="triples"):
        read(step(REF_TAG + b"\x02\x01\x02"), large_tensors.ACTIONS)
    negative = entries(OBSERVATIONS_TAG, {1: reference((-1 & (1 << 64) - 1,), pb.UINT8, 0)})[0]
    with pytest.raises(ValueError, match="negative dimension"):
        read(step(negative), large_tensors.OBSERVATIONS)


def test_large_specs_are_the_memory_kinds_of_a_fixed_size_past_the_threshold():
    specs = {1: pb.TensorSpec(name="image", shape=[64, 64, 3], dtype=pb.UINT8),
             2: pb.TensorSpec(name="any", shape=[-1, 64], dtype=pb.FLOAT),
             3: pb.TensorSpec(name="ids", shape=[4096], dtype=pb.INT64),
             4: pb.TensorSpec(name="small", shape=[3], dtype=pb.DOUBLE),
             5: pb.TensorSpec(name="depth", shape=[64, 64], dtype=pb.FLOAT)}
    assert large_specs(specs, 1 << 14) == {5: (16384, pb.FLOAT)}          # (the image: 12,288 bytes)
    assert large_specs(specs, 1 << 12, uids=[1, 4]) == {1: (12288, pb.UINT8)}
