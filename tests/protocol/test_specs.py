"""Spec validation, value checking, and the official-package test server."""
from __future__ import annotations

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dmrpc_gym.spaces import UnsupportedSpec, dict_space, flatten_value, space_from_spec, unflatten_value
from dmrpc_gym.protocol.spec_table import SpecManager
from dmrpc_gym.protocol.specs import SpecChecker, cast_exact, check_value, validate_spec
from dmrpc_gym.protocol.wire import pb
from official_servers import UNUSUAL_SPECS, default_value, start_official_server
from spec_builders import make_spec


# -- cast_exact --------------------------------------------------------------------

@pytest.mark.parametrize("value, dtype, expected", [
    (np.array([1, 2], np.int64), np.int8, [1, 2]),
    (np.array([300], np.int64), np.int8, None),
    (np.array([-1], np.int64), np.uint8, None),
    (np.array([2**64 - 1], np.uint64), np.int64, None),
    (np.array([2**63 - 1], np.uint64), np.int64, [2**63 - 1]),
    (np.array([1.0, -2.0]), np.int32, [1, -2]),
    (np.array([0.5]), np.int32, None),
    (np.array([np.nan]), np.int32, None),
    (np.array([np.inf]), np.int64, None),
    (np.array([2.0**63]), np.int64, None),
    (np.array([0.1]), np.float32, [np.float32(0.1)]),
    (np.array([1e39]), np.float32, None),
    (np.array([np.inf, np.nan]), np.float32, [np.inf, np.nan]),
    (np.array([0, 1]), np.bool_, [False, True]),
    (np.array([2]), np.bool_, None),
    (np.array([True]), np.int8, [1]),
    (np.array(["a"]), np.int8, None),
    (np.array([1]), np.str_, None),
    (np.array(["abc"]), np.dtype("<U1"), ["abc"]),
    (np.array(["x", "y"], dtype=object), np.str_, ["x", "y"]),
    (np.array([1, 2**70], dtype=object), np.int64, None),
    (np.array([1, 2], dtype=object), np.int64, [1, 2]),
])
def test_cast_exact(value, dtype, expected):
    got = cast_exact(value, dtype)
    if expected is None:
        assert got is None
    else:
        assert got is not None and got.dtype.kind == np.dtype(dtype).kind
        np.testing.assert_array_equal(got, np.array(expected, dtype=got.dtype))


def test_cast_exact_keeps_the_same_array_when_the_dtype_matches():
    arr = np.zeros(3, np.float32)
    assert cast_exact(arr, np.float32) is arr


INT_DTYPES = [np.int8, np.int32, np.int64, np.uint8, np.uint32, np.uint64]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(INT_DTYPES), st.sampled_from(INT_DTYPES + [np.float64, np.float32]), st.data())
def test_cast_exact_to_integers_never_changes_a_value(src, dst, data):
    arr = data.draw(hnp.arrays(src, hnp.array_shapes(max_dims=2, max_side=4)))
    got = cast_exact(arr, dst)
    if got is None:
        return
    assert got.dtype == np.dtype(dst)
    if np.dtype(dst).kind in "iu":
        assert [int(x) for x in got.flat] == [int(x) for x in arr.flat]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(INT_DTYPES), st.data())
def test_cast_exact_from_floats_accepts_exactly_the_integral_values_in_range(dst, data):
    values = data.draw(st.lists(st.one_of(st.floats(allow_nan=True), st.integers(-2**65, 2**65).map(float)),
                                min_size=1, max_size=4))
    arr = np.array(values, np.float64)
    info = np.iinfo(dst)
    fits = all(np.isfinite(v) and float(v).is_integer() and info.min <= int(v) <= info.max for v in values)
    got = cast_exact(arr, dst)
    assert (got is not None) == fits
    if fits:
        assert [int(x) for x in got] == [int(v) for v in values]


# -- validate_spec ---------------------------------------------------------------------

