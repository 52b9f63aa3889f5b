"""Protocol limits a hostile peer may not push past (issue 23, finding 10)."""
from __future__ import annotations

import struct

import pytest
import servers
from raw_h2 import RawClient

from dmrpc_gym.transport.frames import FLOW_CONTROL_ERROR, MAX_WINDOW, SETTINGS, WINDOW_UPDATE, frame
from dmrpc_gym.worlds.catch import Catch


@pytest.fixture(scope="module")
def catch():
    server = servers.start(Catch)
    yield server
    server.stop()


def test_settings_pushing_a_stream_window_past_the_maximum_is_a_flow_control_error(catch):
    raw = RawClient(catch.address, timeout=5)
    try:                   # stream 1's window raised to the maximum, then a larger initial window
        raw.send(raw.request_headers(1)
                 + frame(WINDOW_UPDATE, 0, 1, struct.pack(">L", MAX_WINDOW - 65535))
                 + frame(SETTINGS, 0, 0, struct.pack(">HL", 4, 1 << 20)))
        code, debug = raw.goaway()
        assert code == FLOW_CONTROL_ERROR and "2**31-1" in debug
    finally:
        raw.close()
