"""gRPC server reflection (``grpc.reflection.v1`` and ``v1alpha``) on our server.

``grpcurl``, gRPC GUIs and grpcio-reflection's descriptor database ask it what
the server serves and how its messages look, so that ``Process`` can be called
by hand. ``ServerReflectionInfo`` (a bidirectional stream, one answer per
request) answers ``list_services``, ``file_containing_symbol`` and
``file_by_filename`` (the file, then the files it depends on, as
``FileDescriptorProto`` bytes); extension requests find none (we declare no
extensions); what is not found is an ``error_response`` NOT_FOUND naming it.

The files come from our generated modules (``dmrpc_gym/protocol/_proto/``),
whose messages live in packages of our own, under the names they have on the
wire: ``dmrpc_gym.v1`` is served as ``dm_env_rpc.v1`` in
``dm_env_rpc/v1/dm_env_rpc.proto``, with the ``Environment`` service whose
``Process`` is the path we answer (our protos declare no service there), and
so on for the properties extension, health and reflection itself.

>>> files = served_files()
>>> sorted(files)[:3]
['dm_env_rpc/v1/dm_env_rpc.proto', 'dm_env_rpc/v1/extensions/properties.proto', 'google/protobuf/any.proto']
>>> files['dm_env_rpc/v1/dm_env_rpc.proto'].service[0].method[0].input_type
'.dm_env_rpc.v1.EnvironmentRequest'
>>> SERVICES
('dm_env_rpc.v1.Environment', 'grpc.health.v1.Health', 'grpc.reflection.v1.ServerReflection', 'grpc.reflection.v1alpha.ServerReflection')
"""
from __future__ import annotations

import functools
from typing import Iterable, Mapping

from google.protobuf import any_pb2, descriptor_pb2

from dmrpc_gym.protocol._proto import dm_env_rpc_pb2, health_pb2, properties_pb2, reflection_pb2
from dmrpc_gym.protocol.wire import METHOD, SERVICE
from dmrpc_gym.server.serving.health import HEALTH_SERVICE
from dmrpc_gym.transport import GrpcStatus, Method

__all__ = ["Reflection", "SERVICES", "served_files", "reflection_methods"]

_V1, _V1ALPHA = "grpc.reflection.v1", "grpc.reflection.v1alpha"
#: What list_services names: every service this server answers.
SERVICES = (SERVICE, HEALTH_SERVICE, f"{_V1}.ServerReflection", f"{_V1ALPHA}.ServerReflection")

#: (our generated file, its name on the wire, its package on the wire): reflection's own file twice.
_FILES = ((dm_env_rpc_pb2, "dm_env_rpc/v1/dm_env_rpc.proto", "dm_env_rpc.v1"),
          (properties_pb2, "dm_env_rpc/v1/extensions/properties.proto", "dm_env_rpc.v1.extensions.properties"),
          (health_pb2, "grpc/health/v1/health.proto", "grpc.health.v1"),
          (reflection_pb2, "grpc/reflection/v1/reflection.proto", _V1),
          (reflection_pb2, "grpc_reflection/v1alpha/reflection.proto", _V1ALPHA),
          (any_pb2, "google/protobuf/any.proto", "google.protobuf"))

_Request, _Response = reflection_pb2.ServerReflectionRequest, reflection_pb2.ServerReflectionResponse
_NOT_FOUND, _INVALID = int(GrpcStatus.NOT_FOUND), int(GrpcStatus.INVALID_ARGUMENT)


def _renamer(packages: Mapping[str, str]):
    """A function renaming a fully qualified type name (``.pkg.Msg``) from our packages to the wire's."""
    longest_first = sorted(packages.items(), key=lambda item: -len(item[0]))

    def rename(name: str) -> str:
        for ours, theirs in longest_first:
            if name.startswith(f".{ours}."):
                return f".{theirs}.{name[len(ours) + 2:]}"
        return name
    return rename


def _messages(messages: Iterable[descriptor_pb2.DescriptorProto], prefix: str):
    """Every message (nested ones too) with its full name."""
    for message in messages:
        name = f"{prefix}.{message.name}"
        yield name, message
        yield from _messages(message.nested_type, name)


