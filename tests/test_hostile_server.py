"""What a hostile client may cost our server's transport (issue 23, findings 3 to 7 and 12).

Each attack is measured as it is made, against a real server over loopback:
the server's resident memory (it runs in this process) before and after, an
honest client's 100 steps during the attack, and the time until what the
attack held is released.
"""
from __future__ import annotations

import threading
import time

import hpack
import pytest
import servers
from hostile import Honest
from raw_h2 import RawClient

from dmrpc_gym.transport.frames import END_HEADERS, HEADERS, frame
from dmrpc_gym.worlds.catch import Catch


@pytest.fixture(scope="module")
def catch():
    server = servers.start(Catch)
    yield server
    server.stop()


def unknown_path_calls(address: str, calls: int, path_length: int) -> float:
    """Make ``calls`` calls on one connection whose ``:path`` is ``path_length`` bytes of text;
    the seconds until the last one's refusal came back."""
    raw = RawClient(address, timeout=60)
    block = hpack.Encoder().encode([(":method", "POST"), (":scheme", "http"), (":path", "/" + "x" * path_length),
                                    (":authority", "x"), ("content-type", "application/grpc")], huffman=False)
    try:
        start = time.monotonic()
        for k in range(calls):       # the block refers to no dynamic-table entry: each stream may reuse it
            raw.send(frame(HEADERS, END_HEADERS, 1 + 2 * k, block))
        for k in range(calls):
            assert raw.trailers(1 + 2 * k)["grpc-status"] == "12"
        return time.monotonic() - start
    finally:
        raw.close()


def test_an_unknown_path_is_echoed_at_a_bounded_linear_cost(catch):
    """Finding 4: 40 calls with a 60 KB path cost the server 9.7 s of CPU (hpack's Huffman coder is
    quadratic), stalling every client. The echo is now cut at 16 KiB and not Huffman coded."""
    honest = Honest(catch.address)
    honest.start()
    took = unknown_path_calls(catch.address, 40, 60_000)
    assert honest.finished()
    assert took < 3.0, f"40 refusals of a 60 KB path took {took:.1f} s"
    raw = RawClient(catch.address)
    try:
        raw.send(raw.request_headers(1, path="/" + "y" * 60_000))
        message = raw.trailers(1)["grpc-message"]
        assert "y" * 16_000 in message and len(message) < 17_000 and "more characters" in message
    finally:
        raw.close()
