"""The properties extension, server side: list, read and write named values of a world.

Requests and responses travel as ``google.protobuf.Any`` in the ``extension``
slot of the envelopes, under the dm_env_rpc type URLs
(:func:`dmrpc_gym.protocol.wire.pack_any` / :func:`~dmrpc_gym.protocol.wire.unpack_any`).
Answers follow the extension's conventions: an unknown key is ``NOT_FOUND``,
reading a write-only or writing a read-only property ``PERMISSION_DENIED``, a
value of the wrong type or range ``INVALID_ARGUMENT``.

Properties are flat (none is listable): listing the root (``""``) gives them
all; listing a property's own key gives nothing below it.

>>> table = {"answer": Property("answer", pb.INT64, "a number", read=lambda: 42)}
>>> request = props_pb.PropertyRequest(read_property=props_pb.ReadPropertyRequest(key="answer"))
>>> import asyncio
>>> response = unpack_any(asyncio.run(handle(pack_any(request), table)), props_pb.PropertyResponse)
>>> response.read_property.value.int64s.array[:]
[42]
"""
from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
from google.protobuf import any_pb2

from dmrpc_gym.protocol import tensors
from dmrpc_gym.server.serving import status
from dmrpc_gym.protocol.wire import PROPERTY_REQUEST_URL, pack_any, pb, props_pb, unpack_any

__all__ = ["Property", "handle", "env_properties", "ENV_PROPERTIES"]


@dataclass(frozen=True)
class Property:
    """One property: its key, DataType, description and accessors.

    ``read()`` returns the value, or an awaitable of it (a value made off the event loop, a
    frame); ``write(array)`` receives the written tensor
    unpacked (and already checked to be of ``dtype``'s kind and ``shape``) and
    may raise a ``DmRpcError`` (e.g. ``INVALID_ARGUMENT`` for a bad value).

    >>> spec = Property("gravity", pb.DOUBLE, "m/s^2", read=lambda: 9.81).spec()
    >>> spec.spec.name, spec.is_readable, spec.is_writable
    ('gravity', True, False)
    """

    key: str
    dtype: int
    description: str
    read: Callable[[], Any] | None = None
    write: Callable[[np.ndarray], None] | None = None
    shape: tuple[int, ...] = ()
    #: A family of keys (``call.METHOD``): the Property for a key not in the table, or None.
    resolve: Callable[[str], "Property | None"] | None = None

    def spec(self) -> props_pb.PropertySpec:
        """The ``PropertySpec`` listed for this property."""
        return props_pb.PropertySpec(
            spec=pb.TensorSpec(name=self.key, dtype=self.dtype, shape=self.shape),
            is_readable=self.read is not None, is_writable=self.write is not None,
            is_listable=False, description=self.description)


def _lookup(table: Mapping[str, Property], key: str) -> Property:
    found = table.get(key)
    for family in table.values():
        if found is not None:
            break
        if family.resolve is not None:
            found = family.resolve(key)
    if found is None:
        known = ", ".join(sorted(table)) or "none"
        raise status.not_found(f"no property {key!r} (properties: {known})")
    return found


async def _read(table: Mapping[str, Property], key: str) -> props_pb.PropertyResponse:
    prop = _lookup(table, key)
    if prop.read is None:
        raise status.permission_denied(f"property {key!r} is not readable")
    value = prop.read()
    if inspect.isawaitable(value):
        value = await value
    response = props_pb.PropertyResponse()
    tensors.pack_into(response.read_property.value, value, prop.dtype)
    return response


def _kind_matches(array: np.ndarray, dtype: int) -> bool:
    want = tensors.np_dtype(dtype)
    if want.kind in "iu":
        return array.dtype.kind in "iu"
    if want.kind == "f":
        return array.dtype.kind in "fiu"
    return array.dtype.kind == want.kind


def _write(table: Mapping[str, Property], key: str, value: pb.Tensor) -> props_pb.PropertyResponse:
    prop = _lookup(table, key)
    if prop.write is None:
        raise status.permission_denied(f"property {key!r} is read-only")
    try:
        array = tensors.unpack(value)
    except (ValueError, TypeError) as exc:
        raise status.invalid_argument(f"property {key!r}: {exc}") from None
    if not _kind_matches(array, prop.dtype) or array.shape != prop.shape:
        raise status.invalid_argument(
            f"property {key!r} takes a {tensors.data_type_name(prop.dtype)} of shape {list(prop.shape)}, "
            f"got {array.dtype} of shape {list(array.shape)}")
    prop.write(array)
    return props_pb.PropertyResponse(write_property=props_pb.WritePropertyResponse())


def _list(table: Mapping[str, Property], key: str) -> props_pb.PropertyResponse:
    response = props_pb.PropertyResponse()
    listing = response.list_property
    listing.SetInParent()
    if key:
        _lookup(table, key)  # a known key has nothing below it
        return response
    for name in sorted(table):
        listing.values.append(table[name].spec())
    return response


#: The method by which an env offers properties of its own (a list of :class:`Property`).
ENV_PROPERTIES = "dmrpc_properties"


def env_properties(env: Any, lane: Any) -> list[Property]:
    """The properties ``env`` offers (its ``dmrpc_properties()``), their reads run on the world's ``lane``
    (where the env's calls run one at a time); none for an env that offers none.

    >>> class Counter:
    ...     def dmrpc_properties(self):
    ...         return [Property("count", pb.INT64, "a count", read=lambda: 3)]
    >>> class Inline:
    ...     async def quick(self, fn, *args):
    ...         return fn(*args)
    >>> import asyncio
    >>> prop, = env_properties(Counter(), Inline())
    >>> asyncio.run(prop.read())
    3
    """
    offer = getattr(getattr(env, "unwrapped", env), ENV_PROPERTIES, None)
    return [_on_lane(prop, lane) for prop in offer()] if callable(offer) else []


def _on_lane(prop: Property, lane: Any) -> Property:
    read, resolve = prop.read, prop.resolve
    return dataclasses.replace(
        prop, read=None if read is None else (lambda: lane.quick(read)),
        resolve=None if resolve is None else (lambda key: None if (found := resolve(key)) is None
                                              else _on_lane(found, lane)))


async def handle(packed: any_pb2.Any, table: Mapping[str, Property]) -> any_pb2.Any:
    """Answer one extension request against ``table`` (key -> Property)."""
    request = unpack_any(packed, props_pb.PropertyRequest)
    if request is None:
        raise status.unimplemented(
            f"extension {packed.type_url!r} is not supported (supported: {PROPERTY_REQUEST_URL})")
    which = request.WhichOneof("payload")
    if which == "read_property":
        response = await _read(table, request.read_property.key)
    elif which == "write_property":
        response = _write(table, request.write_property.key, request.write_property.value)
    elif which == "list_property":
        response = _list(table, request.list_property.key)
    else:
        raise status.invalid_argument("property request has no read_property, write_property or list_property")
    return pack_any(response)
