"""TensorSpec <-> gymnasium space, both directions, and value flattening through the real codec."""
from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest
from spec_builders import make_spec
from gymnasium import spaces as gs
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from dmrpc_gym.protocol import tensors
from dmrpc_gym.spaces import (
    TEXT_MAX_LENGTH, PrintableText, UnsupportedSpec, dict_space, flatten_value, space_from_spec,
    specs_from_space, unflatten_value, value_codec,
)
from dmrpc_gym.protocol.specs import check_value
from dmrpc_gym.protocol.wire import pb


def same_space(a, b):
    """Equal as gymnasium sees it, and with the same dtype (Box.__eq__ compares bounds with allclose)."""
    return a == b and a.dtype == b.dtype and type(a) is type(b)


I64 = np.iinfo(np.int64)

# spec -> the exact space it must map to.
SPEC_CASES = {
    "per-element float bounds": (
        make_spec("pos", pb.FLOAT, [3], [-1, -2, -3], [1, 2, 3]),
        gs.Box(np.array([-1, -2, -3], np.float32), np.array([1, 2, 3], np.float32), (3,), np.float32)),
    "int32 scalar with min -1": (
        make_spec("move", pb.INT32, [], -1, 1), gs.Discrete(3, start=-1, dtype=np.int32)),
    "uint8 image, no bounds": (
        make_spec("rgb", pb.UINT8, [8, 6, 3]), gs.Box(0, 255, (8, 6, 3), np.uint8)),
    "uint8 image with bounds": (
        make_spec("rgb", pb.UINT8, [8, 6, 3], 0, 200), gs.Box(0, 200, (8, 6, 3), np.uint8)),
    "bool array": (make_spec("mask", pb.BOOL, [2, 3]), gs.MultiBinary((2, 3))),
    "bool scalar": (make_spec("flag", pb.BOOL), gs.Discrete(2)),
    "uint8 array with per-element maxima": (
        make_spec("levels", pb.UINT8, [4], 0, [1, 2, 3, 9]),
        gs.MultiDiscrete(np.array([2, 3, 4, 10], np.uint8), dtype=np.uint8)),
    "double scalar in [0, 1]": (
        make_spec("level", pb.DOUBLE, [], 0.0, 1.0), gs.Box(0.0, 1.0, (), np.float64)),
    "unbounded int64": (
        make_spec("count", pb.INT64), gs.Box(I64.min, I64.max, (), np.int64)),
    "int8 2-D per-element bounds": (
        make_spec("grid", pb.INT8, [2, 2], [[-1, -2], [-3, 0]], [[1, 2], [3, 0]]),
        gs.MultiDiscrete(np.array([[3, 5], [7, 1]], np.int8), dtype=np.int8,
                         start=np.array([[-1, -2], [-3, 0]], np.int8))),
    "unbounded float": (
        make_spec("x", pb.FLOAT, [2]), gs.Box(-np.inf, np.inf, (2,), np.float32)),
    "float with only a minimum": (
        make_spec("x", pb.DOUBLE, [2], 0.5), gs.Box(0.5, np.inf, (2,), np.float64)),
    "int with only a maximum": (
        make_spec("x", pb.INT32, [], None, 7), gs.Box(np.iinfo(np.int32).min, 7, (), np.int32)),
    "uint8 scalar full range (count 256 overflows uint8)": (
        make_spec("b", pb.UINT8, [], 0, 255), gs.Box(0, 255, (), np.uint8)),
    "uint8 scalar 0..254": (make_spec("b", pb.UINT8, [], 0, 254), gs.Discrete(255, dtype=np.uint8)),
    "int64 array full range": (
        make_spec("b", pb.INT64, [2], I64.min, I64.max), gs.Box(I64.min, I64.max, (2,), np.int64)),
    "uint64 scalar with bounds": (
        make_spec("b", pb.UINT64, [], 5, 2**64 - 2), gs.Discrete(2**64 - 6, start=5, dtype=np.uint64)),
    "int bounds sent as doubles": (
        make_spec("b", pb.INT32, [], -2.0, 2.0, bound_dtype=pb.DOUBLE), gs.Discrete(5, start=-2, dtype=np.int32)),
    "broadcast int bound on array": (
        make_spec("b", pb.INT32, [3], 0, 4), gs.MultiDiscrete(np.full(3, 5, np.int32), dtype=np.int32)),
    "zero-size int array": (
        make_spec("b", pb.INT32, [0], 0, 4), gs.MultiDiscrete(np.zeros(0, np.int32) + 5, dtype=np.int32)),
}


