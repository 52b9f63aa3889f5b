"""Same host (issue 40): our server says its abstract Unix socket in private SETTINGS, our client over plain TCP
moves to it; the token still applies there, a socket that cannot be reached leaves the client on TCP, the
socket goes with the server, and a client that asked for no shared memory stays where it connected."""
from __future__ import annotations

import secrets
import socket
import sys

import grpc
import numpy as np
import pytest

from dmrpc_gym import DmRpcEnv, DmRpcVectorEnv
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from dmrpc_gym.transport.client.connection import GrpcConnection
from dmrpc_gym.transport.client.h2_transport import _moved, open_connection
from dmrpc_gym.transport.frames import SETTINGS, frame, settings_frame
from dmrpc_gym.transport.same_host import secret_of, settings, socket_name
from dmrpc_gym.worlds.catch import Catch

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="abstract Unix sockets are Linux's")


def family(env) -> socket.AddressFamily:
    """The address family of the socket an env's stream goes over."""
    return env.connection.steady_link.connection._sock.family


def test_a_tcp_client_moves_to_the_servers_unix_socket_and_steps_the_same():
    with Server(Catch) as server:
        runs = {}
        for asked in (True, False):
            with DmRpcEnv(server.address, shared_memory=asked) as env:
                runs[asked] = [env.reset(seed=4)] + [env.step(np.int8(a % 3 - 1)) for a in range(30)]
                assert family(env) == (socket.AF_UNIX if asked else socket.AF_INET)
        assert str(runs[True]) == str(runs[False])
        envs = DmRpcVectorEnv(3, server.address)
        try:
            envs.reset(seed=0)
            envs.step(np.zeros(3, np.int8))
            assert {family(env) for env in envs.envs} == {socket.AF_UNIX}
        finally:
            envs.close()


def test_the_server_says_its_socket_only_where_it_offers_shared_memory():
    for offered in (True, False):
        with Server(Catch, shared_memory=offered) as server:
            conn = open_connection(server.address, 5.0)
            try:
                said = secret_of(conn.state.peer.same_host)
                assert (said is not None) == offered
                if offered:          # the socket it says answers as an HTTP/2 server
                    moved = _moved(conn, server.address, 5.0)
                    assert moved is not conn and moved._sock.family == socket.AF_UNIX
                    moved.close()
            finally:
                conn.close()
            with DmRpcEnv(server.address) as env:
                env.reset()
                assert family(env) == (socket.AF_UNIX if offered else socket.AF_INET)


def test_the_token_applies_on_the_unix_socket_too():
    with Server(Catch, token="s3cret") as server:
        with pytest.raises(DmRpcError, match="UNAUTHENTICATED|token|authoriz"):
            DmRpcEnv(server.address, token="")
        with DmRpcEnv(server.address, token="s3cret") as env:
            env.reset()
            assert family(env) == socket.AF_UNIX


def test_a_socket_that_cannot_be_reached_leaves_the_client_on_tcp():
    """A server whose SETTINGS say a socket no process here listens on (another host, another namespace)."""
    theirs, ours = socket.socketpair()
    try:
        ours.settimeout(5.0)
        conn = GrpcConnection(ours, "/m", "x")
        theirs.sendall(settings_frame(settings(secrets.token_bytes(16))))
        conn.handshake()
        assert secret_of(conn.state.peer.same_host) is not None
        assert _moved(conn, "127.0.0.1:1", 1.0) is conn and not conn.closed
    finally:
        theirs.close()
        ours.close()


def test_the_socket_goes_with_the_server():
    server = Server(Catch).start()
    conn = open_connection(server.address, 5.0)
    name = "\0" + socket_name(secret_of(conn.state.peer.same_host))
    conn.close()
    probe = socket.socket(socket.AF_UNIX)
    probe.connect(name)                      # there while the server runs
    probe.close()
    server.stop(0)
    with pytest.raises(ConnectionRefusedError), socket.socket(socket.AF_UNIX) as probe:
        probe.connect(name)


def test_a_grpcio_client_ignores_the_private_settings():
    """grpcio (the official dm_env_rpc client's stack) sees plain HTTP/2: the settings are ignored."""
    from dm_env_rpc.v1 import dm_env_rpc_pb2_grpc
    with Server(Catch) as server, grpc.insecure_channel(server.address) as channel:
        stub = dm_env_rpc_pb2_grpc.EnvironmentStub(channel)
        answers = stub.Process(iter([pb.EnvironmentRequest(create_world=pb.CreateWorldRequest())]))
        assert next(answers).WhichOneof("payload") == "create_world"


def test_a_plain_frame_of_settings_without_them_says_nothing():
    theirs, ours = socket.socketpair()
    try:
        conn = GrpcConnection(ours, "/m", "x")
        theirs.sendall(frame(SETTINGS, 0, 0))
        conn.handshake()
        assert conn.state.peer.same_host == {} and _moved(conn, "127.0.0.1:1", 1.0) is conn
    finally:
        theirs.close()
        ours.close()


def test_a_server_at_its_connection_limit_refuses_the_move_and_the_client_stays_on_tcp():
    from dmrpc_gym.server import ConnectionLimits
    with Server(Catch, limits=ConnectionLimits(max_connections=1)) as server, DmRpcEnv(server.address) as env:
        env.reset(seed=0)
        env.step(np.int8(0))
        assert family(env) == socket.AF_INET and not env.connection.same_host
