"""The Tensor codec: round trips of every DataType, and agreement with dm_env_rpc's own.

The official ``dm_env_rpc.v1.tensor_utils`` is the reference peer: what we pack
it reads identically, and what it packs we read identically (messages cross
between the two packages as serialized bytes, as they do on the wire).
"""
from __future__ import annotations

import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_rpc_pb2 as official_pb
from dm_env_rpc.v1 import tensor_utils
from google.protobuf import any_pb2
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dmrpc_gym.protocol import dtypes, tensors
from dmrpc_gym.protocol.wire import pb, props_pb

NUMERIC = ["float32", "float64", "int8", "int32", "int64", "uint8", "uint32", "uint64", "bool"]
DATA_TYPES = {  # numpy dtype name -> DataType
    "float32": pb.FLOAT, "float64": pb.DOUBLE, "int8": pb.INT8, "int32": pb.INT32,
    "int64": pb.INT64, "uint8": pb.UINT8, "uint32": pb.UINT32, "uint64": pb.UINT64,
    "bool": pb.BOOL, "str": pb.STRING, "proto": pb.PROTO,
}

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6)
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)
anys = st.builds(lambda name, value: any_pb2.Any(type_url=f"type.googleapis.com/test.{name}", value=value),
                 st.sampled_from(["A", "B", "C"]), st.binary(max_size=8))


@st.composite
def arrays(draw, kinds=tuple(DATA_TYPES), shape=shapes):
    """An array of any supported kind (numeric, str, or an object array of Any)."""
    kind = draw(st.sampled_from(kinds))
    if kind == "str":
        return draw(hnp.arrays(np.str_, shape, elements=texts))
    if kind == "proto":
        shp = draw(shape)
        out = np.empty(shp, dtype=object)
        for index in np.ndindex(*shp):
            out[index] = draw(anys)
        return out
    return draw(hnp.arrays(np.dtype(kind), shape))


def to_official(tensor: pb.Tensor) -> official_pb.Tensor:
    return official_pb.Tensor.FromString(tensor.SerializeToString())


def from_official(tensor: official_pb.Tensor) -> pb.Tensor:
    return pb.Tensor.FromString(tensor.SerializeToString())


def assert_same(got: np.ndarray, want) -> None:
    """Same dtype, shape and values (NaN equal to NaN, -0.0 distinct from 0.0)."""
    want = np.asarray(want)
    assert got.shape == want.shape
    if want.dtype == object:
        assert got.dtype == object
        assert [g.SerializeToString() for g in got.ravel()] == \
               [w.SerializeToString() for w in want.ravel()]
        return
    assert got.dtype.kind == want.dtype.kind
    if want.dtype.kind != "U":
        assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if want.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def owned(array: np.ndarray) -> bool:
    """Writable, and its memory belongs to the array (or to a buffer only it holds)."""
    base = array
    while isinstance(base, np.ndarray) and not base.flags.owndata:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return array.flags.writeable and (isinstance(base, np.ndarray) or type(base) is bytearray)


# -- round trips -------------------------------------------------------------

@FAST
@given(arrays())
def test_round_trip_every_dtype_and_shape(value):
    tensor = tensors.pack(value)
    kind = "proto" if value.dtype == object else "str" if value.dtype.kind == "U" else value.dtype.name
    assert tensor.WhichOneof("payload") == dtypes.BY_DATA_TYPE[DATA_TYPES[kind]].name
    assert list(tensor.shape) == list(value.shape)
    assert_same(tensors.unpack(tensor), value)
    # ... and through the wire.
    assert_same(tensors.unpack(pb.Tensor.FromString(tensor.SerializeToString())), value)
    assert pb.Tensor.FromString(tensors.tensor_bytes(value)) == tensor


@FAST
@given(arrays())
def test_official_reads_what_we_pack(value):
    ours = tensors.pack(value)
    theirs = tensor_utils.unpack_tensor(to_official(ours))
    assert_same(np.asarray(theirs, dtype=object if value.dtype == object else None), value)