@pytest.mark.parametrize("case", list(SPEC_CASES))
def test_space_from_spec_exact(case):
    spec, expected = SPEC_CASES[case]
    got = space_from_spec(spec)
    assert same_space(got, expected), f"{case}: {got!r} != {expected!r}"
    if isinstance(expected, (gs.Box, gs.MultiDiscrete)):
        assert got.shape == expected.shape
    if isinstance(expected, gs.Box):
        np.testing.assert_array_equal(got.low, expected.low)
        np.testing.assert_array_equal(got.high, expected.high)


def test_string_scalar_is_printable_text():
    space = space_from_spec(make_spec("text", pb.STRING))
    assert isinstance(space, gs.Text) and isinstance(space, PrintableText)
    assert (space.min_length, space.max_length) == (0, TEXT_MAX_LENGTH)
    for text in ["", "hello", "tab\tnew\nline\r", "héllo wörld", "日本語", "🙂👨‍👩‍👧", "a" * TEXT_MAX_LENGTH]:
        assert space.contains(text), repr(text)
    for bad in ["\x00", "bell\x07", "\ud800", "\ue000", "a" * (TEXT_MAX_LENGTH + 1), b"bytes", 3]:
        assert not space.contains(bad), repr(bad)


def test_printable_text_sampling_seeding_pickling_and_copies():
    space = PrintableText(20, min_length=2, seed=3)
    first = [space.sample() for _ in range(5)]
    assert all(space.contains(s) and 2 <= len(s) <= 20 for s in first)
    again = PrintableText(20, min_length=2, seed=3)
    assert [again.sample() for _ in range(5)] == first
    data = pickle.dumps(space)
    assert len(data) < 10_000  # the charset tables stay out of pickles
    loaded = pickle.loads(data)
    assert loaded == space and loaded.contains("ünïcode ✓")
    twin = copy.deepcopy(space)
    assert twin.sample() == space.sample()  # the RNG state travels with a copy
    assert space == gs.Text(20, min_length=2, charset=space.character_set)
    assert repr(space) == "PrintableText(2, 20)"


@pytest.mark.parametrize("spec, reason", [
    (make_spec("chars", pb.FLOAT, [3, -1]), "'chars': shape [3, -1] has a variable-size (-1) dimension"),
    (make_spec("who", pb.PROTO), "'who': PROTO tensors have no gymnasium space"),
    (make_spec("names", pb.STRING, [2]), "'names': string arrays (shape [2]) have no gymnasium space"),
])
def test_unsupported_specs(spec, reason):
    with pytest.raises(UnsupportedSpec) as info:
        space_from_spec(spec)
    assert reason in str(info.value)
    assert isinstance(info.value, ValueError)


def test_malformed_spec_is_a_plain_value_error():
    with pytest.raises(ValueError, match="observation spec 'x': min 3 is greater than max 1") as info:
        space_from_spec(make_spec("x", pb.INT32, [], 3, 1))
    assert not isinstance(info.value, UnsupportedSpec)


# -- space -> specs ----------------------------------------------------------------

def bounds(spec, field):
    value = getattr(spec, field)
    if not spec.HasField(field):
        return None
    return tensors.unpack_flat(value).tolist()