BAD_SPECS = [
    (pb.TensorSpec(name="x"), "observation spec 'x' has no dtype (INVALID_DATA_TYPE)"),
    (pb.TensorSpec(name="x", dtype=42), "observation spec 'x' has an unknown dtype 42"),
    (make_spec("x", pb.FLOAT, [-1, -1]), "observation spec 'x': shape [-1, -1] may have at most one -1 dimension"),
    (make_spec("x", pb.FLOAT, [2, -3]), "shape [2, -3] may have at most one -1 dimension and no other negative size"),
    (make_spec("x", pb.UINT8, [], -1, 3, bound_dtype=pb.INT32), "observation spec 'x': min -1 does not fit UINT8"),
    (make_spec("x", pb.INT32, [], 0.5, 3.0, bound_dtype=pb.DOUBLE), "observation spec 'x': min 0.5 does not fit INT32"),
    (make_spec("x", pb.INT8, [2], 0, [1, 300], bound_dtype=pb.INT32),
     "observation spec 'x': max 300 at index (1,) does not fit INT8"),
    (make_spec("x", pb.FLOAT, [], None, 1e39, bound_dtype=pb.DOUBLE), "observation spec 'x': max 1e+39 does not fit FLOAT"),
    (make_spec("x", pb.INT64, [], 0, 2**64 - 1, bound_dtype=pb.UINT64),
     "max 18446744073709551615 does not fit INT64"),
    (make_spec("x", pb.FLOAT, [2, 3], [0, 0], None),
     "observation spec 'x': min has 2 elements; expected 1 or 6 (one per element of shape [2, 3])"),
    (make_spec("x", pb.FLOAT, [-1, 2], [0, 0], None),
     "observation spec 'x': min has 2 elements; expected 1 (shape [-1, 2] has a -1 dimension)"),
    (make_spec("x", pb.INT32, [], 3, 1), "observation spec 'x': min 3 is greater than max 1"),
    (make_spec("x", pb.FLOAT, [3], [0, 5, 0], 1.0), "observation spec 'x': min 5.0 is greater than max 1.0 at index (1,)"),
    (make_spec("x", pb.INT8, [2, 2], 0, [[1, 1], [-1, 1]]),
     "observation spec 'x': min 0 is greater than max -1 at index (1, 0)"),
    (make_spec("x", pb.DOUBLE, [], np.nan, None), "observation spec 'x': min is not a number (nan)"),
    (make_spec("x", pb.BOOL, [], 0, 1, bound_dtype=pb.INT32), "observation spec 'x': BOOL specs cannot have a min bound"),
    (make_spec("x", pb.STRING, [], None, 1, bound_dtype=pb.INT32), "STRING specs cannot have a max bound"),
]


@pytest.mark.parametrize("spec, message", BAD_SPECS, ids=[m for _, m in BAD_SPECS])
def test_validate_spec_rejects(spec, message):
    with pytest.raises(ValueError) as info:
        validate_spec(spec)
    assert message in str(info.value)


def test_validate_spec_names_the_kind():
    with pytest.raises(ValueError, match="action spec 'fire' has no dtype"):
        validate_spec(pb.TensorSpec(name="fire"), kind="action")


@pytest.mark.parametrize("spec", [
    make_spec("ok", pb.INT32, [], -2.0, 2.0, bound_dtype=pb.DOUBLE),       # other payload type, values fit
    make_spec("ok", pb.UINT8, [3], 0, [1, 2, 255], bound_dtype=pb.INT64),
    make_spec("ok", pb.FLOAT, [2], -np.inf, np.inf, bound_dtype=pb.DOUBLE),
    make_spec("ok", pb.FLOAT, [], 0.1, None, bound_dtype=pb.DOUBLE),        # rounding to float32 is fine
    make_spec("ok", pb.DOUBLE, [-1], 0.0, 1.0),                              # broadcast bound with -1 dim
    make_spec("ok", pb.INT64, [], 1, 1),                                     # min == max
    make_spec("ok", pb.STRING, [-1]),
    make_spec("ok", pb.PROTO),
])
def test_validate_spec_accepts(spec):
    validate_spec(spec)


