"""Header limits as gRPC's servers have them (issue 30, item 2).

The server advertises SETTINGS_MAX_HEADER_LIST_SIZE (16 KiB by default,
``ConnectionLimits.max_header_list_size``), refuses a larger header list for
its stream alone (RESOURCE_EXHAUSTED), and ends a connection whose header block
grows past what it may hold before buffering more of it: 200 connections each
holding an unfinished block pinned 384 MB, as a block could hold 1 MiB.
"""
from __future__ import annotations

import socket
import time

import pytest
import servers
from hostile import BOUND, MB, Honest, measured, resident
from raw_h2 import RawClient, connections, data, joined, released

from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.transport.frames import (CONTINUATION, END_HEADERS, ENHANCE_YOUR_CALM, HEADERS, PREFACE,
                                        SETTING_HEADER_LIST, SETTINGS, frame, parse_settings)
from dmrpc_gym.transport.limits import LINGER_BYTES, ConnectionLimits
from dmrpc_gym.worlds.catch import Catch

BIG_VALUE = "a" * 20_000            # a header list of ~20 KB (its block, Huffman-coded, ~12.5 KB)
CONNECTIONS = 1000
FRAME = 16_000                      # header-block bytes per frame of the attacks
ATTEMPT = 256 << 10                 # what each connection of the first attack tries to hold
#: RFC 9113's SETTINGS_MAX_HEADER_LIST_SIZE of the default limits.
DEFAULT_LIST = ConnectionLimits().max_header_list_size


@pytest.fixture(scope="module")
def catch():
    server = servers.start(Catch, limits=ConnectionLimits(max_connections=4 * CONNECTIONS))
    yield server
    server.stop()


def advertised(address: str) -> int | None:
    """The SETTINGS_MAX_HEADER_LIST_SIZE of the server's first SETTINGS."""
    raw = RawClient(address)
    try:
        kind, _, _, payload = raw.next_frame()
        assert kind == SETTINGS
        return dict(parse_settings(payload)).get(SETTING_HEADER_LIST)
    finally:
        raw.close()


def test_the_server_advertises_its_header_list_limit_and_it_is_configurable(catch):
    assert advertised(catch.address) == DEFAULT_LIST == 16 << 10
    with servers.start(Catch, limits=ConnectionLimits(max_header_list_size=64 << 10)) as roomy:
        assert advertised(roomy.address) == 64 << 10
        with Connection(roomy.address, metadata=[("x-big", BIG_VALUE)]) as conn:   # taken there
            assert conn.send(pb.CreateWorldRequest()).world_name


def test_a_header_list_past_the_limit_ends_its_stream_alone(catch):
    """As C-core's servers answer it: RESOURCE_EXHAUSTED for the stream, naming the limit; the
    connection serves the next stream."""
    raw = RawClient(catch.address)
    try:
        raw.send(raw.request_headers(1, (("x-big", BIG_VALUE),)) + data(1, b"", end=True))
        trailers = raw.trailers(1)
        assert trailers["grpc-status"] == "8", trailers
        assert "ConnectionLimits.max_header_list_size" in trailers["grpc-message"]
        joined(raw, 3)
    finally:
        raw.close()
    with pytest.raises(ValueError, match="SETTINGS_MAX_HEADER_LIST_SIZE of 16384"):   # our client asks first,
        with Connection(catch.address, metadata=[("x-big", BIG_VALUE)]) as conn:     # as gRPC's clients do
            conn.send(pb.CreateWorldRequest())


@pytest.mark.parametrize("frames", [
    frame(HEADERS, 0, 1, bytes(FRAME)) + frame(CONTINUATION, 0, 1, bytes(FRAME)),   # unfinished, past 16 KiB
    frame(HEADERS, END_HEADERS, 1, bytes(3 * FRAME)),                               # whole, past twice that
], ids=["unfinished", "whole"])
def test_a_header_block_past_what_it_may_hold_ends_the_connection(catch, frames):
    raw = RawClient(catch.address, timeout=5)
    try:
        raw.send(frames)
        code, debug = raw.goaway()
        assert code == ENHANCE_YOUR_CALM and "max_header_list_size" in debug, debug
    finally:
        raw.close()