def test_specs_from_box():
    spec = specs_from_space(gs.Box(0.0, 1.0, (2, 3)), "level")["level"]
    assert (spec.name, spec.dtype, list(spec.shape)) == ("level", pb.FLOAT, [2, 3])
    assert bounds(spec, "min") == [0.0] and bounds(spec, "max") == [1.0]  # all equal: one scalar

    per = specs_from_space(gs.Box(np.array([-1.0, -2.0]), np.array([1.0, 2.0]), dtype=np.float64), "p")["p"]
    assert per.dtype == pb.DOUBLE and bounds(per, "min") == [-1.0, -2.0] and bounds(per, "max") == [1.0, 2.0]

    free = specs_from_space(gs.Box(-np.inf, np.inf, (4,)), "f")["f"]
    assert not free.HasField("min") and not free.HasField("max")

    half = specs_from_space(gs.Box(np.array([0.0, -np.inf], np.float32), np.inf, (2,)), "h")["h"]
    assert bounds(half, "min") == [0.0, -np.inf] and not half.HasField("max")

    ints = specs_from_space(gs.Box(0, 255, (8, 6, 3), np.uint8), "rgb")["rgb"]
    assert ints.dtype == pb.UINT8 and bounds(ints, "min") == [0] and bounds(ints, "max") == [255]


def test_specs_from_discrete_multidiscrete_multibinary_text():
    d = specs_from_space(gs.Discrete(3, start=-1), "move")["move"]
    assert (d.dtype, list(d.shape), bounds(d, "min"), bounds(d, "max")) == (pb.INT64, [], [-1], [1])
    d8 = specs_from_space(gs.Discrete(4, dtype=np.uint8), "b")["b"]
    assert (d8.dtype, bounds(d8, "min"), bounds(d8, "max")) == (pb.UINT8, [0], [3])
    md = specs_from_space(gs.MultiDiscrete([[2, 3], [4, 5]], start=[[0, -1], [1, 2]]), "m")["m"]
    assert (md.dtype, list(md.shape)) == (pb.INT64, [2, 2])
    assert bounds(md, "min") == [0, -1, 1, 2] and bounds(md, "max") == [1, 1, 4, 6]
    same = specs_from_space(gs.MultiDiscrete([3, 3, 3]), "m")["m"]
    assert bounds(same, "min") == [0] and bounds(same, "max") == [2]
    mb = specs_from_space(gs.MultiBinary([2, 4]), "mb")["mb"]
    assert (mb.dtype, list(mb.shape), mb.HasField("min")) == (pb.BOOL, [2, 4], False)
    text = specs_from_space(gs.Text(5), "t")["t"]
    assert (text.dtype, list(text.shape)) == (pb.STRING, [])


def test_specs_from_dict_and_tuple_use_dotted_names():
    space = gs.Dict({
        "pos": gs.Dict({"x": gs.Box(-1, 1), "y": gs.Box(-1, 1)}),
        "pair": gs.Tuple((gs.Discrete(2), gs.MultiBinary(3))),
        "hp": gs.Discrete(10),
    })
    specs = specs_from_space(space)
    assert list(specs) == ["hp", "pair.0", "pair.1", "pos.x", "pos.y"]
    assert all(spec.name == name for name, spec in specs.items())
    prefixed = specs_from_space(gs.Tuple((gs.Discrete(2), gs.Discrete(3))), "act")
    assert list(prefixed) == ["act.0", "act.1"]
    bare = specs_from_space(gs.Discrete(2))
    assert list(bare) == [""]


def test_specs_are_fresh_copies():
    space = gs.Discrete(3)
    a = specs_from_space(space, "a")["a"]
    a.name = "changed"
    assert specs_from_space(space, "a")["a"].name == "a"


@pytest.mark.parametrize("space, dt", [
    (gs.Box(-1, 1, (2,), np.float16), pb.FLOAT),
    (gs.Box(-5, 5, (2,), np.int16), pb.INT32),
    (gs.Discrete(7, dtype=np.uint16), pb.UINT32),
    (gs.MultiDiscrete([3, 4], dtype=np.int16), pb.INT32),
])
def test_unsupported_numpy_dtypes_widen(space, dt):
    (spec,) = specs_from_space(space, "w").values()
    assert spec.dtype == dt
    value = space.sample()
    arrays = flatten_value(space, value, "w")
    assert arrays["w"].dtype == tensors.np_dtype(dt)
    back = unflatten_value(space, {"w": tensors.unpack(tensors.pack(arrays["w"]))}, "w")
    assert space.contains(back) and np.asarray(back).dtype == space.dtype
    np.testing.assert_array_equal(back, value)


