"""The walk of a large request bounds an action's integer payload by its spec's count of elements
(issue 42, item 6), from the tensor's header, before protobuf reads it."""
from __future__ import annotations

import pytest

from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.protowire import varint
from dmrpc_gym.protocol.wire import pb


def step_of_varints(count: int, packed: bool = True) -> bytes:
    """An EnvironmentRequest whose Step's action UID 1 is ``count`` one-byte int32 varints (shape [count])."""
    if packed:
        array = b"\x01" * count
        payload = b"\x0a" + varint(len(array)) + array
    else:
        payload = b"\x08\x01" * count
    tensor = b"\x22" + varint(len(payload)) + payload + b"\x7a" + varint(len(varint(count))) + varint(count)
    entry = b"\x08\x01\x12" + varint(len(tensor)) + tensor
    step = b"\x0a" + varint(len(entry)) + entry
    return b"\x1a" + varint(len(step)) + step


def specs(*shape: int) -> pb.ActionObservationSpecs:
    out = pb.ActionObservationSpecs()
    out.actions[1].CopyFrom(pb.TensorSpec(name="a", dtype=pb.DataType.INT32, shape=list(shape)))
    return out


N = 100_000          # past large_tensors.LARGE bytes: the request is walked


def test_as_many_elements_as_the_spec_holds_go_to_protobuf():
    request = step_of_varints(N)
    rest, found = large_tensors.split(request, large_tensors.ACTIONS, specs(N))
    assert not found
    assert len(pb.EnvironmentRequest.FromString(rest).step.actions[1].int32s.array) == N


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "unpacked"])
def test_more_elements_than_the_spec_holds_are_refused_naming_the_action(packed):
    with pytest.raises(ValueError, match=r"action UID 1: .*more than 10 elements: its spec holds 10 \(shape \[2, 5\]\)"):
        large_tensors.split(step_of_varints(N, packed), large_tensors.ACTIONS, specs(2, 5))


def test_a_spec_of_unknown_size_bounds_by_the_largest_tensor():
    """A -1 dimension: up to MAX_TENSOR_BYTES once decoded, as for settings (refused past it elsewhere)."""
    rest, _ = large_tensors.split(step_of_varints(N), large_tensors.ACTIONS, specs(-1))
    assert len(pb.EnvironmentRequest.FromString(rest).step.actions[1].int32s.array) == N
