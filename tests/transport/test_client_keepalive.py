"""The client's keepalive PINGs (issue 23, finding 12): a dead peer is found while the env is idle,
and a server's ping policy is named when it ends the connection.

The floor of 10 s between PINGs (grpc clients' floor) is lowered here so that each test takes
seconds; the watcher gives the clock a turn about once a second, so PINGs go out at most that often.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest
import servers

from dmrpc_gym import DmRpcEnv
from dmrpc_gym.client import connection as client_connection
from dmrpc_gym.server import ConnectionLimits
from dmrpc_gym.transport.server import state as server_state
from dmrpc_gym.transport.client import keepalive
from dmrpc_gym.transport.frames import ACK, HEADER, PING, SETTINGS, frame
from dmrpc_gym.transport.client.h2_transport import H2Transport
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.worlds.catch import Catch


class PingCounter:
    """A raw HTTP/2 server that answers PINGs until ``mute`` is set, then stays silent (a peer gone
    quiet without closing: a crashed host, a dropped route)."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.pings, self.mute = [], threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        peer, _ = self.listener.accept()
        peer.settimeout(15)
        peer.sendall(frame(SETTINGS, 0, 0))
        buf = b""
        try:
            while chunk := peer.recv(65536):
                buf += chunk
                if buf.startswith(b"PRI * HTTP/2.0"):
                    buf = buf[24:]
                while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                    hi, lo, kind, flags, _ = HEADER.unpack_from(buf)
                    end = 9 + ((hi << 16) | lo)
                    payload, buf = buf[9:end], buf[end:]
                    if kind == PING and not flags & ACK:
                        self.pings.append(time.monotonic())
                        if not self.mute.is_set():
                            peer.sendall(frame(PING, ACK, 0, payload))
        except OSError:
            pass
        finally:
            peer.close()


@pytest.fixture
def quick_pings(monkeypatch):
    monkeypatch.setattr(client_connection, "MIN_KEEPALIVE", 0.1)
    monkeypatch.setattr(keepalive, "PING_TIMEOUT", 1.0)


def test_an_idle_connection_pings_and_finds_a_silent_peer_dead(quick_pings):
    peer = PingCounter()
    transport = H2Transport(peer.address, (), 5.0, ping_every=0.2)
    try:
        time.sleep(3.0)
        answered = len(peer.pings)
        assert answered >= 2, peer.pings                 # pinged while idle, each PING answered
        peer.mute.set()
        time.sleep(3.0)                                   # one PING unanswered for PING_TIMEOUT
        with pytest.raises(ConnectionError, match="did not answer a keepalive PING within 1 s"):
            transport.write(pb.EnvironmentRequest(step=pb.StepRequest()).SerializeToString())
        assert len(peer.pings) == answered + 1            # no more PINGs once it is dead
    finally:
        transport.close()


def test_without_keepalive_an_idle_connection_sends_no_pings():
    peer = PingCounter()
    transport = H2Transport(peer.address, (), 5.0)
    try:
        time.sleep(2.0)
        assert peer.pings == []
    finally:
        transport.close()


def test_a_server_ping_policy_is_named_when_it_ends_the_connection(quick_pings):
    with servers.start(Catch, limits=ConnectionLimits(min_ping_interval=10, max_ping_strikes=2)) as server:
        env = DmRpcEnv(server.address, keepalive=0.1)
        try:
            env.reset(seed=0)
            time.sleep(5.0)                               # ~1 PING a second: the third strike ends it
            with pytest.raises(ConnectionError, match="too_many_pings.*keepalive=0.1 s pings more often"):
                env.step(env.action_space.sample())
        finally:
            env.close()


def test_pings_the_server_allows_keep_the_connection(quick_pings):
    with servers.start(Catch, limits=ConnectionLimits(min_ping_interval=0.05)) as server:
        env = DmRpcEnv(server.address, keepalive=0.1)
        try:
            env.reset(seed=0)
            time.sleep(3.0)
            env.step(env.action_space.sample())
        finally:
            env.close()


def test_our_keepalive_at_its_floor_is_permitted_by_our_servers_default_policy(quick_pings, monkeypatch):
    """Issue 30: the default policy is gRPC's (5 minutes between PINGs), yet our own client's
    keepalive, at the floor it may use (MIN_KEEPALIVE, lowered here on both ends), is no strike."""
    monkeypatch.setattr(server_state, "MIN_KEEPALIVE", 0.1, raising=False)
    with servers.start(Catch) as server:
        env = DmRpcEnv(server.address, keepalive=0.1)
        try:
            env.reset(seed=0)
            time.sleep(4.5)                               # ~1 PING a second: 4 of them
            env.step(env.action_space.sample())
        finally:
            env.close()


@pytest.mark.parametrize("keepalive", [1, 0, -5, True, "10"])
def test_keepalive_is_checked(keepalive):
    with pytest.raises(ValueError, match="keepalive must be None or at least 10 seconds"):
        client_connection.check_keepalive(keepalive)


def test_keepalive_with_a_channel_of_your_own_is_refused():
    with pytest.raises(ValueError, match="grpc.keepalive_time_ms"):
        client_connection.check_keepalive(30, channel=object())