@FAST
@given(arrays())
def test_we_read_what_official_packs(value):
    theirs = tensor_utils.pack_tensor(value)
    assert_same(tensors.unpack(from_official(theirs)), value)


@FAST
@given(arrays(kinds=tuple(NUMERIC) + ("str",)))
def test_serialization_is_byte_identical_to_official(value):
    assume(not (value.dtype.kind == "f" and np.isnan(value).any()))   # NaN payload bits may differ
    assert tensors.pack(value).SerializeToString() == \
        tensor_utils.pack_tensor(value).SerializeToString()


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint32", "uint64"])
@pytest.mark.parametrize("size", [1, 16, 17, 200])
@pytest.mark.parametrize("top", [127, 1 << 14, 1 << 28, 1 << 56, None])
def test_varint_widths_match_official(dtype, size, top):
    """Every varint width (1, 2, 4, 8, 10 bytes), on both sides of the small/numpy switch."""
    info = np.iinfo(dtype)
    low, high = (info.min, info.max) if top is None else (0, min(top, info.max))
    value = np.random.default_rng(size).integers(low, high, size, dtype=dtype, endpoint=True)
    value[0] = high          # the widest value sets the width
    ours = tensors.pack(value)
    assert ours.SerializeToString() == tensor_utils.pack_tensor(value).SerializeToString()
    assert_same(tensors.unpack(ours), value)


@pytest.mark.parametrize("value, data_type", [
    (1.5, pb.DOUBLE), (3, pb.INT64), (-3, pb.INT64), (2 ** 63, pb.UINT64), (True, pb.BOOL),
    ("hi", pb.STRING), (np.float32(-0.0), pb.FLOAT), (np.uint8(200), pb.UINT8),
    (np.int32(-7), pb.INT32), (np.uint64(2 ** 64 - 1), pb.UINT64), (np.bool_(False), pb.BOOL),
    (float("nan"), pb.DOUBLE), (np.int8(-128), pb.INT8), (np.str_("x"), pb.STRING),
])
def test_scalars_are_0d_and_match_official(value, data_type):
    tensor = tensors.pack(value)
    assert tensor.WhichOneof("payload") == dtypes.BY_DATA_TYPE[data_type].name
    assert list(tensor.shape) == []
    got = tensors.unpack(tensor)
    assert got.shape == ()
    assert got.dtype == tensors.DTYPES[data_type] or data_type == pb.STRING
    assert_same(got, np.asarray(value))
    assert tensor.SerializeToString() == tensor_utils.pack_tensor(value).SerializeToString()
    assert_same(tensors.unpack(from_official(tensor_utils.pack_tensor(value))), np.asarray(value))


def test_proto_messages_pack_as_any():
    request = props_pb.PropertyRequest(read_property=props_pb.ReadPropertyRequest(key="a.b"))
    tensor = tensors.pack(request)
    (packed,) = tensor.protos.array
    assert packed.type_url == "type.googleapis.com/dm_env_rpc.v1.extensions.properties.PropertyRequest"
    assert props_pb.PropertyRequest.FromString(packed.value) == request
    got = tensors.unpack(tensor)
    assert got.shape == () and got.dtype == object and got[()] == packed
    # A message of another package packs under its own name, Anys as they are.
    other = any_pb2.Any(type_url="x/y", value=b"1")
    assert tensors.pack([other, other], pb.PROTO).protos.array[1] == other
    assert tensors.pack(np.empty(0, dtype=object), pb.PROTO).WhichOneof("payload") == "protos"


def test_empty_string_and_proto_arrays_still_name_their_type():
    assert tensors.pack(np.array([], dtype=np.str_)).WhichOneof("payload") == "strings"
    assert tensors.unpack(tensors.pack(np.zeros((2, 0), dtype=np.str_))).shape == (2, 0)


