"""Server reflection on our server (issue 34, item 2), with grpcio-reflection's client-side descriptor
database: the services listed, ``dm_env_rpc.v1.Environment`` resolved, and ``Process`` called through a
generic grpcio stream with request and response classes built from the served descriptors alone."""
from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from dmrpc_gym.protocol.wire import SERVICE
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.catch import Catch

reflection_db = pytest.importorskip("grpc_reflection.v1alpha.proto_reflection_descriptor_database",
                                    reason="grpcio-reflection (the test extra)")
from grpc_reflection.v1alpha import reflection_pb2  # noqa: E402

SERVICES = [SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"]


@pytest.fixture
def channel():
    with Server(Catch, token=None) as server:
        made = grpc.insecure_channel(server.address)
        yield made
        made.close()


def test_process_called_from_the_descriptors_alone(channel):
    database = reflection_db.ProtoReflectionDescriptorDatabase(channel)
    assert list(database.get_services()) == SERVICES
    pool = descriptor_pool.DescriptorPool(database)       # knows nothing but what the server says
    service = pool.FindServiceByName(SERVICE)
    process = service.FindMethodByName("Process")
    assert process.client_streaming and process.server_streaming
    Request = message_factory.GetMessageClass(process.input_type)
    Response = message_factory.GetMessageClass(process.output_type)
    assert Request.DESCRIPTOR.full_name == "dm_env_rpc.v1.EnvironmentRequest"

    call = channel.stream_stream(f"/{service.full_name}/{process.name}", request_serializer=Request.SerializeToString,
                                 response_deserializer=Response.FromString)
    created = list(call(iter([Request(create_world={"settings": {"rows": {"int32s": {"array": [5]}}}})]),
                        timeout=30))
    name = created[0].create_world.world_name
    assert name and not created[0].HasField("error")
    joined = list(call(iter([Request(join_world={"world_name": name}), Request(leave_world={})]), timeout=30))
    specs = joined[0].join_world.specs
    board = next(spec for spec in specs.observations.values() if spec.name == "board")
    assert list(board.shape) == [5, 10]                  # the world setting arrived: 5 rows (of 10 columns)
    step = Request(step={"requested_observations": list(specs.observations)})
    answers = list(call(iter([Request(join_world={"world_name": name}), step, step,
                              Request(leave_world={}), Request(destroy_world={"world_name": name})]), timeout=30))
    assert [a.WhichOneof("payload") for a in answers] == ["join_world", "step", "step", "leave_world",
                                                          "destroy_world"]
    observed = answers[2].step.observations
    assert set(observed) == set(specs.observations)
    assert list(observed[board_uid(specs)].shape) == [5, 10]
    assert answers[2].step.state == pool.FindEnumTypeByName("dm_env_rpc.v1.EnvironmentStateType") \
        .values_by_name["RUNNING"].number


def board_uid(specs) -> int:
    return next(uid for uid, spec in specs.observations.items() if spec.name == "board")


def test_every_served_file_resolves_with_its_dependencies(channel):
    database = reflection_db.ProtoReflectionDescriptorDatabase(channel)
    pool = descriptor_pool.DescriptorPool(database)
    assert pool.FindFileContainingSymbol("grpc.health.v1.Health").name == "grpc/health/v1/health.proto"
    assert pool.FindMessageTypeByName("dm_env_rpc.v1.extensions.properties.PropertyRequest")
    assert pool.FindMethodByName("grpc.reflection.v1alpha.ServerReflection.ServerReflectionInfo")
    tensor = pool.FindMessageTypeByName("dm_env_rpc.v1.Tensor")
    assert tensor.fields_by_name["protos"].message_type.fields_by_name["array"].message_type.full_name \
        == "google.protobuf.Any"
    with pytest.raises(KeyError):
        pool.FindMessageTypeByName("dmrpc_gym.v1.Tensor")      # our package names never travel


def ask(channel, path: str, *requests):
    call = channel.stream_stream(path, request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                                 response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
    return list(call(iter(requests), timeout=30))


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_both_versions_answer_in_turn_on_one_stream(channel, version):
    request = reflection_pb2.ServerReflectionRequest
    answers = ask(channel, f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                  request(host="h", list_services=""),
                  request(file_by_filename="dm_env_rpc/v1/extensions/properties.proto"),
                  request(file_containing_symbol="no.such.Symbol"),
                  request(all_extension_numbers_of_type="dm_env_rpc.v1.Tensor"),
                  request(file_containing_extension={"containing_type": "dm_env_rpc.v1.Tensor",
                                                     "extension_number": 100}),
                  request())
    assert [a.WhichOneof("message_response") for a in answers] == [
        "list_services_response", "file_descriptor_response", "error_response", "all_extension_numbers_response",
        "error_response", "error_response"]
    assert answers[0].valid_host == "h" and answers[0].original_request.list_services == ""
    assert [s.name for s in answers[0].list_services_response.service] == SERVICES
    files = [descriptor_pb2.FileDescriptorProto.FromString(raw)
             for raw in answers[1].file_descriptor_response.file_descriptor_proto]
    assert [f.name for f in files] == ["dm_env_rpc/v1/extensions/properties.proto", "dm_env_rpc/v1/dm_env_rpc.proto",
                                       "google/protobuf/any.proto"]
    assert files[0].package == "dm_env_rpc.v1.extensions.properties"
    assert answers[2].error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
    assert "no.such.Symbol" in answers[2].error_response.error_message
    assert answers[3].all_extension_numbers_response.base_type_name == "dm_env_rpc.v1.Tensor"
    assert not answers[3].all_extension_numbers_response.extension_number
    assert answers[4].error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
    assert answers[5].error_response.error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