def test_an_empty_bound_message_is_no_bound():
    spec = pb.TensorSpec(name="x", dtype=pb.FLOAT)
    spec.min.SetInParent()
    checker = SpecChecker(spec)
    assert checker.minimum is None


def test_checker_bounds_are_arrays_of_the_spec_dtype():
    checker = SpecChecker(make_spec("x", pb.INT32, [2, 2], -2.0, [[1, 2], [3, 4]], bound_dtype=pb.DOUBLE))
    assert checker.minimum.dtype == np.int32 and checker.minimum.shape == ()
    assert checker.maximum.dtype == np.int32 and checker.maximum.tolist() == [[1, 2], [3, 4]]


# -- check_value ------------------------------------------------------------------

PADDLE = make_spec("paddle", pb.INT32, [], -1, 1)
BOARD = make_spec("board", pb.UINT8, [10, 10])
A_INT8 = make_spec("a", pb.INT8)
GRID = make_spec("grid", pb.INT8, [2, 3], [[-1, -2, -3], [0, 0, 0]], [[1, 2, 3], [4, 5, 6]])
LEVEL = make_spec("level", pb.DOUBLE, [], 0.0, 1.0)
POINTS = make_spec("points", pb.FLOAT, [-1, 2], -1.0, 1.0)

BAD_VALUES = [
    (PADDLE, 2, "action", "action 'paddle': value 2 is above the maximum 1"),
    (PADDLE, -2, "action", "action 'paddle': value -2 is below the minimum -1"),
    (PADDLE, np.array([1]), "action", "action 'paddle': expected shape (), got (1,)"),
    (BOARD, np.zeros(3, np.uint8), "action", "action 'board': expected shape (10, 10), got (3,)"),
    (A_INT8, 0.5, "action", "action 'a': expected int8, got float64 value 0.5 that int8 cannot hold"),
    (A_INT8, 300, "action", "action 'a': expected int8, got int64 value 300 that int8 cannot hold"),
    (A_INT8, "x", "action", "action 'a': expected int8, got string"),
    (GRID, np.array([[0, 0, 0], [0, 7, 0]]), "action", "action 'grid': value 7 at index (1, 1) is above the maximum 5"),
    (GRID, np.array([[0, -3, 0], [0, 0, 0]]), "action", "action 'grid': value -3 at index (0, 1) is below the minimum -2"),
    (GRID, np.array([[0, 0, 0], [0, 0, 0.5]]), "action",
     "action 'grid': expected int8, got float64 value 0.5 at index (1, 2) that int8 cannot hold"),
    (LEVEL, np.nan, "observation", "observation 'level': value nan is not within [0.0, 1.0]"),
    (LEVEL, 1.5, "observation", "observation 'level': value 1.5 is above the maximum 1.0"),
    (POINTS, np.zeros((3, 3), np.float32), "action", "action 'points': expected shape (-1, 2), got (3, 3)"),
    (POINTS, np.zeros(2, np.float32), "action", "action 'points': expected shape (-1, 2), got (2,)"),
    (POINTS, np.array([[0, 0], [0, 2]], np.float32), "action",
     "action 'points': value 2.0 at index (1, 1) is above the maximum 1.0"),
    (make_spec("flags", pb.BOOL, [2]), [1, 2], "action", "action 'flags': expected bool, got int64 value 2 at index (1,) that bool cannot hold"),
    (make_spec("say", pb.STRING), 3, "action", "action 'say': expected string, got int64"),
    (make_spec("f", pb.FLOAT), 1e39, "action", "action 'f': expected float32, got float64 value 1e+39 that float32 cannot hold"),
    (make_spec("u", pb.UINT64), -1, "action", "action 'u': expected uint64, got int64 value -1 that uint64 cannot hold"),
]


