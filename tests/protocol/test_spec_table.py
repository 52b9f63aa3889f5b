"""The spec table (UID <-> name <-> checker <-> payload), tested directly: what both ends share."""
import numpy as np
import pytest

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.spec_table import SpecManager, SpecTable
from dmrpc_gym.protocol.wire import pb
from spec_builders import make_spec


def manager():
    return SpecManager(
        {10: make_spec("paddle", pb.INT32, [], -1, 1), 11: make_spec("say", pb.STRING)},
        {20: make_spec("board", pb.UINT8, [2, 2]), 21: make_spec("reward", pb.DOUBLE)})


def test_spec_manager_names_and_uids():
    m = manager()
    assert list(m.actions.specs) == ["paddle", "say"] and list(m.observations.specs) == ["board", "reward"]
    assert m.actions.specs["paddle"].dtype == pb.INT32
    assert m.actions.uid("say") == 11 and m.observations.uid("reward") == 21
    assert m.observations.uids == [20, 21]
    with pytest.raises(ValueError, match="unknown action 'fire'; the server's actions are: 'paddle', 'say'"):
        m.actions.uid("fire")
    with pytest.raises(ValueError, match="unknown observation 'x'; the server's observations are: 'board', 'reward'"):
        m.observations.uid("x")


def test_spec_manager_validates_specs_and_duplicate_names():
    with pytest.raises(ValueError, match="action spec name 'a' is used twice \\(UIDs 1 and 2\\)"):
        SpecManager({1: make_spec("a", pb.FLOAT), 2: make_spec("a", pb.INT32)}, {})
    with pytest.raises(ValueError, match="observation spec name 'o' is used twice"):
        SpecManager({}, {1: make_spec("o", pb.FLOAT), 2: make_spec("o", pb.FLOAT)})
    with pytest.raises(ValueError, match="action spec 'bad': min 3 is greater than max 1"):
        SpecManager({1: make_spec("bad", pb.INT32, [], 3, 1)}, {})
    # The same name as an action and as an observation is fine.
    SpecManager({1: make_spec("x", pb.FLOAT)}, {1: make_spec("x", pb.FLOAT)})


def test_pack_actions_is_sparse_checked_and_exact():
    m = manager()
    request = pb.StepRequest()
    m.actions.pack({"paddle": np.int64(-1)}, request.actions)
    assert list(request.actions) == [10]
    assert request.actions[10].WhichOneof("payload") == "int32s"
    assert tensors.unpack(request.actions[10]) == -1
    m.actions.pack({"say": "hi ✓"}, request.actions)
    assert tensors.unpack(request.actions[11]) == "hi ✓"
    plain: dict = {}
    m.actions.pack({"paddle": 1}, plain)
    assert tensors.unpack(plain[10]).dtype == np.int32
    with pytest.raises(ValueError, match="action 'paddle': value 5 is above the maximum 1"):
        m.actions.pack({"paddle": 5}, request.actions)
    with pytest.raises(ValueError, match="unknown action 'fire'; the server's actions are: 'paddle', 'say'"):
        m.actions.pack({"fire": 1}, request.actions)


def test_unpack_observations():
    m = manager()
    got = m.observations.unpack({20: tensors.pack(np.eye(2, dtype=np.uint8)), 21: tensors.pack(0.5)})
    assert list(got) == ["board", "reward"]
    assert got["board"].dtype == np.uint8 and got["board"].tolist() == [[1, 0], [0, 1]]
    assert got["reward"] == 0.5
    with pytest.raises(ValueError, match="no observation has UID 99 \\(observations: 20='board', 21='reward'\\)"):
        m.observations.unpack({99: tensors.pack(1.0)})


def test_checked_unpack_requires_the_exact_payload_type_and_the_bounds():
    """The server's side: a peer's actions must match the spec exactly."""
    table = SpecTable({1: make_spec("paddle", pb.INT8, [], -1, 1), 2: make_spec("aim", pb.FLOAT, [2])}, "action")
    got = table.unpack({1: tensors.pack(np.int8(-1)), 2: tensors.pack(np.array([0.5, 2.0], np.float32))},
                       check=True)
    assert got["paddle"].dtype == np.int8 and got["paddle"] == -1
    assert got["aim"].tolist() == [0.5, 2.0]
    with pytest.raises(ValueError, match=r"action 'paddle': expected a INT8 tensor \(int8\), got a INT64 tensor"):
        table.unpack({1: tensors.pack(np.int64(1))}, check=True)
    with pytest.raises(ValueError, match="action 'paddle': expected a INT8 tensor .*got a tensor with no payload"):
        table.unpack({1: pb.Tensor()}, check=True)
    with pytest.raises(ValueError, match="action 'paddle': value 3 is above the maximum 1"):
        table.unpack({1: tensors.pack(np.int8(3))}, check=True)
    with pytest.raises(ValueError, match=r"action 'aim': .*shape"):
        table.unpack({2: tensors.pack(np.zeros(3, np.float32))}, check=True)
    with pytest.raises(ValueError, match=r"no action has UID 7 \(actions: 1='paddle', 2='aim'\)"):
        table.unpack({7: tensors.pack(np.int8(0))}, check=True)
    # Unchecked (a client reading observations): the payload is taken as it comes.
    assert table.unpack({1: tensors.pack(np.int64(5))})["paddle"] == 5


def test_a_packed_table_unpacks_to_the_same_values_on_the_other_end():
    """What the client packs, the server's table (built from the same specs) reads back exactly."""
    specs = {3: make_spec("grid", pb.INT32, [2, 2], -4, 4), 4: make_spec("say", pb.STRING),
             5: make_spec("buttons", pb.BOOL, [3])}
    client, server = SpecTable(specs, "action"), SpecTable(specs, "action")
    values = {"grid": np.array([[-4, 0], [1, 4]]), "say": "hé", "buttons": np.array([True, False, True])}
    request = pb.StepRequest()
    client.pack(values, request.actions)
    wire = pb.StepRequest.FromString(request.SerializeToString())
    got = server.unpack(wire.actions, check=True)
    assert got["grid"].dtype == np.int32 and got["grid"].tolist() == [[-4, 0], [1, 4]]
    assert got["say"] == "hé" and got["buttons"].tolist() == [True, False, True]
