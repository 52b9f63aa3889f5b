"""Client of the dm_env_rpc properties extension: a world's properties, dict-like, and the
one property reconnecting reads (which run of a dmrpc_gym server a connection reaches)."""
from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Callable, Iterator

import numpy as np

from dmrpc_gym.protocol import tensors
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import pack_any, props_pb, unpack_any

__all__ = ["Properties", "server_instance", "same_run"]


class Properties(MutableMapping):
    """Read, write and list a world's properties over one connection.

    Keys are property names (nested ones are dotted: ``"physics.gravity"``).
    Reading gives a numpy array (0-d for scalars; ``.item()`` for a Python
    value), writing packs with the property's spec dtype when it is known.
    ``specs()`` lists the readable/writable/listable flags and TensorSpecs.

    >>> from dmrpc_gym.server import Server
    >>> from dmrpc_gym.worlds.catch import Catch
    >>> from dmrpc_gym.client.connection import Connection
    >>> with Server(Catch) as server, Connection(server.address) as conn:
    ...     props = Properties(conn)
    ...     "env_id" in props
    True
    """

    def __init__(self, connection: Connection):
        self._connection = connection

    def _call(self, **request) -> Any:
        answer = self._connection.send_extension(pack_any(props_pb.PropertyRequest(**request)))
        response = unpack_any(answer, props_pb.PropertyResponse)
        if response is None:
            raise DmRpcError(13, f"the server answered a property request with {answer.type_url}",
                             request="property")
        return response

    def specs(self, key: str = "") -> dict[str, props_pb.PropertySpec]:
        """The property specs under ``key`` (the root by default), by name."""
        values = self._call(list_property=props_pb.ListPropertyRequest(key=key)).list_property.values
        return {spec.spec.name: spec for spec in values}

    def _all_keys(self, key: str = "") -> list[str]:
        keys = []
        for name, spec in self.specs(key).items():
            if spec.is_readable or spec.is_writable:
                keys.append(name)
            if spec.is_listable:
                keys.extend(self._all_keys(name))
        return keys

    def __getitem__(self, key: str) -> np.ndarray:
        try:
            value = self._call(read_property=props_pb.ReadPropertyRequest(key=key)).read_property.value
        except DmRpcError as err:
            if err.code_name == "NOT_FOUND":
                raise KeyError(key) from err
            raise
        return tensors.unpack(value)

    def __setitem__(self, key: str, value: Any) -> None:
        spec = self._spec_of(key)
        tensor = tensors.pack(value, spec.spec.dtype if spec is not None and spec.spec.dtype else None)
        self._call(write_property=props_pb.WritePropertyRequest(key=key, value=tensor))

    def _spec_of(self, key: str):
        parent = key.rpartition(".")[0]
        try:
            return self.specs(parent).get(key)
        except DmRpcError:
            return None

    def __delitem__(self, key: str) -> None:
        raise TypeError("dm_env_rpc properties cannot be deleted")

    def __iter__(self) -> Iterator[str]:
        return iter(self._all_keys())

    def __len__(self) -> int:
        return len(self._all_keys())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._all_keys()

    def __repr__(self) -> str:
        return f"Properties({sorted(self._all_keys())})"


def server_instance(connection: Any, ask: bool = False) -> str | None:
    """Which run of a dmrpc_gym server ``connection`` reaches (its ``server_instance`` property);
    None for other servers, which are not asked (``ask``: ask before anything was answered,
    for an address that was a dmrpc_gym server before)."""
    if connection.server_software is None and not ask:
        return None
    try:
        return str(Properties(connection)["server_instance"].item())
    except (DmRpcError, KeyError, ValueError):       # an older server without it: unknown
        return None


def same_run(instance: str, connect: Callable[[], Any]) -> bool:
    """Whether the server that ``connect()`` reaches now is still the run ``instance`` names."""
    connection = connect()
    try:
        return server_instance(connection, ask=True) == instance
    finally:
        connection.close()