@pytest.mark.parametrize("spec, value, what, message", BAD_VALUES, ids=[m for *_, m in BAD_VALUES])
def test_check_value_rejects(spec, value, what, message):
    with pytest.raises(ValueError) as info:
        check_value(spec, value, what)
    assert str(info.value) == message


@pytest.mark.parametrize("spec, value, expected_dtype", [
    (PADDLE, np.int64(1), np.int32),
    (PADDLE, 0, np.int32),
    (PADDLE, np.array(-1.0), np.int32),
    (A_INT8, True, np.int8),
    (GRID, [[1, 2, 3], [4, 5, 6]], np.int8),
    (LEVEL, 1, np.float64),
    (POINTS, np.zeros((0, 2)), np.float32),
    (POINTS, [[0.5, -0.5], [1.0, 1.0], [0.0, 0.0]], np.float32),
    (make_spec("flags", pb.BOOL, [2]), [1, 0], np.bool_),
    (make_spec("say", pb.STRING), "héllo", np.str_),
    (make_spec("f", pb.FLOAT), 0.1, np.float32),
    (make_spec("inf", pb.FLOAT, [2]), [np.inf, np.nan], np.float32),
])
def test_check_value_accepts_and_casts(spec, value, expected_dtype):
    got = check_value(spec, value)
    assert isinstance(got, np.ndarray) and got.dtype.kind == np.dtype(expected_dtype).kind
    if np.dtype(expected_dtype).kind != "U":
        assert got.dtype == expected_dtype


def test_check_value_returns_the_same_array_when_nothing_needs_changing():
    arr = np.zeros((10, 10), np.uint8)
    assert check_value(BOARD, arr) is arr


# -- the official server, and our spec handling against it ----------------------------------

@pytest.fixture
def official():
    from dm_env_rpc.v1 import connection

    servers, channels = [], []

    def connect(specs=UNUSUAL_SPECS, **kwargs):
        server = start_official_server(specs, **kwargs)
        servers.append(server)
        channel = grpc.insecure_channel(server.address)
        grpc.channel_ready_future(channel).result(timeout=5)
        channels.append(channel)
        return server, connection.Connection(channel)

    yield connect
    for channel in channels:
        channel.close()
    for server in servers:
        server.stop()


def ours(message, cls):
    """An official message as ours (wire-identical)."""
    return cls.FromString(message.SerializeToString())


def join(conn, settings=None):
    from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm
    from dm_env_rpc.v1 import tensor_utils

    world = conn.send(dm.CreateWorldRequest(
        settings={k: tensor_utils.pack_tensor(v) for k, v in (settings or {"seed": 1}).items()})).world_name
    specs = conn.send(dm.JoinWorldRequest(world_name=world)).specs
    return world, specs


def test_official_server_lifecycle(official):
    from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm
    from dm_env_rpc.v1 import error, tensor_utils

    server, conn = official(episode_length=2)
    with pytest.raises(error.DmEnvRpcError) as info:
        conn.send(dm.CreateWorldRequest(settings={"speed": tensor_utils.pack_tensor(2)}))
    assert info.value.code == 3 and "unknown settings ['speed']" in info.value.message
    world, specs = join(conn)
    assert world == "world-1" and server.worlds == {"world-1": {"seed": 1}}
    names = {uid: s.name for uid, s in specs.observations.items()}
    by_name = {v: k for k, v in names.items()}
    assert {"reward", "discount", "echo.paddle", "camera", "points"} <= set(by_name)
    request = dm.StepRequest(requested_observations=[by_name["reward"], by_name["discount"]],
                             actions={102: tensor_utils.pack_tensor(1, dm.INT32)})
    states = []
    for _ in range(6):
        states.append(dm.EnvironmentStateType.Name(conn.send(request).state))
    assert states == ["RUNNING", "RUNNING", "TERMINATED", "RUNNING", "RUNNING", "TERMINATED"]
    assert len(server.received) == 4  # the first step of each sequence ignores its actions
    conn.send(dm.ResetRequest())
    assert conn.send(request).state == dm.RUNNING and len(server.received) == 4
    conn.send(dm.ResetWorldRequest(world_name=world, settings={"seed": tensor_utils.pack_tensor(2)}))
    assert server.worlds[world] == {"seed": 2}
    with pytest.raises(error.DmEnvRpcError, match="while joined"):
        conn.send(dm.DestroyWorldRequest(world_name=world))
    conn.send(dm.LeaveWorldRequest())
    conn.send(dm.DestroyWorldRequest(world_name=world))
    assert server.worlds == {}


