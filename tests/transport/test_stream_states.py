"""The server stream's named states (transport/server/stream.py) and their table."""
from __future__ import annotations

import pytest

from dmrpc_gym.protocol.states import IllegalTransition
from dmrpc_gym.transport.server.stream import Inbound, Outbound, Stream


def test_a_stream_moves_fresh_open_ended_and_never_back():
    stream = Stream(1, window=65535, limit=1024)
    stream.outbound = stream.outbound.to(Outbound.OPEN)
    stream.end()
    stream.end()                                    # ending again is nothing (a reset after trailers)
    assert stream.outbound is Outbound.ENDED
    with pytest.raises(IllegalTransition, match="no transition from ENDED to OPEN"):
        stream.outbound.to(Outbound.OPEN)
    with pytest.raises(IllegalTransition, match="from DONE to DONE"):
        Inbound.DONE.to(Inbound.DONE)


def test_trailers_only_go_from_fresh_to_ended():
    assert Outbound.FRESH.to(Outbound.ENDED) is Outbound.ENDED
    with pytest.raises(IllegalTransition, match="from OPEN to FRESH"):
        Outbound.OPEN.to(Outbound.FRESH)
