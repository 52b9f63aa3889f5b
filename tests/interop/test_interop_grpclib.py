"""Interop with grpclib (python-hyper's h2), both directions: our client against a grpclib
server with keepalive pings, and a grpclib client against our server."""
from __future__ import annotations

import os
import ssl
import time

import pytest
import servers
from raw_h2 import LARGE_HEADERS
from interop_peers import GrpclibServer, grpclib_exchange, self_signed

from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.worlds.catch import Catch

if os.environ.get("DMRPC_REQUIRE_INTEROP") != "1":     # CI: a missing grpclib is a failure
    pytest.importorskip("grpclib")
IDLE = 6.0           # seconds the client leaves the connection idle: three of the server's ping timeouts


def create() -> pb.EnvironmentRequest:
    return pb.EnvironmentRequest(create_world=pb.CreateWorldRequest())


# -- our client, grpclib server -------------------------------------------------------------------
def test_our_client_survives_an_idle_gap_under_keepalive_pings():
    with GrpclibServer(keepalive=0.2, ping_timeout=2.0) as server:
        with Connection(server.address) as conn:
            assert conn.send(pb.CreateWorldRequest()).world_name == "echo"
            time.sleep(IDLE)          # the server pings every 0.2 s and drops us after 2 s unanswered
            answer = conn.send(pb.StepRequest(actions={1: pb.Tensor(int32s=pb.Tensor.Int32Array(array=[7]))}))
            assert bytes(answer.observations[1].uint8s.array) == bytes([7]) * 4
            time.sleep(IDLE)
            assert conn.send(pb.StepRequest()).state == pb.RUNNING


def test_our_client_sends_32kb_of_metadata_in_continuation_frames():
    with GrpclibServer() as server:
        with Connection(server.address, metadata=[("x-long-token", "t" * 32_000)]) as conn:
            assert conn.send(pb.CreateWorldRequest()).world_name == "echo"


def test_our_client_refuses_an_oversized_answer_from_grpclib():
    with GrpclibServer(obs_size=100_000) as server:
        with Connection(server.address, max_message_size=50_000) as conn:
            conn.send(pb.CreateWorldRequest())
            with pytest.raises(DmRpcError, match="RESOURCE_EXHAUSTED.*exceeds the maximum message size of 50000"):
                conn.send(pb.StepRequest())


def test_our_client_over_tls_to_grpclib(tmp_path):
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2"])
    with GrpclibServer(tls=context, keepalive=0.2, ping_timeout=2.0) as server:
        with Connection(server.address, tls=cert) as conn:
            conn.send(pb.CreateWorldRequest())
            time.sleep(IDLE)
            assert bytes(conn.send(pb.StepRequest()).observations[1].uint8s.array) == bytes(4)


# -- grpclib client, our server ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def catch():
    server = servers.start(Catch, max_message_size=1 << 20, limits=LARGE_HEADERS)   # 32-40 KB header lists
    yield server
    server.stop()


def test_grpclib_client_runs_an_episode(catch):
    world = grpclib_exchange(catch.address, [create()])[0].create_world.world_name
    join = pb.EnvironmentRequest(join_world=pb.JoinWorldRequest(world_name=world))
    reset = pb.EnvironmentRequest(reset=pb.ResetRequest())
    step = pb.EnvironmentRequest(step=pb.StepRequest(actions={1: pb.Tensor(int8s=pb.Tensor.Int8Array(array=b"\x00"))}))
    answers = grpclib_exchange(catch.address, [join, reset] + [step] * 5)
    assert [a.WhichOneof("payload") for a in answers] == ["join_world", "reset"] + ["step"] * 5


def test_grpclib_client_sends_32kb_of_metadata(catch):
    answers = grpclib_exchange(catch.address, [create()], metadata={"x-long-token": "t" * 32_000})
    assert answers[0].create_world.world_name


def test_grpclib_client_reads_trailers_split_in_continuation_frames(catch):
    from grpclib.const import Status
    answers = grpclib_exchange(catch.address, [create()], path="/" + "x" * 40_000)
    assert answers[0].status == Status.UNIMPLEMENTED and "x" * 1000 in answers[0].message


def test_grpclib_client_oversized_message_is_resource_exhausted(catch):
    from grpclib.const import Status
    big = pb.EnvironmentRequest(create_world=pb.CreateWorldRequest(settings={"blob": pb.Tensor(
        uint8s=pb.Tensor.Uint8Array(array=bytes(2 << 20)))}))
    answers = grpclib_exchange(catch.address, [big])
    assert answers[0].status == Status.RESOURCE_EXHAUSTED and "1048576" in answers[0].message


def test_grpclib_client_over_tls_with_a_token(tmp_path):
    from grpclib.const import Status
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(cafile=cert)
    context.set_alpn_protocols(["h2"])
    server = servers.start(Catch, tls=(cert, key), token="s3cret")
    try:
        answers = grpclib_exchange(server.address, [create()], tls=context,
                                   metadata={"authorization": "Bearer s3cret"})
        assert answers[0].create_world.world_name
        refused = grpclib_exchange(server.address, [create()], tls=context)
        assert refused[0].status == Status.UNAUTHENTICATED
    finally:
        server.stop()

