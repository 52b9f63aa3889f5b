"""gRPC health checking on our server (issue 34, item 1), with the official client: grpcio-health-checking's
stub over grpcio channels, over TCP, a Unix socket and TLS; Check and Watch, a change seen by Watch when the
server drains or reaches max_worlds, the token and its exemption, and unknown methods and services.
(grpc-go's health client: tests/interop/test_interop_go_health.py.)"""
from __future__ import annotations

import threading

import grpc
import numpy as np
import pytest
from interop_peers import self_signed

from dmrpc_gym import DmRpcEnv
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import METHOD_PATH, SERVICE, pb
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.catch import Catch

health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2", reason="grpcio-health-checking (the test extra)")
from grpc_health.v1 import health_pb2_grpc  # noqa: E402

SERVING, NOT_SERVING, SERVICE_UNKNOWN = (health_pb2.HealthCheckResponse.SERVING,
                                         health_pb2.HealthCheckResponse.NOT_SERVING,
                                         health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)
TOKEN = "s3cret"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls"))


class Reached:
    """A started server (``how``: tcp, unix or tls) with what reaches it: a grpcio channel, and the
    keyword arguments our own client needs."""

    def __init__(self, how: str, tmp_path, certificate, **options):
        address, self.client = "127.0.0.1:0", {}
        if how == "unix":
            address = f"unix:{tmp_path / 'health.sock'}"
        if how == "tls":
            options["tls"] = certificate
            self.client = {"tls": certificate[0]}
        self.server = Server(Catch, address=address, **options).start()
        self.how = how
        self.channels: list[grpc.Channel] = []

    def channel(self) -> grpc.Channel:
        if self.how == "tls":
            with open(self.client["tls"], "rb") as f:
                made = grpc.secure_channel(self.server.address, grpc.ssl_channel_credentials(f.read()))
        else:
            made = grpc.insecure_channel(self.server.address)
        self.channels.append(made)
        return made

    def stub(self) -> health_pb2_grpc.HealthStub:
        return health_pb2_grpc.HealthStub(self.channel())

    def close(self) -> None:
        for made in self.channels:
            made.close()
        self.server.stop()


@pytest.fixture
def reach(tmp_path, certificate):
    made = []

    def start(how: str = "tcp", **options) -> Reached:
        made.append(Reached(how, tmp_path, certificate, **options))
        return made[-1]
    yield start
    for reached in made:
        reached.close()


def check(stub, service: str = "", **kwargs) -> int:
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10, **kwargs).status


def watch(stub, service: str = "", **kwargs):
    return stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=60, **kwargs)


@pytest.mark.parametrize("how", ["tcp", "unix", "tls"])
def test_check_and_watch_and_the_drain_seen_by_watch(reach, how):
    reached = reach(how)
    stub = reached.stub()
    assert check(stub) == SERVING and check(stub, SERVICE) == SERVING
    with pytest.raises(grpc.RpcError) as unknown:
        check(stub, "no.such.Service")
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND and "no.such.Service" in unknown.value.details()
    assert next(watch(stub, "no.such.Service")).status == SERVICE_UNKNOWN
    watching = watch(stub, SERVICE)
    assert next(watching).status == SERVING

    env = DmRpcEnv(reached.server.address, **reached.client)     # an episode running through the drain
    drained = []
    try:
        env.reset(seed=1)
        drainer = threading.Thread(target=lambda: drained.append(reached.server.drain(grace=60)))
        drainer.start()
        assert next(watching).status == NOT_SERVING                 # the change, on the open Watch
        assert check(reached.stub()) == NOT_SERVING                 # a new connection: still listening
        env.step(np.int8(0))                                         # the running episode goes on
    finally:
        env.close()
    drainer.join(30)
    assert drained == [True] and not drainer.is_alive()
    with pytest.raises(grpc.RpcError) as ended:                      # the watch ends with the server
        next(watching)
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE


