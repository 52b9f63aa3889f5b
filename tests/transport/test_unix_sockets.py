"""Unix domain sockets (issue 22, item 3): gRPC's ``unix:`` addresses on both ends, every env kind,
grpcio both ways, the socket file's mode, stale files and cleanup."""
from __future__ import annotations

import os
import socket
import stat

import gymnasium as gym
import numpy as np
import pytest
import servers
from official_servers import start_official_server
from servers import OfficialClient

import dmrpc_gym
from dmrpc_gym import DmRpcEnv, DmRpcVectorEnv
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dpb
from dmrpc_gym.server import Server
from dmrpc_gym.transport.unix import unix_path
from dmrpc_gym.worlds.catch import Catch
from dmrpc_gym.worlds.tag import Tag


@pytest.fixture
def sock_path(tmp_path):
    return str(tmp_path / "world.sock")


def test_our_client_and_server_over_a_unix_socket(sock_path):
    with Server(Catch, address=f"unix:{sock_path}") as server:
        assert server.address == f"unix:{sock_path}" and server.addresses == [server.address]
        assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600      # the owner's only
        env = DmRpcEnv(server.address)
        try:
            obs, _ = env.reset(seed=3)
            obs, reward, terminated, truncated, info = env.step(np.int8(0))
            assert obs.shape == (10, 10) and env.state.name == "RUNNING"
        finally:
            env.close()
        with pytest.raises(RuntimeError, match="no TCP port"):
            server.port
    assert not os.path.exists(sock_path)                                 # removed at stop


def test_every_env_kind_connects_over_unix(sock_path, tmp_path):
    with Server(Catch, address=f"unix:///{sock_path.lstrip('/')}") as catch:
        vector = DmRpcVectorEnv(2, catch.address)
        try:
            vector.reset(seed=0)
            obs, *_ = vector.step(np.zeros(2, np.int8))
            assert obs.shape == (2, 10, 10)
        finally:
            vector.close()
        made = gym.make("dmrpc/Remote-v0", address=catch.address)
        try:
            made.reset(seed=0)
        finally:
            made.close()
        dm = dmrpc_gym.connect_dm_env(catch.address)
        try:
            assert dm.reset().first()
        finally:
            dm.close()
    with Server(Tag, address=f"unix:{tmp_path / 'tag.sock'}") as tag:
        env = dmrpc_gym.parallel_env(tag.address)
        try:
            observations, _ = env.reset(seed=0)
            assert set(observations) == set(env.possible_agents)
        finally:
            env.close()


def test_one_server_on_tcp_and_unix_at_once(sock_path):
    with Server(Catch, address=["127.0.0.1:0", f"unix:{sock_path}"]) as server:
        tcp, unix = server.addresses
        assert tcp == f"127.0.0.1:{server.port}" and unix == f"unix:{sock_path}"
        for address in (tcp, unix):
            env = DmRpcEnv(address)
            try:
                env.reset(seed=0)
            finally:
                env.close()


def test_the_official_client_reaches_our_server_over_unix(sock_path):
    with Server(Catch, address=f"unix:{sock_path}") as server, OfficialClient(server.address) as client:
        world = client.send(dpb.CreateWorldRequest()).world_name
        specs = client.send(dpb.JoinWorldRequest(world_name=world)).specs
        assert sorted(spec.name for spec in specs.actions.values()) == ["paddle"]


def test_our_client_reaches_a_grpcio_server_over_unix(sock_path):
    with start_official_server(bind=f"unix:{sock_path}") as official:
        env = DmRpcEnv(official.address, seed_setting=None)
        try:
            env.reset()
            env.step(env.action_space.sample())
        finally:
            env.close()


def test_a_stale_socket_file_is_replaced(sock_path):
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(sock_path)            # a server that died without removing its file
    dead.close()
    assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    with Server(Catch, address=f"unix:{sock_path}") as server:
        env = DmRpcEnv(server.address)
        env.close()


def test_a_socket_in_use_or_a_file_that_is_no_socket_is_refused(sock_path, tmp_path):
    with Server(Catch, address=f"unix:{sock_path}"):
        with pytest.raises(OSError, match="another server is listening there"):
            Server(Catch, address=f"unix:{sock_path}").start()
    plain = tmp_path / "notes.txt"
    plain.write_text("mine")
    with pytest.raises(OSError, match="not a socket"):
        Server(Catch, address=f"unix:{plain}").start()
    assert plain.read_text() == "mine"


def test_unreachable_and_malformed_unix_addresses_are_named(tmp_path):
    with pytest.raises(ConnectionError, match=r"unix:.*nothing\.sock"):
        DmRpcEnv(f"unix:{tmp_path / 'nothing.sock'}", connect_timeout=None)
    with pytest.raises(ValueError, match="takes an absolute path"):
        unix_path("unix://relative.sock")
    with pytest.raises(ValueError, match="names no socket path"):
        Server(Catch, address="unix:")
    with pytest.raises(ValueError, match="guarded by its file's permissions"):
        DmRpcEnv(f"unix:{tmp_path / 'x.sock'}", tls=True)


def test_serve_unix_from_the_command_line(sock_path):
    with servers.serve_like_cli("dmrpc_gym.worlds.catch:Catch", "--unix", sock_path) as server:
        assert server.address == f"unix:{sock_path}"
        line = servers.serve_command.connect_line(server)
        assert f'address="unix:{sock_path}"' in line
        scope: dict = {}
        exec(line, scope)
        scope["env"].reset(seed=0)
        scope["env"].close()
