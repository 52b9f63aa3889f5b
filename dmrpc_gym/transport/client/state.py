"""The client's state of its HTTP/2 connection, free of I/O: frames in, events and bytes to send out.

:class:`ClientState` is the client's :class:`~dmrpc_gym.transport.connection_state.ConnectionState`:
the server's settings, the windows and the credit policy (a client gives credit back as it
receives), the stream table (each :class:`~dmrpc_gym.transport.client.stream.GrpcStream` with its
two halves' states), the header block being received, the counters, and the client's duties in
return: the ACK of every SETTINGS and PING the server sends (:meth:`~ClientState.data_to_send`).
The connection (:class:`~dmrpc_gym.transport.client.connection.GrpcConnection`) reads frames from
its socket and hands each whole control or header frame to :meth:`~ClientState.frame`; DATA goes
through ``received`` (admitted and credited at once: the WINDOW_UPDATEs owed).

>>> from dmrpc_gym.transport.frames import PING, SETTINGS, frame
>>> state = ClientState()
>>> state.frame(SETTINGS, 0, 0, bytes.fromhex("000300000008")), state.peer.max_streams
(SettingsChanged(), 8)
>>> state.frame(PING, 0, 0, b"12345678"); state.data_to_send().hex()
'000000040100000000000000080100000000000000003132333435363738'
>>> state.frame(2, 0, 1, bytes(5)) is None           # PRIORITY: ignored
True
"""
from __future__ import annotations

from dmrpc_gym.transport.connection_state import ConnectionState
from dmrpc_gym.transport.frames import MAX_WINDOW, PROTOCOL_ERROR, ProtocolError

__all__ = ["ClientState", "CREDIT_AT"]

#: Received bytes that earn the server a WINDOW_UPDATE (connection and stream): half our window, past it.
CREDIT_AT = MAX_WINDOW // 2 + 1


class ClientState(ConnectionState):
    """The client's I/O-free state of one connection (see the module's docstring). ``next_id``: the id
    of the next stream this client opens (odd ids, RFC 9113 5.1.1)."""

    __slots__ = ("next_id",)

    PUSH_REFUSED = "the server pushed a stream we disabled"

    def __init__(self, threshold: int | None = None):
        super().__init__(MAX_WINDOW, CREDIT_AT if threshold is None else threshold)
        self.next_id = 1

    def opening(self, sid: int) -> None:
        if not sid & 1 or sid >= self.next_id:    # a stream we never opened (RFC 9113 5.1)
            raise ProtocolError(PROTOCOL_ERROR, f"HEADERS on stream {sid}, which this client did not open")