def test_not_serving_while_max_worlds_are_held(reach):
    reached = reach(max_worlds=1)
    stub = reached.stub()
    watching = watch(stub)
    assert next(watching).status == SERVING
    env = DmRpcEnv(reached.server.address)                           # creates the one world allowed
    try:
        assert next(watching).status == NOT_SERVING
        assert check(stub, SERVICE) == NOT_SERVING
    finally:
        env.close()                                                  # destroys it
    assert next(watching).status == SERVING and check(stub) == SERVING


def test_health_needs_the_token_unless_exempt(reach):
    guarded = reach(token=TOKEN)
    stub = guarded.stub()
    with pytest.raises(grpc.RpcError) as refused:
        check(stub)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert check(stub, metadata=AUTH) == SERVING
    assert next(watch(stub, metadata=AUTH)).status == SERVING

    exempt = reach(token=TOKEN, health_without_token=True)
    stub = exempt.stub()
    assert check(stub) == SERVING and next(watch(stub, SERVICE)).status == SERVING
    with Connection(exempt.server.address, connect_timeout=None) as conn:   # Process still needs it
        with pytest.raises(DmRpcError, match="UNAUTHENTICATED"):
            conn.send(pb.CreateWorldRequest())
    reflect = exempt.channel().stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")
    with pytest.raises(grpc.RpcError) as reflection:                     # and so does reflection
        list(reflect(iter([b""]), timeout=10))
    assert reflection.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_an_unknown_method_is_unimplemented_naming_those_served(reach):
    channel = reach().channel()
    with pytest.raises(grpc.RpcError) as err:
        channel.unary_unary("/no.such.Service/Call")(b"", timeout=10)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    for path in (METHOD_PATH, "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
                 "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"):
        assert path in err.value.details()


def test_check_is_unary_and_refuses_what_is_no_request(reach):
    channel = reach().channel()
    twice = channel.stream_unary("/grpc.health.v1.Health/Check")
    with pytest.raises(grpc.RpcError) as err:
        twice(iter([b"", b""]), timeout=10)
    assert err.value.code() == grpc.StatusCode.INTERNAL and "unary" in err.value.details()
    garbage = channel.unary_unary("/grpc.health.v1.Health/Check")
    with pytest.raises(grpc.RpcError) as err:
        garbage(b"\xff\xff", timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "HealthCheckRequest" in err.value.details()


def test_a_process_client_beside_health_streams_on_one_connection(reach):
    """A Watch and Checks on the same HTTP/2 connection as Process streams change nothing for them."""
    reached = reach()
    channel = reached.channel()
    stub = health_pb2_grpc.HealthStub(channel)
    watching = watch(stub)
    assert next(watching).status == SERVING
    process = channel.stream_stream(METHOD_PATH, request_serializer=pb.EnvironmentRequest.SerializeToString,
                                    response_deserializer=pb.EnvironmentResponse.FromString)
    requests = [pb.EnvironmentRequest(create_world=pb.CreateWorldRequest())]
    answers = list(process(iter(requests), timeout=30))
    name = answers[0].create_world.world_name
    steps = [pb.EnvironmentRequest(join_world=pb.JoinWorldRequest(world_name=name))]
    steps += [pb.EnvironmentRequest(step=pb.StepRequest()) for _ in range(5)]
    steps += [pb.EnvironmentRequest(leave_world=pb.LeaveWorldRequest())]
    answers = list(process(iter(steps), timeout=30))
    assert [a.WhichOneof("payload") for a in answers] == ["join_world"] + ["step"] * 5 + ["leave_world"]
    assert check(stub) == SERVING
    watching.cancel()
    destroyed = list(process(iter([pb.EnvironmentRequest(destroy_world=pb.DestroyWorldRequest(world_name=name))]),
                             timeout=30))
    assert destroyed[0].WhichOneof("payload") == "destroy_world"