@functools.lru_cache(maxsize=None)
def served_files() -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """The files reflection serves, by their names on the wire."""
    packages = {module.DESCRIPTOR.package: package for module, _, package in _FILES}
    names = {module.DESCRIPTOR.name: name for module, name, _ in _FILES}
    out = {}
    for module, name, package in _FILES:
        file = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(file)
        rename = _renamer({**packages, file.package: package})
        file.name, file.package = name, package
        file.dependency[:] = [names.get(dependency, dependency) for dependency in file.dependency]
        for _, message in _messages(file.message_type, ""):
            for field in (*message.field, *message.extension):
                for part in ("type_name", "extendee"):
                    if field.HasField(part):    # set only where set: a descriptor tells "" from unset
                        setattr(field, part, rename(getattr(field, part)))
        for service in file.service:
            for method in service.method:
                method.input_type, method.output_type = rename(method.input_type), rename(method.output_type)
        if module is dm_env_rpc_pb2:
            process = file.service.add(name=SERVICE.rpartition(".")[2]).method.add(name=METHOD)
            process.input_type, process.output_type = f".{package}.EnvironmentRequest", f".{package}.EnvironmentResponse"
            process.client_streaming = process.server_streaming = True
        out[name] = file
    return out


@functools.lru_cache(maxsize=None)
def _symbols() -> dict[str, str]:
    """Every symbol the files declare (messages, enums, services, methods) -> its file's name."""
    found = {}
    for name, file in served_files().items():
        prefix = f".{file.package}" if file.package else ""
        symbols = [full for full, _ in _messages(file.message_type, prefix)]
        symbols += [f"{prefix}.{enum.name}" for enum in file.enum_type]
        symbols += [f"{full}.{enum.name}" for full, message in _messages(file.message_type, prefix)
                    for enum in message.enum_type]
        for service in file.service:
            symbols.append(f"{prefix}.{service.name}")
            symbols += [f"{prefix}.{service.name}.{method.name}" for method in service.method]
        found.update((symbol[1:], name) for symbol in symbols)
    return found


def _with_dependencies(name: str) -> list[bytes]:
    """The file ``name`` and every file it depends on (transitively), serialized, each once."""
    files, order, todo = served_files(), [], [name]
    while todo:
        file = todo.pop(0)
        if file not in order:
            order.append(file)
            todo.extend(files[file].dependency)
    return [files[file].SerializeToString() for file in order]


class Reflection:
    """One ``ServerReflectionInfo`` call: each request answered in turn (v1 and v1alpha alike)."""

    def __init__(self, headers: Mapping[str, str] | None = None):
        pass

    async def handle(self, raw: bytes) -> bytes:
        return answer(raw)

    def close(self) -> None:
        pass


def answer(raw: bytes) -> bytes:
    """The serialized ``ServerReflectionResponse`` to a serialized request.

    >>> request = reflection_pb2.ServerReflectionRequest(file_containing_symbol="dm_env_rpc.v1.Tensor")
    >>> response = reflection_pb2.ServerReflectionResponse.FromString(answer(request.SerializeToString()))
    >>> [descriptor_pb2.FileDescriptorProto.FromString(f).name for f in response.file_descriptor_response.file_descriptor_proto]
    ['dm_env_rpc/v1/dm_env_rpc.proto', 'google/protobuf/any.proto']
    """
    response = _Response()
    try:
        request = _Request.FromString(bytes(raw))
    except Exception as exc:  # noqa: BLE001 - a malformed request is the client's
        response.error_response.error_code = _INVALID
        response.error_response.error_message = f"the request is not a valid ServerReflectionRequest: {exc}"
        return response.SerializeToString()
    response.valid_host = request.host
    response.original_request.CopyFrom(request)
    which = request.WhichOneof("message_request")
    asked = getattr(request, which) if which else None
    if which == "list_services":
        for name in SERVICES:
            response.list_services_response.service.add(name=name)
    elif which in ("file_by_filename", "file_containing_symbol"):
        name = asked if which == "file_by_filename" else _symbols().get(asked)
        if name in served_files():
            response.file_descriptor_response.file_descriptor_proto.extend(_with_dependencies(name))
        else:
            kind = "file" if which == "file_by_filename" else "symbol"
            response.error_response.error_code = _NOT_FOUND
            response.error_response.error_message = (f"no {kind} {asked!r} on this server; its services: "
                                                     f"{', '.join(SERVICES)}")
    elif which == "all_extension_numbers_of_type" and asked in _symbols():
        response.all_extension_numbers_response.base_type_name = asked   # we declare no extensions
    elif which in ("file_containing_extension", "all_extension_numbers_of_type"):
        what = f"{asked.containing_type} number {asked.extension_number}" if which == "file_containing_extension" \
            else asked
        response.error_response.error_code = _NOT_FOUND
        response.error_response.error_message = f"no extension of {what}: this server's files declare none"
    else:
        response.error_response.error_code = _INVALID
        response.error_response.error_message = "the request asks nothing (no message_request is set)"
    return response.SerializeToString()


def reflection_methods() -> dict[str, Method]:
    """The reflection services' methods (v1 and v1alpha), for the server's method table."""
    return {f"/{service}/ServerReflectionInfo": Method(Reflection) for service in SERVICES[2:]}
