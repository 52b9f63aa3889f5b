"""Our generated wire format: current, coexisting with dm-env-rpc, and wire-identical to it."""
from __future__ import annotations

import configparser
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest
from dm_env_rpc.v1 import dm_env_rpc_pb2 as official_pb
from dm_env_rpc.v1.extensions import properties_pb2 as official_props
from google.protobuf import any_pb2
from grpc_health.v1 import health_pb2 as official_health
from grpc_reflection.v1alpha import reflection_pb2 as official_reflection
from google.protobuf.descriptor import FieldDescriptor

from dmrpc_gym.protocol import wire
from dmrpc_gym.protocol._proto import health_pb2, reflection_pb2
from dmrpc_gym.protocol.wire import pb, props_pb

ROOT = pathlib.Path(__file__).resolve().parents[2]
GENERATED = sorted((ROOT / "dmrpc_gym" / "protocol" / "_proto").glob("*_pb2.py"))

# (ours, official) top-level messages: everything on the wire is reachable from these.
PAIRS = [
    (pb.EnvironmentRequest, official_pb.EnvironmentRequest),
    (pb.EnvironmentResponse, official_pb.EnvironmentResponse),
    (props_pb.PropertyRequest, official_props.PropertyRequest),
    (props_pb.PropertyResponse, official_props.PropertyResponse),
    # health checking and server reflection (issue 34): against grpcio-health-checking and grpcio-reflection
    (health_pb2.HealthCheckRequest, official_health.HealthCheckRequest),
    (health_pb2.HealthCheckResponse, official_health.HealthCheckResponse),
    (reflection_pb2.ServerReflectionRequest, official_reflection.ServerReflectionRequest),
    (reflection_pb2.ServerReflectionResponse, official_reflection.ServerReflectionResponse),
]
PAIR_IDS = [ours.DESCRIPTOR.name for ours, _ in PAIRS]


# -- (a) the generated modules are current ----------------------------------------