@pytest.mark.parametrize("make", [
    lambda a: np.asfortranarray(a), lambda a: a[::-1, ::2], lambda a: a.T,
    lambda a: a.astype(a.dtype.newbyteorder(">")),
])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "uint64", "uint8", "bool"])
def test_non_contiguous_and_swapped_arrays_pack_row_major(make, dtype):
    value = make(np.arange(24).reshape(4, 6).astype(dtype))
    tensor = tensors.pack(value)
    assert tensor.SerializeToString() == tensor_utils.pack_tensor(value.astype(dtype)).SerializeToString()
    assert_same(tensors.unpack(tensor), value.astype(dtype))


# -- explicit dtypes -------------------------------------------------------------

@pytest.mark.parametrize("dtype_arg", [pb.FLOAT, np.float32, "float32", np.dtype("float32")])
def test_dtype_argument_takes_data_types_and_numpy_dtypes(dtype_arg):
    tensor = tensors.pack([1, 2, 3], dtype_arg)
    assert tensor.floats.array[:] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("value, dtype, want", [
    ([1, 2], pb.UINT8, np.array([1, 2], np.uint8)),
    ([1.0, -2.0], pb.INT32, np.array([1, -2], np.int32)),
    ([0, 1], pb.BOOL, np.array([False, True])),
    (np.array([True]), pb.INT64, np.array([1], np.int64)),
    (np.arange(3, dtype=np.int64), pb.DOUBLE, np.arange(3, dtype=np.float64)),
    (np.array(["a", "b"], dtype=object), pb.STRING, np.array(["a", "b"])),
    ([], pb.INT32, np.array([], np.int32)),
])
def test_lossless_conversions(value, dtype, want):
    assert_same(tensors.unpack(tensors.pack(value, dtype)), want)


@pytest.mark.parametrize("value, dtype, words", [
    (1.5, pb.INT32, ["float64", "INT32", "1.5"]),
    ([0, 300], pb.UINT8, ["UINT8", "300", "[1]"]),
    (-1, np.uint32, ["UINT32", "-1"]),
    ([0, 2], pb.BOOL, ["BOOL", "2"]),
    (float("nan"), pb.INT64, ["INT64", "nan"]),
    (2 ** 40, pb.INT32, ["INT32"]),
])
def test_lossy_conversions_are_refused(value, dtype, words):
    with pytest.raises(ValueError) as err:
        tensors.pack(value, dtype)
    for word in words:
        assert word in str(err.value)


# -- shapes: broadcast and -1 ----------------------------------------------------------

@FAST
@given(arrays(kinds=tuple(NUMERIC) + ("str", "proto"), shape=hnp.array_shapes(min_dims=1, max_dims=3)),
       st.data())
def test_broadcast_single_element(value, data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    one = tensors.pack(value.ravel()[:1])
    one.shape[:] = shape
    got = tensors.unpack(one)
    want = np.empty(shape, value.dtype)
    for index in np.ndindex(*shape):
        want[index] = value.ravel()[0]
    assert_same(got, want)
    if value.dtype == object:   # each cell its own message
        cells = got.ravel()
        assert len({id(c) for c in cells}) == cells.size
    if 0 not in shape:          # the official reader turns 0 dims into 1 when broadcasting
        assert_same(np.asarray(tensor_utils.unpack_tensor(to_official(one)), dtype=got.dtype), want)


@FAST
@given(arrays(shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=4)), st.data())
def test_one_unknown_dimension(value, data):
    axis = data.draw(st.integers(0, value.ndim - 1))
    tensor = tensors.pack(value)
    tensor.shape[axis] = -1
    known = int(np.prod([d for i, d in enumerate(value.shape) if i != axis]))
    got = tensors.unpack(tensor)
    if known == 0:        # nothing to infer from: the unknown dimension is empty too
        assert got.shape == tuple(0 if i == axis else d for i, d in enumerate(value.shape))
        return
    if value.size == 1:
        assert got.shape == value.shape
    assert_same(got, value)
    theirs = tensor_utils.unpack_tensor(to_official(tensor))
    assert_same(np.asarray(theirs, dtype=object if value.dtype == object else None), value)