def test_space_without_a_spec_and_name_clashes():
    with pytest.raises(TypeError, match="space 'g': Graph has no dm_env_rpc TensorSpec"):
        specs_from_space(gs.Graph(gs.Box(0, 1), None), "g")
    with pytest.raises(TypeError, match="'c': numpy dtype float128 has no dm_env_rpc DataType"):
        specs_from_space(gs.Box(0, 1, (2,), np.longdouble), "c")
    clash = gs.Dict({"a.b": gs.Discrete(2), "a": gs.Dict({"b": gs.Discrete(3)})})
    with pytest.raises(ValueError, match="both named 'a.b'"):
        specs_from_space(clash)


# -- round trips space -> specs -> space -------------------------------------------

ROUND_TRIPS = [
    # (served space, the space a client rebuilds from its specs)
    (gs.Box(-1.0, 1.0, (3,)), None),
    (gs.Box(np.array([0.0, -np.inf]), np.array([1.0, 5.0]), dtype=np.float64), None),
    (gs.Box(-np.inf, np.inf, (2, 2)), None),
    (gs.Box(0, 255, (8, 6, 3), np.uint8), None),
    (gs.Box(0, 255, (), np.uint8), None),
    (gs.Box(I64.min, I64.max, (2,), np.int64), None),
    (gs.Discrete(3, start=-1), None),
    (gs.Discrete(5, dtype=np.int8), None),
    (gs.MultiDiscrete([[2, 3], [4, 5]], start=[[0, -1], [1, 2]]), None),
    (gs.MultiBinary(4), None),
    (gs.MultiBinary((2, 3)), None),
    (gs.MultiBinary((4,)), gs.MultiBinary(4)),
    # Documented differences:
    (gs.Box(0, 4, (3,), np.int32), gs.MultiDiscrete(np.full(3, 5), dtype=np.int32)),
    (gs.Box(-2, 2, (), np.int64), gs.Discrete(5, start=-2)),
    (gs.Box(-1, 1, (2,), np.float16), gs.Box(-1, 1, (2,), np.float32)),
    (gs.Discrete(4, dtype=np.int16), gs.Discrete(4, dtype=np.int32)),
    (gs.Text(8), PrintableText()),
]


@pytest.mark.parametrize("served, expected", ROUND_TRIPS, ids=[repr(s) for s, _ in ROUND_TRIPS])
def test_round_trip_space_specs_space(served, expected):
    (spec,) = specs_from_space(served, "x").values()
    back = space_from_spec(spec)
    assert same_space(back, served if expected is None else expected), f"{back!r}"
    if expected is None or not isinstance(served, gs.Text):
        for _ in range(5):  # the rebuilt space admits what the served one produces
            value = served.sample()
            arrays = flatten_value(served, value, "x")
            assert back.contains(unflatten_value(back, arrays, "x"))


def test_round_trip_of_a_dict_rebuilds_the_nesting():
    served = gs.Dict({"pos": gs.Dict({"x": gs.Box(-1, 1), "y": gs.Box(-2, 2)}),
                      "n": gs.Discrete(3), "pair": gs.Tuple((gs.MultiBinary(2), gs.Discrete(2)))})
    specs = specs_from_space(served)
    named = {name: space_from_spec(spec) for name, spec in specs.items()}
    flat = dict_space(named)
    assert list(flat.spaces) == ["n", "pair.0", "pair.1", "pos.x", "pos.y"]
    nested = dict_space(named, nested=True)
    assert nested["pos"] == served["pos"] and nested["n"] == served["n"]
    assert list(nested["pair"].spaces) == ["0", "1"]  # a Tuple comes back as a Dict keyed "0", "1"
    # The client's codec over its nested Dict uses the server's spec names.
    assert set(value_codec(nested).names) == set(specs)
    value = served.sample()
    arrays = flatten_value(served, value)
    client_value = unflatten_value(nested, arrays)
    assert nested.contains(client_value)
    assert set(flatten_value(nested, client_value)) == set(specs)


#: gymnasium 1.2 adds Discrete's start and n in the space dtype, so ``contains`` is False for
#: every value of a Discrete that reaches the dtype's maximum (it overflows); 1.4 adds Python ints.
_DISCRETE_TOP_CONTAINED = gs.Discrete(2, start=126, dtype=np.int8).contains(np.int8(127))


