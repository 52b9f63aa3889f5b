"""The connection's lifecycle against real servers: waiting for one that is starting (issue 21 item 7)."""
from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest

from dmrpc_gym import DmRpcEnv, DmRpcError
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.catch import Catch
from official_servers import start_official_server
from processes import free_port

PADDLE = {"paddle": dict(kind="action", dtype="int32", shape=[], min=-1, max=1)}


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


@pytest.mark.parametrize("how", ["unavailable_first", "unavailable_answers"])
def test_connect_retries_a_server_that_answers_unavailable_at_first(how):
    """``how``: the stream ends with status UNAVAILABLE, or the answer is an UNAVAILABLE error."""
    with start_official_server(PADDLE, **{how: 3}) as server:
        env = DmRpcEnv(server.address, connect_timeout=30)
        env.reset()
        env.step(np.int32(1))
        env.close()
        assert server.refused == 3
        assert len(server.worlds) <= 1               # created once: the refused requests made nothing


def test_a_first_answer_of_unavailable_gives_up_at_the_deadline_or_at_once_without_one():
    with start_official_server(PADDLE, unavailable_answers=10**6) as server:
        with pytest.raises(ConnectionError, match="UNAVAILABLE: the world is not ready yet"):
            Connection(server.address, connect_timeout=1.0).send(pb.CreateWorldRequest())
    with start_official_server(PADDLE, unavailable_answers=1) as server:
        with Connection(server.address, connect_timeout=None) as conn:      # no time given: no retry
            with pytest.raises(DmRpcError, match="UNAVAILABLE: the world is not ready yet"):
                conn.send(pb.CreateWorldRequest())
            assert conn.send(pb.CreateWorldRequest()).world_name   # the stream is still usable


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


# -- item 9: the client commands reach every server `serve` can start ---------------------------
@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """`dmrpc-gym serve` of Catch with TLS and a token: (server, cert)."""
    from interop_peers import self_signed
    import servers
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    server = servers.serve_like_cli("dmrpc_gym.worlds.catch:Catch", "--tls-cert", cert, "--tls-key", key,
                                    "--token", "s3cret")
    yield server, cert
    server.stop()


@pytest.mark.parametrize("command", [["inspect", "--json"], ["check"], ["bench", "--steps", "20"],
                                     ["record", "--steps", "3", "--no-progress"]])
def test_client_commands_take_token_tls_ca_compression_and_wait(secured, command, tmp_path, capsys):
    from dmrpc_gym.app import cli
    server, cert = secured
    if command[0] == "record":
        command = command + ["--out", str(tmp_path / "run.gif")]
    argv = [command[0], server.address, *command[1:], "--tls-ca", cert, "--token", "s3cret",
            "--compression", "gzip", "--wait", "10"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    refused = [command[0], server.address, *command[1:], "--tls-ca", cert, "--token", "wrong"]
    assert cli.main(refused) == 1
    assert "UNAUTHENTICATED" in capsys.readouterr().err


def test_client_commands_read_the_token_from_the_environment(secured, monkeypatch, capsys):
    from dmrpc_gym.app import cli
    server, cert = secured
    monkeypatch.setenv("DMRPC_GYM_TOKEN", "s3cret")
    assert cli.main(["inspect", server.address, "--tls-ca", cert]) == 0, capsys.readouterr().err


def test_tls_ca_naming_a_missing_file_is_refused_by_name(secured, capsys):
    from dmrpc_gym.app import cli
    server, _ = secured
    assert cli.main(["inspect", server.address, "--tls-ca", "nowhere.pem"]) == 1
    assert "--tls-ca 'nowhere.pem': no such file" in capsys.readouterr().err


def test_wait_lets_a_client_command_wait_for_a_server_that_starts_later(capsys):
    from dmrpc_gym.app import cli
    port = free_port()
    started: list[Server] = []
    timer = threading.Timer(1.0, lambda: started.append(Server(Catch, address=f"127.0.0.1:{port}").start()))
    timer.start()
    try:
        assert cli.main(["inspect", f"127.0.0.1:{port}", "--wait", "30"]) == 0, capsys.readouterr().err
        assert "paddle" in capsys.readouterr().out
    finally:
        timer.join()
        for server in started:
            server.stop()


def test_the_connect_line_of_serve_names_tls_and_token_and_runs(secured, monkeypatch):
    from dmrpc_gym.app import serve_command
    server, cert = secured
    line = serve_command.connect_line(server, token="s3cret", tls_ca=cert)
    assert f'tls="{cert}"' in line and 'token="s3cret"' in line
    scope: dict = {}
    exec(line, scope)                         # the line as printed connects
    scope["env"].reset(seed=0)
    scope["env"].close()
    monkeypatch.setenv("DMRPC_GYM_TOKEN", "s3cret")
    line = serve_command.connect_line(server, token="s3cret", tls_ca=cert)
    assert 'token=os.environ["DMRPC_GYM_TOKEN"]' in line and "s3cret" not in line
    exec(line, scope)
    scope["env"].close()