@pytest.mark.parametrize("shape, size, want", [
    ([2, -1], 6, (2, 3)), ([-1], 0, (0,)), ([-1, 3], 1, (1, 3)), ([4, -1], 1, (4, 1)),
    ([0, -1], 0, (0, 0)), ([], 1, ()), ([2, 3], 1, (2, 3)), ([2, 0], 1, (2, 0)),
])
def test_resolve_shape(shape, size, want):
    assert tensors.resolve_shape(shape, size) == want


# -- errors ----------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    np.zeros(3, np.float16), np.zeros(3, np.int16), np.zeros(3, np.uint16),
    np.zeros(2, np.complex64), np.zeros(2, np.complex128), np.array([object(), 1], dtype=object),
    np.zeros(2, "datetime64[s]"), np.array([b"ab"]),
])
def test_unsupported_dtypes_name_the_dtype_and_what_is_supported(value):
    with pytest.raises(TypeError) as err:
        tensors.pack(value)
    message = str(err.value)
    assert str(value.dtype) in message or "object" in message
    assert "float32" in message or "protobuf messages" in message


def test_data_type_errors():
    with pytest.raises(TypeError, match="float16.*supported"):
        tensors.data_type(np.float16)
    with pytest.raises(TypeError, match="object"):
        tensors.data_type(object)
    assert tensors.pack([], np.object_).WhichOneof("payload") == "protos"
    with pytest.raises(ValueError, match="INVALID_DATA_TYPE"):
        tensors.np_dtype(pb.INVALID_DATA_TYPE)
    with pytest.raises(ValueError, match="INVALID_DATA_TYPE"):
        tensors.pack(1, pb.INVALID_DATA_TYPE)
    with pytest.raises(ValueError, match="99"):
        tensors.pack(1, 99)
    with pytest.raises(TypeError, match="STRING"):
        tensors.pack([1, 2], pb.STRING)
    with pytest.raises(TypeError, match="FLOAT"):
        tensors.pack(["a"], pb.FLOAT)
    with pytest.raises(TypeError, match="protobuf messages"):
        tensors.pack([1], pb.PROTO)
    with pytest.raises(TypeError, match="object array"):
        tensors.pack(2 ** 64)


def test_ragged_values_are_refused():
    with pytest.raises(ValueError, match="cannot pack list"):
        tensors.pack([[1, 2], [3]])


@pytest.mark.parametrize("tensor, words", [
    (pb.Tensor(floats=pb.Tensor.FloatArray(array=[1, 2, 3]), shape=[2, 2]),
     ["FLOAT", "3 elements", "[2, 2]", "needs 4"]),
    (pb.Tensor(int32s=pb.Tensor.Int32Array(array=[1, 2, 3]), shape=[2, -1]),
     ["INT32", "3 elements", "[2, -1]", "multiple of 2"]),
    (pb.Tensor(uint8s=pb.Tensor.Uint8Array(array=b"\x01\x02"), shape=[]), ["UINT8", "2 elements", "[]"]),
    (pb.Tensor(doubles=pb.Tensor.DoubleArray(), shape=[]), ["DOUBLE", "0 elements"]),
    (pb.Tensor(bools=pb.Tensor.BoolArray(array=[True] * 4), shape=[-1, -1]), ["BOOL", "at most one -1"]),
    (pb.Tensor(bools=pb.Tensor.BoolArray(array=[True] * 4), shape=[-2, 2]), ["BOOL", "negative"]),
    (pb.Tensor(strings=pb.Tensor.StringArray(array=["a", "b"]), shape=[3]), ["STRING", "2 elements"]),
])
def test_payload_not_fitting_the_shape(tensor, words):
    with pytest.raises(ValueError) as err:
        tensors.unpack(tensor)
    for word in words:
        assert word in str(err.value)