def test_generated_modules_match_the_protos(tmp_path):
    spec = importlib.util.spec_from_file_location("_generate", ROOT / "protos" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    fresh = generate.generate(tmp_path)
    assert [p.name for p in fresh] == [p.name for p in GENERATED] == ["dm_env_rpc_pb2.py", "health_pb2.py", "properties_pb2.py",
                                                                  "reflection_pb2.py"]
    for new, checked_in in zip(fresh, GENERATED):
        assert new.read_bytes() == checked_in.read_bytes(), \
            f"{checked_in.relative_to(ROOT)} is stale: run `python protos/generate.py`"


# -- (b) both packages in one process ----------------------------------------------

OFFICIAL_IMPORTS = "import dm_env_rpc.v1.dm_env_rpc_pb2, dm_env_rpc.v1.extensions.properties_pb2"
OUR_IMPORTS = ("import dmrpc_gym, dmrpc_gym.protocol._proto.dm_env_rpc_pb2, dmrpc_gym.protocol._proto.properties_pb2, "
               "dmrpc_gym.protocol.wire, dmrpc_gym.protocol.tensors")
USE_BOTH = """
from google.protobuf import descriptor_pool
from dm_env_rpc.v1 import dm_env_rpc_pb2 as o
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.protocol import tensors
pool = descriptor_pool.Default()
assert pool.FindMessageTypeByName("dm_env_rpc.v1.Tensor") is o.Tensor.DESCRIPTOR
assert pool.FindMessageTypeByName("dmrpc_gym.v1.Tensor") is pb.Tensor.DESCRIPTOR
data = tensors.pack([1.5, 2.5]).SerializeToString()
assert list(o.Tensor.FromString(data).doubles.array) == [1.5, 2.5]
print("ok")
"""


@pytest.mark.parametrize("first, second", [(OFFICIAL_IMPORTS, OUR_IMPORTS), (OUR_IMPORTS, OFFICIAL_IMPORTS)],
                         ids=["official-first", "ours-first"])
def test_both_packages_import_in_one_process(first, second):
    done = subprocess.run([sys.executable, "-c", f"{first}\n{second}\n{USE_BOTH}"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# -- (c) wire identity ------------------------------------------------------------------

def wire_shape(message, seen=None) -> dict:
    """What a message looks like on the wire, recursively; message names left out."""
    seen = set() if seen is None else seen
    if message.full_name in seen:
        return {"recursive": message.name}
    seen = seen | {message.full_name}
    fields = {}
    for f in message.fields:
        fields[f.number] = {
            "name": f.name, "type": f.type, "repeated": f.is_repeated, "packed": f.is_packed,
            "oneof": f.containing_oneof.name if f.containing_oneof else None,
            "message": wire_shape(f.message_type, seen) if f.type == FieldDescriptor.TYPE_MESSAGE else None,
            "enum": {v.name: v.number for v in f.enum_type.values} if f.enum_type else None,
        }
    return fields


@pytest.mark.parametrize("ours, theirs", PAIRS, ids=PAIR_IDS)
def test_descriptors_are_wire_identical(ours, theirs):
    assert wire_shape(ours.DESCRIPTOR) == wire_shape(theirs.DESCRIPTOR)


def test_enums_and_method_path_match():
    for name in ("DataType", "EnvironmentStateType"):
        ours = {v.name: v.number for v in pb.DESCRIPTOR.enum_types_by_name[name].values}
        theirs = {v.name: v.number for v in official_pb.DESCRIPTOR.enum_types_by_name[name].values}
        assert ours == theirs
    service = official_pb.DESCRIPTOR.services_by_name["Environment"]
    assert wire.METHOD_PATH == f"/{service.full_name}/{service.methods_by_name['Process'].name}"


# Every field set, by the same rules on both sides: a message filled from its
# descriptor alone, so two wire-identical descriptors give the same bytes.
VALUES = {
    FieldDescriptor.TYPE_DOUBLE: lambda k: 2.25 + k, FieldDescriptor.TYPE_FLOAT: lambda k: 1.5 + k,
    FieldDescriptor.TYPE_INT32: lambda k: -3 - k, FieldDescriptor.TYPE_INT64: lambda k: -(2 ** 40) - k,
    FieldDescriptor.TYPE_UINT32: lambda k: 2 ** 31 + k, FieldDescriptor.TYPE_UINT64: lambda k: 2 ** 63 + k,
    FieldDescriptor.TYPE_BOOL: lambda k: True, FieldDescriptor.TYPE_STRING: lambda k: f"s{k}\u00e9",
    FieldDescriptor.TYPE_BYTES: lambda k: bytes([k, 255, 0]),
}


def populate(message, choice: int, depth: int = 0) -> None:
    """Set every field of ``message`` (oneofs: variant number ``choice``, cycling)."""
    if depth > 6:
        return
    chosen = {o.name: o.fields[choice % len(o.fields)].name for o in message.DESCRIPTOR.oneofs}
    for f in sorted(message.DESCRIPTOR.fields, key=lambda f: f.number):
        if f.containing_oneof is not None and chosen[f.containing_oneof.name] != f.name:
            continue
        k = choice + f.number
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            entries = getattr(message, f.name)
            key_type = f.message_type.fields_by_name["key"].type
            for i in range(2):
                populate(entries[VALUES[key_type](k + i)], choice + i + 1, depth + 1)
        elif f.type == FieldDescriptor.TYPE_ENUM:
            values = [v.number for v in f.enum_type.values]
            getattr(message, f.name).extend(values) if f.is_repeated else setattr(message, f.name, values[-1])
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            if f.is_repeated:
                for i in range(2):
                    populate(getattr(message, f.name).add(), choice + i, depth + 1)
            else:
                sub = getattr(message, f.name)
                sub.SetInParent()
                populate(sub, choice, depth + 1)
        elif f.is_repeated:
            getattr(message, f.name).extend([VALUES[f.type](k), VALUES[f.type](k + 1)])
        else:
            setattr(message, f.name, VALUES[f.type](k))


@pytest.mark.parametrize("ours, theirs", PAIRS, ids=PAIR_IDS)
def test_populated_messages_are_byte_identical_both_ways(ours, theirs):
    variants = max((len(o.fields) for o in ours.DESCRIPTOR.oneofs), default=1)
    for choice in range(max(variants, 11)):       # every envelope variant, every Tensor payload
        mine, official = ours(), theirs()
        populate(mine, choice)
        populate(official, choice)
        data = mine.SerializeToString(deterministic=True)
        assert data == official.SerializeToString(deterministic=True)
        for cls, other_cls in ((theirs, ours), (ours, theirs)):
            parsed = cls.FromString(data)
            parsed.DiscardUnknownFields()            # anything not understood would vanish here
            assert parsed.SerializeToString(deterministic=True) == data
            back = other_cls.FromString(parsed.SerializeToString())
            assert back.SerializeToString(deterministic=True) == data


# -- (d) the declared protobuf floor is what the generated code requires ----------

def declared_protobuf_floor() -> tuple[int, ...]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    requires = config["options"]["install_requires"]
    (floor,) = re.findall(r"^\s*protobuf\s*>=\s*([\d.]+)\s*$", requires, flags=re.M)
    return tuple(int(x) for x in floor.split("."))


@pytest.mark.parametrize("path", GENERATED, ids=[p.name for p in GENERATED])
def test_declared_protobuf_floor_matches_generated_code(path):
    found = re.search(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,"
                      r"\s*(\d+),\s*(\d+),\s*(\d+),", path.read_text())
    assert found, f"{path.name} has no runtime version check"
    required = tuple(int(x) for x in found.groups())
    assert declared_protobuf_floor() == required


# -- (e) properties messages in Any ------------------------------------------------------

def test_pack_any_is_read_by_the_official_any_unpack():
    request = props_pb.PropertyRequest(write_property=props_pb.WritePropertyRequest(
        key="physics.gravity", value=pb.Tensor(doubles=pb.Tensor.DoubleArray(array=[-9.8]))))
    packed = wire.pack_any(request)
    assert packed.type_url == "type.googleapis.com/dm_env_rpc.v1.extensions.properties.PropertyRequest"
    official = official_props.PropertyRequest()
    assert official_any(packed).Unpack(official)
    assert official.write_property.key == "physics.gravity"
    assert list(official.write_property.value.doubles.array) == [-9.8]
    assert not official_any(packed).Unpack(official_props.PropertyResponse())


def test_unpack_any_reads_the_official_any_pack():
    response = official_props.PropertyResponse(list_property=official_props.ListPropertyResponse(
        values=[official_props.PropertySpec(spec=official_pb.TensorSpec(name="a", dtype=official_pb.INT32),
                                            is_readable=True, description="d")]))
    packed = any_pb2.Any()
    packed.Pack(response)
    ours = wire.unpack_any(packed, props_pb.PropertyResponse)
    assert ours is not None
    (spec,) = ours.list_property.values
    assert (spec.spec.name, spec.spec.dtype, spec.is_readable, spec.description) == ("a", pb.INT32, True, "d")
    assert wire.unpack_any(packed, props_pb.PropertyRequest) is None
    # Our own full names are understood too.
    ours_packed = any_pb2.Any()
    ours_packed.Pack(props_pb.PropertyResponse())
    assert wire.unpack_any(ours_packed, props_pb.PropertyResponse) == props_pb.PropertyResponse()


def official_any(packed: any_pb2.Any) -> any_pb2.Any:
    """The Any as the official side receives it: through bytes."""
    return any_pb2.Any.FromString(packed.SerializeToString())