def test_official_server_interrupts_and_injects_errors(official):
    from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm
    from dm_env_rpc.v1 import error

    server, conn = official(episode_length=1, end_with="interrupted", error_at_step=3, error_code=14,
                            error_message="boom")
    join(conn)
    assert conn.send(dm.StepRequest()).state == dm.RUNNING
    assert conn.send(dm.StepRequest()).state == dm.INTERRUPTED
    with pytest.raises(error.DmEnvRpcError) as info:
        conn.send(dm.StepRequest())
    assert info.value.code == 14 and info.value.message == "boom"
    assert conn.send(dm.StepRequest()).state == dm.RUNNING  # the stream stays usable


EXPECTED_SPACES = {
    "aim": "Box([-1. -2. -3.], [1. 2. 3.], (3,), float32)",
    "paddle": "Discrete(3, start=-1, dtype=int32)",
    "levels": "MultiDiscrete([ 2  6 10])",
    "throttle": "Box(0.0, 1.0, (), float64)",
    "grid": "MultiDiscrete([[3 5 7]\n [5 6 7]], start=[[-1 -2 -3]\n [ 0  0  0]])",
    "buttons": "MultiBinary(4)",
    "say": "PrintableText(0, 65536)",
    "arm.x": "Box(-1.0, 1.0, (), float32)",
    "camera": "Box(0, 255, (8, 6, 3), uint8)",
    "score": "Box(-9223372036854775808, 9223372036854775807, (), int64)",
    "flags": "MultiBinary((2, 2))",
    "title": "PrintableText(0, 65536)",
    "pos.x": "Box(-10.0, 10.0, (), float64)",
    "reward": "Box(-inf, inf, (), float64)",
}


def test_unusual_specs_map_to_the_expected_spaces(official):
    _, conn = official()
    _, specs = join(conn)
    actions = {s.name: space_from_spec(ours(s, pb.TensorSpec)) for s in specs.actions.values()}
    observations = {}
    for s in specs.observations.values():
        try:
            observations[s.name] = space_from_spec(ours(s, pb.TensorSpec))
        except UnsupportedSpec as exc:
            observations[s.name] = exc
    for name, expected in EXPECTED_SPACES.items():
        got = actions.get(name, observations.get(name))
        assert repr(got) == expected, name
        if f"echo.{name}" in observations:
            assert observations[f"echo.{name}"] == got
    assert isinstance(observations["points"], UnsupportedSpec)
    assert actions["levels"].dtype == np.uint8 and actions["grid"].dtype == np.int8
    nested = dict_space({k: v for k, v in actions.items()}, nested=True)
    assert set(nested["arm"].spaces) == {"x", "y"}


