"""The names dm_env_rpc puts on the wire, pinned in one place.

Our message classes live in the proto package ``dmrpc_gym.v1`` so that they can
share protobuf's default descriptor pool with the official ``dm-env-rpc``
package. Two names must still say ``dm_env_rpc`` on the wire: the gRPC method
path, and the ``google.protobuf.Any`` type URLs of the properties extension.
"""
from __future__ import annotations

from google.protobuf import any_pb2

from dmrpc_gym._proto import dm_env_rpc_pb2 as pb
from dmrpc_gym._proto import properties_pb2 as props_pb

__all__ = [
    "pb", "props_pb", "SERVICE", "METHOD", "METHOD_PATH",
    "PROPERTY_REQUEST_URL", "PROPERTY_RESPONSE_URL",
    "pack_any", "unpack_any",
]

SERVICE = "dm_env_rpc.v1.Environment"
METHOD = "Process"
METHOD_PATH = f"/{SERVICE}/{METHOD}"

_TYPE_PREFIX = "type.googleapis.com/"
_PROPERTIES_PACKAGE = "dm_env_rpc.v1.extensions.properties"
PROPERTY_REQUEST_URL = f"{_TYPE_PREFIX}{_PROPERTIES_PACKAGE}.PropertyRequest"
PROPERTY_RESPONSE_URL = f"{_TYPE_PREFIX}{_PROPERTIES_PACKAGE}.PropertyResponse"

# Our message class -> the type URL it travels under.
_URLS = {
    props_pb.PropertyRequest: PROPERTY_REQUEST_URL,
    props_pb.PropertyResponse: PROPERTY_RESPONSE_URL,
}


def pack_any(message) -> any_pb2.Any:
    """Pack a properties message into an ``Any`` under its dm_env_rpc type URL."""
    return any_pb2.Any(type_url=_URLS[type(message)], value=message.SerializeToString())


def unpack_any(packed: any_pb2.Any, cls):
    """Unpack ``packed`` as ``cls``; ``None`` when its type URL names another message.

    Both the dm_env_rpc name and our own name are accepted, so that messages
    packed with either package's ``Any.Pack`` are understood.
    """
    ours = _TYPE_PREFIX + cls.DESCRIPTOR.full_name
    if packed.type_url not in (_URLS.get(cls), ours):
        return None
    return cls.FromString(packed.value)
