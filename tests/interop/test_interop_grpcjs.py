"""Interop with Node's @grpc/grpc-js, both directions: our client against a grpc-js server
(keepalive pings, an idle gap, CONTINUATION, TLS, gzip answers) and a grpc-js client against our
server (gzip, a graceful close mid-stream, 32 KB of metadata, TLS with a token, an oversized message).

Needs ``node`` and a ``node_modules`` folder holding ``@grpc/grpc-js`` and
``@grpc/proto-loader`` (their ``protobufjs``), named by ``DMRPC_NODE_MODULES``;
skipped without them unless ``DMRPC_REQUIRE_INTEROP=1`` (CI) makes that a failure.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
import servers
from interop_peers import echo_on_one_connection, self_signed
from raw_h2 import LARGE_HEADERS

from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.worlds.catch import Catch

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = os.environ.get("DMRPC_NODE_MODULES", "")
IDLE = 2.5
OK, RESOURCE_EXHAUSTED, UNAUTHENTICATED = 0, 8, 16


def _node_ready() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not MODULES or not os.path.isdir(os.path.join(MODULES, "@grpc", "grpc-js")):
        return "DMRPC_NODE_MODULES does not name a node_modules folder with @grpc/grpc-js"
    return None


_missing = _node_ready()
if _missing and os.environ.get("DMRPC_REQUIRE_INTEROP") == "1":
    raise RuntimeError(f"DMRPC_REQUIRE_INTEROP=1 but {_missing}")
pytestmark = pytest.mark.skipif(_missing is not None, reason=_missing or "")
ENV = {**os.environ, "NODE_PATH": MODULES}


class GrpcjsServer:
    """``node tests/interop/grpcjs_server.js`` (the echo world); ``address``; ends when closed."""

    def __init__(self, **options):
        self.proc = subprocess.Popen(["node", os.path.join(HERE, "grpcjs_server.js"), json.dumps(options)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("PORT "):
            self.close()
            raise RuntimeError(f"the grpc-js server said {line!r}")
        self.address = f"127.0.0.1:{line.split()[1]}"

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> GrpcjsServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def grpcjs_client(address: str, requests: list[dict], **options) -> dict:
    """Run ``tests/interop/grpcjs_client.js``: ``{"answers": [kinds], "code": status, "details": text}``."""
    out = subprocess.run(["node", os.path.join(HERE, "grpcjs_client.js"), address,
                          json.dumps({"requests": requests, **options})],
                         capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def step(value: int = 7) -> pb.StepRequest:
    return pb.StepRequest(actions={1: pb.Tensor(int32s=pb.Tensor.Int32Array(array=[value]))})


# -- our client, grpc-js server ----------------------------------------------------------------------
@pytest.mark.parametrize("keepalive_ms", [100, 1000])
def test_our_client_survives_an_idle_gap_under_grpcjs_keepalive(keepalive_ms):
    with GrpcjsServer(keepaliveMs=keepalive_ms, keepaliveTimeoutMs=1000) as server:
        with Connection(server.address) as conn:
            assert conn.send(pb.CreateWorldRequest()).world_name == "echo"
            time.sleep(IDLE)
            assert bytes(conn.send(step(7)).observations[1].uint8s.array) == bytes([7]) * 4
            time.sleep(IDLE)
            assert conn.send(step(2)).state == pb.RUNNING


def test_grpcjs_server_takes_every_sub_env_on_one_connection():
    with GrpcjsServer() as server:
        echo_on_one_connection(server.address)


def test_our_client_sends_32kb_of_metadata_to_grpcjs():
    with GrpcjsServer() as server:
        with Connection(server.address, metadata=[("x-long-token", "t" * 32_000)]) as conn:
            assert conn.send(pb.CreateWorldRequest()).world_name == "echo"


def test_our_client_decodes_gzip_answers_and_sends_gzip():
    with GrpcjsServer(gzip=True, obsSize=10_000) as server:
        for compression in (None, "gzip", "deflate"):
            with Connection(server.address, compression=compression) as conn:
                assert bytes(conn.send(step(5)).observations[1].uint8s.array) == bytes([5]) * 10_000


def test_our_client_over_tls_to_grpcjs(tmp_path):
    cert, key = self_signed(tmp_path)
    with GrpcjsServer(cert=cert, key=key, keepaliveMs=100) as server:
        with Connection(server.address, tls=cert) as conn:
            conn.send(pb.CreateWorldRequest())
            time.sleep(IDLE)
            assert bytes(conn.send(step(3)).observations[1].uint8s.array) == bytes([3]) * 4


# -- grpc-js client, our server ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def catch():
    server = servers.start(Catch, max_message_size=1 << 20)
    yield server
    server.stop()


EPISODE = [{"kind": "create_world"}, {"kind": "create_world"}, {"kind": "create_world"}]


def test_grpcjs_client_with_gzip(catch):
    result = grpcjs_client(catch.address, EPISODE, gzip=True)
    assert result["code"] == OK and result["answers"] == ["create_world"] * 3


def test_grpcjs_client_closes_gracefully_mid_stream(catch):
    result = grpcjs_client(catch.address, EPISODE, closeAfter=1)
    assert result["code"] == OK and result["answers"] == ["create_world"] * 3


def test_grpcjs_client_sends_32kb_of_metadata(catch):
    """Past our default header-list limit (16 KiB, as gRPC's servers): RESOURCE_EXHAUSTED naming it;
    a server that raises the limit takes the 32 kB."""
    result = grpcjs_client(catch.address, EPISODE, metadataBytes=32_000)
    assert result["code"] == RESOURCE_EXHAUSTED and "max_header_list_size" in result["details"], result
    with servers.start(Catch, limits=LARGE_HEADERS) as roomy:
        result = grpcjs_client(roomy.address, EPISODE, metadataBytes=32_000)
    assert result["code"] == OK and len(result["answers"]) == 3


def test_grpcjs_client_oversized_message_is_resource_exhausted(catch):
    result = grpcjs_client(catch.address, [], blobBytes=2 << 20)
    assert result["code"] == RESOURCE_EXHAUSTED and "1048576" in result["details"]


def test_grpcjs_client_over_tls_with_a_token(tmp_path):
    cert, key = self_signed(tmp_path)
    server = servers.start(Catch, tls=(cert, key), token="s3cret")
    try:
        result = grpcjs_client(server.address, EPISODE, ca=cert, token="s3cret", gzip=True)
        assert result["code"] == OK and len(result["answers"]) == 3
        refused = grpcjs_client(server.address, EPISODE, ca=cert)
        assert refused["code"] == UNAUTHENTICATED
    finally:
        server.stop()
