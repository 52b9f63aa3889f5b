"""The server's limits (issue 23, finding 8 and 'Limits'): worlds in all and per connection, orphan
worlds, streams per connection and connections, each reported to the peer in the protocol's way."""
from __future__ import annotations

import logging
import socket
import struct
import time

import pytest
import servers
from hostile import Honest, MB, measured, resident, stepped_beside
from raw_h2 import RawClient

from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.properties import Properties
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import ConnectionLimits
from dmrpc_gym.transport.frames import REFUSED_STREAM, RST_STREAM, SETTINGS
from dmrpc_gym.worlds.catch import Catch


def create(conn: Connection) -> str:
    return conn.send(pb.CreateWorldRequest()).world_name


def worlds(address: str) -> set[str]:
    """The server's world names, as its ``worlds`` property says."""
    with Connection(address) as conn:
        return set(Properties(conn)["worlds"].tolist())


def test_create_world_past_either_limit_is_resource_exhausted_naming_it():
    with servers.start(Catch, max_worlds=5, max_worlds_per_connection=3) as server:
        with Connection(server.address) as a, Connection(server.address) as b:
            made = [create(a) for _ in range(3)]
            with pytest.raises(DmRpcError) as one:
                create(a)
            assert one.value.code_name == "RESOURCE_EXHAUSTED"
            assert "max_worlds_per_connection" in one.value.message
            made += [create(b) for _ in range(2)]
            with pytest.raises(DmRpcError) as all_:
                create(b)
            assert all_.value.code_name == "RESOURCE_EXHAUSTED" and "(max_worlds)" in all_.value.message
            a.send(pb.DestroyWorldRequest(world_name=made[0]))   # room again, for either
            create(b)
            assert len(worlds(server.address)) == 5


def test_a_flood_of_worlds_is_capped_and_released_after_its_creators_leave():
    """The attack: connections that each create all the worlds they may, then leave.

    Before: 3,000 worlds in 1.5 s, all kept after their creators disconnected. Now
    the total stops at ``max_worlds`` (the honest client keeps stepping), and every
    orphan is gone ``orphan_lifetime`` after its creator left.
    """
    with servers.start(Catch, max_worlds=200, max_worlds_per_connection=64, orphan_lifetime=2.0) as server:
        before = resident()
        honest = Honest(server.address)
        honest.start()
        while honest.steps == 0 and honest.is_alive():      # the default world is made: one of the 200
            time.sleep(0.01)
        refused = made = 0
        for _ in range(5):
            with Connection(server.address) as conn:
                for _ in range(64):
                    try:
                        create(conn)
                        made += 1
                    except DmRpcError as err:
                        assert err.code_name == "RESOURCE_EXHAUSTED"
                        refused += 1
        held = worlds(server.address)
        assert len(held) <= 200 and made >= 199 and refused == 320 - made   # the honest client's may be the 200th
        assert honest.finished(), honest.error
        left = time.monotonic()
        while worlds(server.address) & held and time.monotonic() - left < 10:
            time.sleep(0.1)
        released = time.monotonic() - left
        assert not worlds(server.address) & held
        assert 1.9 < released < 6, released
        measured("5 connections creating 64 worlds each, max_worlds=200 (finding 8)",
                 f"{made} made, {refused} RESOURCE_EXHAUSTED; released {released:.1f} s after the last creator "
                 f"left (orphan_lifetime 2 s); +{(resident() - before) / MB:.0f} MB", honest)


def test_an_orphan_may_be_joined_by_name_and_lives_while_joined():
    with servers.start(Catch, orphan_lifetime=0.5) as server:
        with Connection(server.address) as creator:
            name = create(creator)
        joiner = Connection(server.address)
        joiner.send(pb.JoinWorldRequest(world_name=name))       # within the lifetime: kept
        time.sleep(1.0)
        assert name in worlds(server.address)                    # joined: never expires
        joiner.send(pb.LeaveWorldRequest())
        time.sleep(1.0)                                          # its last agent left: expires
        assert name not in worlds(server.address)
        joiner.close()


def test_worlds_of_a_connection_still_open_never_expire():
    with servers.start(Catch, orphan_lifetime=0.2) as server:
        with Connection(server.address) as creator:
            name = create(creator)
            creator.send(pb.JoinWorldRequest(world_name=name))
            creator.send(pb.LeaveWorldRequest())
            time.sleep(0.6)
            assert name in worlds(server.address)


@pytest.mark.parametrize("options, message", [
    ({"max_worlds": 0}, "max_worlds must be a whole number >= 1, got 0"),
    ({"max_worlds_per_connection": 2.5}, "max_worlds_per_connection must be a whole number >= 1"),
    ({"orphan_lifetime": -1}, "orphan_lifetime must be a positive number of seconds, got -1"),
])
def test_world_limits_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        servers.Server(Catch, **options)


def test_streams_past_the_advertised_limit_are_refused():
    with servers.start(Catch, limits=ConnectionLimits(max_streams=100)) as server:
        raw = RawClient(server.address, timeout=5)
        try:
            kind, _, _, payload = raw.next_frame()
            assert kind == SETTINGS
            advertised = dict(struct.unpack_from(">HL", payload, i) for i in range(0, len(payload), 6))
            assert advertised[3] == 100                  # SETTINGS_MAX_CONCURRENT_STREAMS
            raw.send(b"".join(raw.request_headers(2 * i + 1) for i in range(101)))
            while (got := raw.next_frame()) is not None and got[0] != RST_STREAM:
                pass
            assert got is not None and got[2] == 201 and struct.unpack(">L", got[3])[0] == REFUSED_STREAM
        finally:
            raw.close()
        stepped_beside(server.address, steps=5)


def test_connections_past_the_limit_are_closed_and_the_listener_goes_on(caplog):
    with servers.start(Catch, limits=ConnectionLimits(max_connections=4)) as server:
        host, port = server.address.rsplit(":", 1)
        held = [RawClient(server.address, timeout=5) for _ in range(4)]
        for raw in held:
            assert raw.next_frame()[0] == SETTINGS          # each was taken
        with caplog.at_level(logging.WARNING, logger="dmrpc_gym.server"):
            extra = [socket.create_connection((host, int(port)), timeout=5) for _ in range(20)]
            for sock in extra:                              # accepted, then closed at once
                try:
                    assert sock.recv(100) == b""
                except ConnectionResetError:
                    pass
                sock.close()
        said = [r.getMessage() for r in caplog.records if "max_connections" in r.getMessage()]
        assert len(said) == 1, said                         # logged once, not 20 times
        held.pop().close()
        time.sleep(0.2)
        stepped_beside(server.address, steps=10)           # the listener still accepts
        for raw in held:
            raw.close()


def test_the_cli_flags_set_the_limits():
    with servers.serve_like_cli("dmrpc_gym.worlds.catch:Catch", "--max-worlds", "2",
                                "--max-worlds-per-connection", "1", "--orphan-lifetime", "0.3",
                                "--max-connections", "3") as server:
        assert server.limits.max_connections == 3
        with Connection(server.address) as a, Connection(server.address) as b:
            name = create(a)
            with pytest.raises(DmRpcError, match="max_worlds_per_connection"):
                create(a)
            create(b)
            with Connection(server.address) as c, pytest.raises(DmRpcError, match=r"\(max_worlds\)"):
                create(c)
        time.sleep(0.8)
        assert name not in worlds(server.address)
