"""A client's servers: one address, or an ordered list of them to fail over along.

Every client takes ``address`` as one ``"host:port"`` (``"unix:PATH"``) or a list of
them. A connection goes to the first address on the list that serves it (each is
tried in turn, then the round starts again, within ``connect_timeout``;
:class:`~dmrpc_gym.client.lifecycle.Patience`). An env made with
``reconnect=True`` that loses its server (the connection fails, or the server ends
the stream UNAVAILABLE because it shuts down or drains) connects again starting
with the address *after* the one it lost, wrapping around: it moves to the next
server, and comes back to the lost one last.

>>> address_list(["h1:50051", "h2:50051"])
('h1:50051', 'h2:50051')
>>> following(("h1:1", "h2:1", "h3:1"), "h2:1")
('h3:1', 'h1:1', 'h2:1')
>>> address_list([])
Traceback (most recent call last):
ValueError: address= is an empty list; expected one 'host:port' (or 'unix:PATH'), or a list of them to fail over along
"""
from __future__ import annotations

from typing import Sequence

from dmrpc_gym.transport import check_address

__all__ = ["address_list", "following", "listing"]


def address_list(address: str | Sequence[str], grpc_targets: bool = False) -> tuple[str, ...]:
    """``address`` as a tuple of checked addresses: ``ValueError`` for an empty list, and for an entry
    that is no address, naming its place on the list (``grpc_targets``: as
    :func:`~dmrpc_gym.transport.check_address`)."""
    if isinstance(address, str):
        check_address(address, grpc_targets)
        return (address,)
    if isinstance(address, (bytes, bytearray)) or not isinstance(address, Sequence):
        raise TypeError(f"address must be a 'host:port' string or a list of them, got {address!r}")
    if not address:
        raise ValueError("address= is an empty list; expected one 'host:port' (or 'unix:PATH'), "
                         "or a list of them to fail over along")
    for i, entry in enumerate(address):
        try:
            check_address(entry, grpc_targets)
        except (TypeError, ValueError) as err:
            raise type(err)(f"address[{i}] of {list(address)!r}: {err}") from None
    if len(set(address)) != len(address):
        raise ValueError(f"address= lists an address twice: {list(address)!r}; list each server once")
    return tuple(address)


def following(addresses: str | Sequence[str], lost: str | None) -> tuple[str, ...]:
    """The list in the order to try after losing ``lost``: the addresses after it, then those before
    it, then ``lost`` itself (the whole list as it is when ``lost`` is None or not on it)."""
    addresses = (addresses,) if isinstance(addresses, str) else tuple(addresses)
    if lost not in addresses:
        return addresses
    at = addresses.index(lost) + 1
    return addresses[at:] + addresses[:at]


def listing(addresses: Sequence[str]) -> str:
    """The servers for a message: ``server at A``, or ``servers at A, B (tried in turn)``."""
    if len(addresses) == 1:
        return f"server at {addresses[0]}"
    return f"servers at {', '.join(addresses)} (tried in turn)"