def test_actions_packed_by_us_come_back_exactly_from_the_official_server(official):
    """Sample each action space, flatten, check and pack with our code; the official server echoes the tensors."""
    from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm

    server, conn = official(episode_length=100)
    _, specs = join(conn)
    m = SpecManager({u: ours(s, pb.TensorSpec) for u, s in specs.actions.items()},
                    {u: ours(s, pb.TensorSpec) for u, s in specs.observations.items()})
    spaces = {name: space_from_spec(spec) for name, spec in m.actions.specs.items()}
    action_space = dict_space(spaces, nested=True)
    action_space.seed(7)
    echo_uids = [m.observations.uid(f"echo.{name}") for name in spaces]
    conn.send(dm.StepRequest())  # starts the sequence; actions would be ignored
    for i in range(5):
        action = action_space.sample()
        arrays = flatten_value(action_space, action)
        assert set(arrays) == set(spaces)
        request = pb.StepRequest(requested_observations=echo_uids)
        m.actions.pack(arrays, request.actions)
        response = conn.send(dm.StepRequest.FromString(request.SerializeToString()))
        observations = m.observations.unpack(
            {uid: ours(t, pb.Tensor) for uid, t in response.observations.items()})
        echoed = {name[len("echo."):]: value for name, value in observations.items()}
        for name, value in arrays.items():
            assert echoed[name].dtype.kind == value.dtype.kind
            np.testing.assert_array_equal(echoed[name], value, err_msg=name)
            official_view = server.received[-1][name]
            np.testing.assert_array_equal(official_view, value, err_msg=name)
        back = unflatten_value(action_space, echoed)
        assert action_space.contains(back)
    # Sparse: one action only.
    request = pb.StepRequest(requested_observations=echo_uids)
    m.actions.pack(flatten_value(action_space, {"paddle": np.int32(-1)}), request.actions)
    conn.send(dm.StepRequest.FromString(request.SerializeToString()))
    assert list(server.received[-1]) == ["paddle"] and server.received[-1]["paddle"] == -1


def test_official_observations_pass_our_checks(official):
    from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm

    _, conn = official(episode_length=100)
    _, specs = join(conn)
    m = SpecManager({u: ours(s, pb.TensorSpec) for u, s in specs.actions.items()},
                    {u: ours(s, pb.TensorSpec) for u, s in specs.observations.items()})
    checkers = m.observations.checkers
    for step in range(4):
        response = conn.send(dm.StepRequest(requested_observations=m.observations.uids))
        observations = m.observations.unpack({u: ours(t, pb.Tensor) for u, t in response.observations.items()})
        assert set(observations) == set(m.observations.specs)
        for name, value in observations.items():
            checkers[name].check(value, "observation")
        assert observations["points"].shape == (step % 3 + 1, 2)  # the -1 dimension varies
        assert observations["title"] == f"step {step} ✓"


def test_default_values_fit_their_specs():
    from dmrpc_gym.protocol.wire import pb as ours_pb
    from official_servers import official_specs

    actions, observations = official_specs(UNUSUAL_SPECS)
    for spec in list(actions.values()) + list(observations.values()):
        ours_spec = ours(spec, ours_pb.TensorSpec)
        for step in range(6):
            value = default_value(spec, step)
            if spec.dtype == 10:  # STRING: object arrays of str
                value = value.astype(str)
            check_value(ours_spec, value, "observation")


def test_integer_bounds_at_the_dtypes_limits_admit_every_value_of_the_dtype_and_nothing_else():
    """[0, 255] on uint8 excludes nothing a uint8 can hold: checked by the cast alone (no scan)."""
    checker = SpecChecker(make_spec("frame", pb.UINT8, [16, 16], 0, 255))
    frame = np.arange(256, dtype=np.uint8).reshape(16, 16)
    assert checker.check(frame) is frame
    assert checker.minimum == 0 and checker.maximum == 255          # still reported as given
    assert checker.check(frame.astype(np.int64)).dtype == np.uint8
    with pytest.raises(ValueError, match="frame"):
        checker.check(np.full((16, 16), 256))                        # does not fit uint8
    half = SpecChecker(make_spec("level", pb.UINT8, [2], 0, 9))      # a real bound is still checked
    with pytest.raises(ValueError, match="above the maximum 9"):
        half.check(np.array([3, 10], np.uint8))