@st.composite
def numeric_spaces(draw):
    kind = draw(st.sampled_from(["box_f", "box_i", "discrete", "multidiscrete"]))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0 if kind != "multidiscrete" else 1, max_size=3)))
    if kind == "box_f":
        dtype = draw(st.sampled_from([np.float32, np.float64]))
        lo = draw(st.floats(-1e6, 1e6, allow_nan=False, width=32))
        return gs.Box(lo, lo + draw(st.floats(0, 1e6, width=32)), shape, dtype)
    dtype = draw(st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint32, np.uint64]))
    info = np.iinfo(dtype)
    top = int(info.max) - (0 if _DISCRETE_TOP_CONTAINED else 1)  # a scalar comes back as a Discrete
    bottom = int(info.min)
    if kind == "box_i" and info.bits == 64:
        # gymnasium's Box.sample draws integers through float64: past 2**53 it fails
        # ("high - low < 0"), so 64-bit Boxes stay within 2**52; near there a sample may still
        # round out of its box, and the test skips such a sample (see assume() there).
        bottom, top = max(bottom, -2**52), min(top, 2**52)
    lo = draw(st.integers(bottom, top))
    hi = draw(st.integers(lo, min(top, lo + 1000)))
    if kind == "box_i":
        return gs.Box(lo, hi, shape, dtype)
    hi = min(hi, lo + int(info.max) - 1)  # gymnasium needs the count to fit the dtype
    if kind == "discrete":
        return gs.Discrete(hi - lo + 1, start=lo, dtype=dtype)
    return gs.MultiDiscrete(np.full(shape, hi - lo + 1), dtype=dtype, start=np.full(shape, lo))


@settings(max_examples=150, deadline=None)
@given(numeric_spaces(), st.integers(0, 2**32 - 1))
@example(gs.Box(2**52, 2**52, (), np.uint64), 0)     # its samples leave the box half the time
def test_round_trip_admits_the_same_values(served, seed):
    (spec,) = specs_from_space(served, "v").values()
    back = space_from_spec(spec)
    assert back.dtype == np.dtype(served.dtype) and back.shape == served.shape
    served.seed(seed)
    back.seed(seed)
    for space, other in ((served, back), (back, served)):
        value = space.sample()
        # gymnasium samples an integer Box through float64: at 2**52 (spacing 1) about half its
        # samples round one past the box (Box(2**52, 2**52).sample() is often 2**52 + 1). A value
        # outside the space is not one of its values to carry.
        assume(space.contains(value))
        arrays = flatten_value(space, value, "v")
        wire = {"v": tensors.unpack(tensors.pack(arrays["v"], spec.dtype))}
        assert other.contains(unflatten_value(other, wire, "v"))
        check_value(spec, arrays["v"], "observation")


# -- values -----------------------------------------------------------------------

VALUE_SPACES = {
    "box": gs.Box(-1, 1, (2, 3)),
    "box f64 scalar": gs.Box(0.0, 1.0, (), np.float64),
    "discrete start -1": gs.Discrete(3, start=-1),
    "discrete int32": gs.Discrete(5, dtype=np.int32),
    "multidiscrete": gs.MultiDiscrete([[2, 3], [4, 5]], start=[[0, -1], [1, 2]]),
    "multibinary": gs.MultiBinary((2, 2)),
    "text": gs.Text(10),
    "dict": gs.Dict({"pos": gs.Dict({"x": gs.Box(-1, 1), "y": gs.Box(-1, 1)}),
                     "name": gs.Text(4), "mask": gs.MultiBinary(3)}),
    "tuple": gs.Tuple((gs.Discrete(2, start=-1), gs.Box(0, 255, (4, 4, 3), np.uint8),
                       gs.Tuple((gs.MultiBinary(1), gs.Text(3))))),
}


def values_equal(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, str):
        return a == b
    return np.asarray(a).dtype == np.asarray(b).dtype and np.array_equal(a, b)


