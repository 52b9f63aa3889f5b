"""The connection's lifecycle against real servers: waiting for one that is starting (issue 21 item 7)."""
from __future__ import annotations

import socket
import threading
import time

import grpc
import numpy as np
import pytest

from dmrpc_gym import DmRpcEnv
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.catch import Catch
from official_servers import start_official_server

PADDLE = {"paddle": dict(kind="action", dtype="int32", shape=[], min=-1, max=1)}


def free_port() -> int:
    """A loopback port nothing listens on now (the OS's choice for port 0, released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connect_waits_for_a_server_that_starts_listening_later():
    port = free_port()
    started: list[Server] = []
    timer = threading.Timer(1.0, lambda: started.append(Server(Catch, address=f"127.0.0.1:{port}").start()))
    timer.start()
    try:
        env = DmRpcEnv(f"127.0.0.1:{port}", connect_timeout=30)   # refused for ~1 s, then served
        obs, _ = env.reset(seed=0)
        assert obs.shape == (10, 10)
        env.step(np.int8(0))
        env.close()
    finally:
        timer.join()
        for server in started:
            server.stop()


def test_connect_retries_a_server_that_answers_unavailable_at_first():
    with start_official_server(PADDLE, unavailable_first=3) as server:
        env = DmRpcEnv(server.address, connect_timeout=30)
        env.reset()
        env.step(np.int32(1))
        env.close()
        assert server.refused == 3
        assert len(server.worlds) <= 1               # created once: the refused requests made nothing


def test_connect_retries_unavailable_through_a_grpcio_channel_too():
    with start_official_server(PADDLE, unavailable_first=2) as server:
        channel = grpc.insecure_channel(server.address)
        try:
            with Connection(channel=channel, connect_timeout=30) as conn:
                assert conn.send(pb.CreateWorldRequest()).world_name == "world-1"
        finally:
            channel.close()
        assert server.refused == 2


def test_connect_gives_up_at_the_deadline_with_the_last_cause():
    with start_official_server(PADDLE, unavailable_first=10**6) as server:
        start = time.monotonic()
        with pytest.raises(ConnectionError) as err:
            DmRpcEnv(server.address, connect_timeout=1.5)
        assert time.monotonic() - start < 15             # bounded (generous margin)
        message = str(err.value)
        assert server.address in message and "UNAVAILABLE: the server is warming up" in message
        assert server.refused > 1 and "attempts" in message


def test_connect_to_nothing_gives_up_naming_the_address_and_the_refusal():
    port = free_port()
    with pytest.raises(ConnectionError) as err:
        Connection(f"127.0.0.1:{port}", connect_timeout=1.0)
    assert f"127.0.0.1:{port}" in str(err.value) and "refused" in str(err.value).lower()
    assert "attempts" in str(err.value)


def test_without_connect_timeout_one_attempt_fails_at_once():
    port = free_port()
    with pytest.raises(ConnectionError, match=f"cannot reach a dm_env_rpc server at 127.0.0.1:{port}"):
        Connection(f"127.0.0.1:{port}", connect_timeout=None)


def test_envs_read_the_token_from_the_environment(monkeypatch):
    import dmrpc_gym
    monkeypatch.setenv("DMRPC_GYM_TOKEN", "s3cret")
    with Server(Catch, token="s3cret") as server:
        env = DmRpcEnv(server.address)
        env.reset(seed=0)
        env.close()
        envs = dmrpc_gym.DmRpcVectorEnv(2, server.address)
        envs.reset(seed=0)
        envs.close()
        monkeypatch.setenv("DMRPC_GYM_TOKEN", "wrong")
        with pytest.raises(dmrpc_gym.DmRpcError, match="UNAUTHENTICATED"):
            DmRpcEnv(server.address)
