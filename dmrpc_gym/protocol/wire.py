"""The names dm_env_rpc puts on the wire, pinned in one place.

Our message classes live in the proto package ``dmrpc_gym.v1`` so that they can
share protobuf's default descriptor pool with the official ``dm-env-rpc``
package. Two names must still say ``dm_env_rpc`` on the wire: the gRPC method
path, and the ``google.protobuf.Any`` type URLs (the properties extension's
messages, and any of our messages packed into a PROTO tensor).
"""
from __future__ import annotations

from google.protobuf import any_pb2

from dmrpc_gym.protocol._proto import dm_env_rpc_pb2 as pb
from dmrpc_gym.protocol._proto import properties_pb2 as props_pb

__all__ = [
    "pb", "props_pb", "SERVICE", "METHOD", "METHOD_PATH",
    "PROPERTY_REQUEST_URL", "PROPERTY_RESPONSE_URL", "SERVER_METADATA", "FEATURES_METADATA",
    "pack_any", "unpack_any", "wire_name",
]

SERVICE = "dm_env_rpc.v1.Environment"
METHOD = "Process"
METHOD_PATH = f"/{SERVICE}/{METHOD}"

_TYPE_PREFIX = "type.googleapis.com/"
# Our proto packages -> the dm_env_rpc packages whose names travel on the wire.
_PACKAGES = (("dmrpc_gym.v1.properties.", "dm_env_rpc.v1.extensions.properties."),
             ("dmrpc_gym.v1.", "dm_env_rpc.v1."))
PROPERTY_REQUEST_URL = f"{_TYPE_PREFIX}dm_env_rpc.v1.extensions.properties.PropertyRequest"
#: Our own name on the wire: the response header (gRPC initial metadata) in which a
#: dmrpc_gym server gives its version, so that our client knows it may ask for what
#: only dmrpc_gym servers offer.
SERVER_METADATA = "dmrpc-gym-server"
#: The response header listing (comma-separated) what a dmrpc_gym server offers beyond
#: dm_env_rpc, such as ``info`` (:mod:`dmrpc_gym.protocol.info`).
FEATURES_METADATA = "dmrpc-gym-features"
PROPERTY_RESPONSE_URL = f"{_TYPE_PREFIX}dm_env_rpc.v1.extensions.properties.PropertyResponse"


def wire_name(full_name: str) -> str:
    """The name a message of ours travels under.

    >>> wire_name("dmrpc_gym.v1.properties.PropertyRequest")
    'dm_env_rpc.v1.extensions.properties.PropertyRequest'
    """
    for ours, theirs in _PACKAGES:
        if full_name.startswith(ours):
            return theirs + full_name[len(ours):]
    return full_name


def pack_any(message) -> any_pb2.Any:
    """Pack ``message`` into an ``Any``; our messages travel under their dm_env_rpc names."""
    url = _TYPE_PREFIX + wire_name(message.DESCRIPTOR.full_name)
    return any_pb2.Any(type_url=url, value=message.SerializeToString())


def unpack_any(packed: any_pb2.Any, cls):
    """Unpack ``packed`` as ``cls``; ``None`` when its type URL names another message.

    Both the dm_env_rpc name and our own name are accepted, so that messages
    packed with either package's ``Any.Pack`` are understood.
    """
    name = cls.DESCRIPTOR.full_name
    if packed.type_url not in (_TYPE_PREFIX + wire_name(name), _TYPE_PREFIX + name):
        return None
    return cls.FromString(packed.value)