def test_empty_tensor_has_no_payload():
    with pytest.raises(ValueError, match="no payload"):
        tensors.unpack(pb.Tensor(shape=[2]))
    with pytest.raises(ValueError, match="no payload"):
        tensors.unpack_flat(pb.TensorSpec.Value())


# -- ownership -------------------------------------------------------------------

@FAST
@given(arrays(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)))
def test_unpacked_arrays_are_writable_and_owned(value):
    tensor = tensors.pack(value)
    before = tensor.SerializeToString()
    got = tensors.unpack(tensor)
    assert owned(got)
    assert not np.shares_memory(got, tensors.unpack(tensor))
    # Mutating the result leaves the message alone.
    if got.dtype == object:
        got.ravel()[0].value = b"changed"
    else:
        got.reshape(-1)[0] = np.ones(1, got.dtype)[0] if got.dtype.kind != "U" else "changed"
        got[...] = got     # writes are allowed everywhere
    assert tensor.SerializeToString() == before
    assert_same(tensors.unpack(tensor), value)


@pytest.mark.parametrize("dtype", NUMERIC)
def test_broadcast_and_flat_results_are_owned(dtype):
    one = tensors.pack(np.ones(1, dtype))
    one.shape[:] = [2, 3]
    assert owned(tensors.unpack(one))
    assert owned(tensors.unpack_flat(one))


def test_packing_copies_the_input():
    value = np.arange(6, dtype=np.uint8)
    tensor = tensors.pack(value)
    value[:] = 0
    assert tensor.uint8s.array == bytes(range(6))


# -- pack_into, bounds -------------------------------------------------------------

def test_pack_into_overwrites_a_map_entry():
    request = pb.StepRequest()
    tensors.pack_into(request.actions[3], np.arange(4, dtype=np.float32).reshape(2, 2))
    tensors.pack_into(request.actions[3], 5)
    assert request.actions[3].WhichOneof("payload") == "int64s"
    assert list(request.actions[3].shape) == []
    assert_same(tensors.unpack(request.actions[3]), np.asarray(5))
    tensors.pack_into(request.actions[3], [1.5, 2.5], pb.FLOAT)
    assert_same(tensors.unpack(request.actions[3]), np.array([1.5, 2.5], np.float32))


def test_pack_into_leaves_the_tensor_alone_when_the_value_is_refused():
    tensor = tensors.pack([1, 2])
    with pytest.raises(ValueError):
        tensors.pack_into(tensor, [1.5], pb.INT32)
    assert_same(tensors.unpack(tensor), np.array([1, 2]))


@pytest.mark.parametrize("dtype", NUMERIC[:-1])    # bounds have no bool payload
def test_pack_flat_into_spec_bounds(dtype):
    values = np.arange(40).astype(dtype)     # past the small-array switch too
    spec = pb.TensorSpec(dtype=DATA_TYPES[dtype], shape=[40])
    tensors.pack_flat_into(spec.max, [9], DATA_TYPES[dtype])
    tensors.pack_flat_into(spec.max, values, DATA_TYPES[dtype])    # replaces, not appends
    assert_same(tensors.unpack_flat(spec.max), values)
    official = official_pb.TensorSpec.FromString(spec.SerializeToString())
    assert_same(tensor_utils.unpack_proto(official.max), values)
    with pytest.raises(ValueError):
        tensors.pack_flat_into(spec.min, [1.5], pb.INT32)


def test_dtype_tables():
    assert set(tensors.DTYPES) == set(DATA_TYPES.values())
    for name, dt in DATA_TYPES.items():
        if name not in ("str", "proto"):
            assert tensors.data_type(np.dtype(name)) == dt
            assert tensors.np_dtype(dt) == np.dtype(name)
            assert tensors.data_type(np.dtype(name).newbyteorder(">")) == dt
    assert tensors.data_type(np.dtype("<U3")) == pb.STRING
    assert tensors.data_type_name(pb.UINT64) == "UINT64"
    assert tensors.data_type_name(42) == "42"