@pytest.mark.parametrize("case", list(VALUE_SPACES))
def test_flatten_unflatten_round_trip_over_the_wire(case):
    space = VALUE_SPACES[case]
    space.seed(1)
    specs = specs_from_space(space, "v")
    for _ in range(10):
        value = space.sample()
        arrays = flatten_value(space, value, "v")
        assert list(arrays) == list(specs)
        for name, arr in arrays.items():
            assert arr.dtype == tensors.np_dtype(specs[name].dtype) or arr.dtype.kind == tensors.np_dtype(specs[name].dtype).kind
            check_value(specs[name], arr, "observation")
        wire = {name: tensors.unpack(tensors.pack(arr, specs[name].dtype)) for name, arr in arrays.items()}
        back = unflatten_value(space, wire, "v")
        assert space.contains(back), f"{back!r} not in {space!r}"
        assert values_equal(back, value), f"{back!r} != {value!r}"


def test_unflatten_types():
    assert type(unflatten_value(gs.Discrete(3), {"": np.array(2)})) is np.int64
    got = unflatten_value(gs.Discrete(3, dtype=np.int32), {"": np.array(2, np.int32)})
    assert type(got) is np.int32 and got == 2
    # A bool scalar spec maps to Discrete(2): its bool arrays come back as the space's integers.
    assert unflatten_value(gs.Discrete(2), {"f": np.array(True)}, "f") == np.int64(1)
    mb = unflatten_value(gs.MultiBinary(3), {"": np.array([True, False, True])})
    assert mb.dtype == np.int8 and mb.tolist() == [1, 0, 1]
    assert unflatten_value(gs.Text(5), {"t": np.array("hi")}, "t") == "hi"
    box = unflatten_value(gs.Box(0, 1, (2, 2)), {"": np.array([0.5, 0.5, 0.5, 0.5], np.float32)})
    assert box.shape == (2, 2) and box.dtype == np.float32
    broadcast = unflatten_value(gs.Box(0, 1, (2, 2)), {"": np.array([0.5], np.float32)})
    assert broadcast.tolist() == [[0.5, 0.5], [0.5, 0.5]]


def test_flatten_python_values_to_spec_dtypes():
    arrays = flatten_value(gs.Box(-1, 1, (3,)), [0.1, 0.2, 0.3], "obs")
    assert arrays["obs"].dtype == np.float32 and arrays["obs"].tolist() == pytest.approx([0.1, 0.2, 0.3])
    d = flatten_value(gs.Discrete(3, dtype=np.int32), 2, "a")["a"]
    assert d.dtype == np.int32 and d.shape == () and d == 2
    mb = flatten_value(gs.MultiBinary(2), [1, 0], "m")["m"]
    assert mb.dtype == np.bool_ and mb.tolist() == [True, False]
    text = flatten_value(gs.Text(5), "abc", "t")["t"]
    assert text.dtype.kind == "U" and text.shape == () and str(text) == "abc"
    f16 = flatten_value(gs.Box(0, 1, (2,), np.float16), np.array([0.5, 1.0], np.float16), "h")["h"]
    assert f16.dtype == np.float32


def test_flatten_passes_lossy_values_on_for_check_value_to_report():
    space = gs.Discrete(3, dtype=np.int8)
    arrays = flatten_value(space, 0.5, "a")
    assert arrays["a"].dtype == np.float64  # not silently truncated to 0
    (spec,) = specs_from_space(space, "a").values()
    with pytest.raises(ValueError, match="action 'a': expected int8, got float64 value 0.5 that int8 cannot hold"):
        check_value(spec, arrays["a"])


def test_flatten_dict_is_sparse_and_rejects_unknown_keys():
    space = gs.Dict({"pos": gs.Dict({"x": gs.Box(-1, 1), "y": gs.Box(-1, 1)}), "fire": gs.Discrete(2)})
    assert list(flatten_value(space, {"fire": 1})) == ["fire"]
    assert list(flatten_value(space, {"pos": {"y": 0.5}})) == ["pos.y"]
    with pytest.raises(ValueError, match="'pos': unknown key 'z'; expected one of 'x', 'y'"):
        flatten_value(space, {"pos": {"z": 0.0}})
    with pytest.raises(ValueError, match="the value: unknown key 'jump'; expected one of 'fire', 'pos'"):
        flatten_value(space, {"jump": 1})
    with pytest.raises(ValueError, match="expected a mapping for a Dict space, got int"):
        flatten_value(space, 3)