def test_many_connections_holding_unfinished_header_blocks_cost_little(catch):
    """Hostile: 1,000 connections each sending 256 KiB of a header block that never ends were each
    held with all of it until the frame timeout; now each ends once its block passes 16 KiB. Then
    1,000 connections holding the most a block may (16 KiB, and half of the frame that would
    end it) stay open and cost tens of MB. An honest client steps beside both."""
    opening = PREFACE + frame(SETTINGS, 0, 0)
    grow = opening + frame(HEADERS, 0, 1, bytes(FRAME)) + frame(CONTINUATION, 0, 1, bytes(FRAME)) * (ATTEMPT // FRAME)
    most = opening + frame(HEADERS, 0, 1, bytes(FRAME)) + frame(CONTINUATION, END_HEADERS, 1, bytes(FRAME))[:9 + FRAME // 2]
    honest = Honest(catch.address)
    honest.start()
    figures = {}
    for attack, first, within in (("the most a block may hold", most, 0.2), ("a growing block", grow, 5.0)):
        before = resident()
        socks = connections(catch.address, CONNECTIONS, first)
        time.sleep(0.5)
        grown = resident() - before
        took = released(socks, within)
        for sock in socks:
            sock.close()
        figures[attack] = grown, took < within
        measured(f"{CONNECTIONS} connections holding an unfinished header block: {attack} (issue 30)",
                 f"{grown / MB:+.0f} MB; {'all closed' if took < within else 'still open'} after {took:.1f} s")
        time.sleep(0.5)
    assert honest.finished()
    assert figures["a growing block"][1], "connections whose header blocks grew past the limit were still open"
    assert not figures["the most a block may hold"][1], "connections within the limits were closed early"
    assert all(grown < BOUND for grown, _ in figures.values()), figures


def test_a_flood_past_its_goaway_is_read_no_further(catch):
    """Issue 42, item 7: a CONTINUATION flood ended by GOAWAY after ~16 KiB went on being read and
    dropped while its connection lingered (a second, so that the GOAWAY is not lost to a reset):
    2.5 GB more, 1.2 s of the server's CPU. Now the linger reads at most LINGER_BYTES after a
    GOAWAY for the peer's own error (and one read of asyncio's, 256 KiB, past it), then stops:
    the flood then fills the kernel's buffers (a few MB) and goes no further."""
    raw = RawClient(catch.address, timeout=5)
    flood = frame(CONTINUATION, 0, 1, bytes(FRAME)) * 64          # ~1 MB a send
    traffic = catch.stats.traffic
    try:
        raw.send(frame(HEADERS, 0, 1, bytes(FRAME)) + frame(CONTINUATION, 0, 1, bytes(FRAME)))
        code, debug = raw.goaway()
        assert code == ENHANCE_YOUR_CALM and "max_header_list_size" in debug, debug
        before, sent = traffic.bytes_in, 0
        raw.sock.settimeout(0.05)
        until = time.monotonic() + 1.5                             # past the linger's second
        while time.monotonic() < until:
            try:
                sent += raw.sock.send(flood)
            except socket.timeout:
                continue
            except OSError:                                       # reset: the server has closed
                break
        read = traffic.bytes_in - before
    finally:
        raw.close()
    measured("a CONTINUATION flood going on after its GOAWAY (issue 42)",
             f"{read / MB:.1f} MB read by the server after the GOAWAY; {sent / MB:.0f} MB taken by the kernel")
    assert read <= LINGER_BYTES + (256 << 10), f"{read / MB:.1f} MB read after the GOAWAY"
    assert sent < 64 * MB, f"{sent / MB:.0f} MB taken after the GOAWAY"     # (the kernel's buffers: a few MB)