def test_flatten_tuple_needs_every_element():
    space = gs.Tuple((gs.Discrete(2), gs.Discrete(3)))
    with pytest.raises(ValueError, match="'t': expected a sequence of 2 values for a Tuple space"):
        flatten_value(space, (1,), "t")
    assert list(flatten_value(space, [1, 2], "t")) == ["t.0", "t.1"]


def test_unflatten_missing_partial_and_bad_shape():
    space = gs.Dict({"pos": gs.Dict({"x": gs.Box(-1, 1), "y": gs.Box(-1, 1)}), "fire": gs.Discrete(2)})
    with pytest.raises(ValueError, match="no value for 'pos.y'"):
        unflatten_value(space, {"fire": np.array(1), "pos.x": np.array(0.0, np.float32)})
    part = unflatten_value(space, {"pos.x": np.array(0.5, np.float32)}, partial=True)
    assert list(part) == ["pos"] and list(part["pos"]) == ["x"] and part["pos"]["x"] == np.float32(0.5)
    with pytest.raises(ValueError, match=r"'b': expected shape \(2, 2\), got \(3,\)"):
        unflatten_value(gs.Box(0, 1, (2, 2)), {"b": np.zeros(3, np.float32)}, "b")


def test_codec_is_cached_per_space_and_released_with_it():
    import gc

    from dmrpc_gym.spaces import codec as mod

    space = gs.Box(0, 1, (2,))
    codec = value_codec(space, "x")
    assert value_codec(space, "x") is codec
    assert value_codec(space, "y") is not codec
    assert codec.names == ("x",) and list(codec.specs) == ["x"]
    before = len(mod._CODECS)
    del space, codec
    gc.collect()
    assert len(mod._CODECS) == before - 2


# -- dict_space ------------------------------------------------------------------

def test_dict_space_flat_and_nested():
    named = {"pos.x": gs.Discrete(2), "pos.y": gs.Discrete(3), "hp": gs.Box(0, 1), "a.b.c": gs.MultiBinary(1)}
    flat = dict_space(named)
    assert set(flat.spaces) == set(named)
    nested = dict_space(named, nested=True)
    assert nested == gs.Dict({"pos": gs.Dict({"x": gs.Discrete(2), "y": gs.Discrete(3)}),
                              "hp": gs.Box(0, 1),
                              "a": gs.Dict({"b": gs.Dict({"c": gs.MultiBinary(1)})})})
    with pytest.raises(ValueError, match="cannot nest 'pos.x': 'pos' is itself a spec"):
        dict_space({"pos": gs.Discrete(2), "pos.x": gs.Discrete(2)}, nested=True)
    with pytest.raises(ValueError, match="cannot nest 'pos': it is also the prefix"):
        dict_space({"pos.x": gs.Discrete(2), "pos": gs.Discrete(2)}, nested=True)


def test_spaces_from_official_specs_match():
    """Specs built with the official package (serialized across) map the same way."""
    from dm_env_rpc.v1 import dm_env_rpc_pb2 as official

    theirs = official.TensorSpec(name="paddle", dtype=official.DataType.INT32)
    theirs.min.int32s.array.append(-1)
    theirs.max.int32s.array.append(1)
    ours = pb.TensorSpec.FromString(theirs.SerializeToString())
    assert same_space(space_from_spec(ours), gs.Discrete(3, start=-1, dtype=np.int32))


def test_gymnasium_env_checker_accepts_text_values():
    """The spaces produced are real gymnasium spaces: gymnasium's own utilities accept them."""
    space = dict_space({"t": space_from_spec(make_spec("t", pb.STRING)),
                        "b": space_from_spec(make_spec("b", pb.FLOAT, [2], -1, 1))})
    assert space.contains({"t": "any ✓ text", "b": np.zeros(2, np.float32)})
    assert gym.spaces.utils.flatdim(space["b"]) == 2
