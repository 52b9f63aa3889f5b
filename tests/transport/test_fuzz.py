"""A fuzzed decoder (issue 23): random and mutated requests to the server, malicious answers to the client.

Each input gets an error or a result: never a crash (an exception of an
unexpected kind), a hang, or an allocation past the stated bound. The corpus
starts from every message kind the compliance suite sends; hypothesis mutates
it (bytes flipped, cut, spliced) and builds tensors with lying shapes and
dtypes. The runs are derandomized, so CI sees the same examples every time;
``DMRPC_FUZZ_EXAMPLES=N`` runs N examples per test instead of the default.
"""
from __future__ import annotations

import asyncio
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dmrpc_gym import DmRpcEnv
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import METHOD, SERVICE, pb
from dmrpc_gym.server.envs.factories import Factory
from dmrpc_gym.server.worlds.registry import WorldRegistry
from dmrpc_gym.server.serving.session import Session
from dmrpc_gym.worlds.catch import Catch
from hostile import BOUND, MB, resident, stepped_beside
from fuzzing import both_paths, fuzz_settings  # noqa: F401 - both_paths: the fixture pytestmark uses
from raw_h2 import RawClient, data, message

pytestmark = pytest.mark.usefixtures("both_paths")   # each test with the steady-state path off, then on


# -- the corpus: what the compliance suite sends ------------------------------------------------

def corpus() -> list[bytes]:
    """One serialized request of every kind the compliance suite sends, with settings and actions."""
    def request(**payload) -> bytes:
        return pb.EnvironmentRequest(**payload).SerializeToString()
    rows, paddle = tensors.pack(5), tensors.pack(np.int8(1))
    return [
        request(create_world=pb.CreateWorldRequest(settings={"rows": rows, "seed": tensors.pack(3)})),
        request(join_world=pb.JoinWorldRequest(world_name="")),
        request(join_world=pb.JoinWorldRequest(world_name="world-1", settings={"agent": tensors.pack(0)})),
        request(step=pb.StepRequest(actions={1: paddle}, requested_observations=[1, 2])),
        request(step=pb.StepRequest()),
        request(reset=pb.ResetRequest(settings={"seed": tensors.pack(7)})),
        request(reset_world=pb.ResetWorldRequest(world_name="", settings={"rows": rows})),
        request(leave_world=pb.LeaveWorldRequest()),
        request(destroy_world=pb.DestroyWorldRequest(world_name="world-1")),
    ]


_PAYLOADS = ["floats", "doubles", "int8s", "int32s", "int64s", "uint8s", "uint32s", "uint64s", "bools",
             "strings", "protos"]
_DIMS = st.sampled_from([-2, -1, 0, 1, 2, 3, 1 << 20, (1 << 31) - 1, -(1 << 31)])   # shape is int32


@st.composite
def lying_tensors(draw) -> pb.Tensor:
    """A tensor whose shape and payload need not agree (a one-element payload and a huge shape, say)."""
    tensor = pb.Tensor()
    kind = draw(st.sampled_from(_PAYLOADS))
    n = draw(st.integers(0, 6))
    field = getattr(tensor, kind)
    if kind in ("int8s", "uint8s"):
        field.array = bytes(draw(st.lists(st.integers(0, 255), min_size=n, max_size=n)))
    elif kind == "strings":
        field.array.extend(draw(st.lists(st.text(max_size=8), min_size=n, max_size=n)))
    elif kind == "protos":
        field.array.add().value = b"x" * n
    elif kind == "bools":
        field.array.extend([bool(i % 2) for i in range(n)])
    elif kind in ("floats", "doubles"):
        field.array.extend(draw(st.lists(st.floats(width=32), min_size=n, max_size=n)))
    else:
        lo, hi = (0, 255) if kind.startswith("u") else (-128, 127)
        field.array.extend(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)))
    tensor.shape.extend(draw(st.lists(_DIMS, max_size=4)))
    return tensor


@st.composite
def tensor_requests(draw) -> bytes:
    """A well-formed request whose tensors lie: settings of every kind of request, and actions."""
    names = st.sampled_from(["rows", "seed", "agent", "columns", "", "x" * 300])
    settings_ = draw(st.dictionaries(names, lying_tensors(), max_size=3))
    which = draw(st.sampled_from(["create", "join", "reset", "reset_world", "step"]))
    if which == "step":
        actions = draw(st.dictionaries(st.sampled_from([0, 1, 2, 99, (1 << 64) - 1]), lying_tensors(), max_size=3))
        uids = draw(st.lists(st.sampled_from([0, 1, 2, 3, 1 << 40]), max_size=6))
        body = pb.EnvironmentRequest(step=pb.StepRequest(actions=actions, requested_observations=uids))
    elif which == "create":
        body = pb.EnvironmentRequest(create_world=pb.CreateWorldRequest(settings=settings_))
    elif which == "join":
        body = pb.EnvironmentRequest(join_world=pb.JoinWorldRequest(world_name="", settings=settings_))
    elif which == "reset":
        body = pb.EnvironmentRequest(reset=pb.ResetRequest(settings=settings_))
    else:
        body = pb.EnvironmentRequest(reset_world=pb.ResetWorldRequest(world_name="", settings=settings_))
    return body.SerializeToString()


@st.composite
def mutated(draw, seeds: list[bytes]) -> bytes:
    """A corpus message with bytes flipped, cut, spliced or appended (or plain random bytes)."""
    raw = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "random"]))
        at = draw(st.integers(0, len(raw)))
        if op == "flip" and raw:
            raw[min(at, len(raw) - 1)] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del raw[at:at + draw(st.integers(1, 16))]
        elif op == "insert":
            raw[at:at] = draw(st.binary(min_size=1, max_size=12))
        else:
            raw = bytearray(draw(st.binary(max_size=64)))
    return bytes(raw)


def _request(**payload) -> bytes:
    return pb.EnvironmentRequest(**payload).SerializeToString()


def _broadcast(shape: list[int]) -> pb.Tensor:
    """One element claiming ``shape`` (finding 2: broadcast before any check, +1 GB and more)."""
    return pb.Tensor(int8s=pb.Tensor.Int8Array(array=b"\x01"), shape=shape)


def _one_proto(shape: list[int]) -> pb.Tensor:
    """One proto claiming ``shape``: with a 0 in it, no cell (np.ndindex built a 2**31-tuple: +24 GB)."""
    tensor = pb.Tensor(shape=shape)
    tensor.protos.array.add().value = b"x"
    return tensor


def _empty_proto() -> pb.Tensor:
    """One empty proto message: numpy's repr of the array it makes raises, and the refusals that
    showed the setting became INTERNAL answers."""
    tensor = pb.Tensor(shape=[-1])
    tensor.protos.array.add()
    return tensor


_JOIN = _request(join_world=pb.JoinWorldRequest(world_name=""))
#: Sequences of requests to one session; half start joined, so that fuzzed steps and resets reach a world.
SERVER_INPUTS = st.builds(lambda joined, rest: [_JOIN] * joined + rest, st.booleans(),
                          st.lists(st.one_of(mutated(corpus()), tensor_requests(), st.sampled_from(corpus())),
                                   min_size=1, max_size=5))


# -- the server's decode path --------------------------------------------------------------------

@pytest.fixture
def registry():        # (one per run: the general path's worlds must not fill the steady path's registry)
    registry = WorldRegistry(Factory(Catch), max_worlds=64)
    yield registry
    registry.close()


def answers_within(session: Session, requests: list[bytes], seconds: float = 5.0) -> list[pb.EnvironmentResponse]:
    """Each request's answer, parsed; a request that raised or hung fails the test."""
    async def run() -> list[pb.EnvironmentResponse]:
        out = []
        try:
            for raw in requests:
                start = time.monotonic()
                answer = await asyncio.wait_for(session.handle(raw), seconds)
                assert time.monotonic() - start < seconds
                if isinstance(answer, list):
                    answer = b"".join(bytes(piece) for piece in answer)
                out.append(pb.EnvironmentResponse.FromString(answer))
        finally:
            session.close()
        return out
    return asyncio.run(run())


def test_the_server_answers_every_fuzzed_request(registry):
    before = resident()
    kinds: set[str] = set()
    ran: list[int] = []

    @fuzz_settings(300)
    @given(SERVER_INPUTS)
    @example([_JOIN, _request(step=pb.StepRequest(actions={1: _broadcast([(1 << 31) - 1, 4])}))])
    @example([_request(create_world=pb.CreateWorldRequest(settings={"rows": _broadcast([1 << 30])}))])
    @example([_JOIN, _request(step=pb.StepRequest(requested_observations=[1] * 100_000))])
    @example([_request(join_world=pb.JoinWorldRequest(settings={"agent": _one_proto([(1 << 31) - 1, 0])}))])
    @example([_request(reset_world=pb.ResetWorldRequest(settings={"seed": _empty_proto()}))])
    @example([_request(create_world=pb.CreateWorldRequest(settings={"rows": _empty_proto()}))])
    def check(requests: list[bytes]) -> None:
        ran.append(len(requests))
        for response in answers_within(Session(registry), requests):
            which = response.WhichOneof("payload")
            assert which is not None, "an answer with no payload"
            kinds.add(which)
            if which == "error":      # a refusal names what is wrong; INTERNAL would be a server bug
                assert response.error.message and response.error.code not in (0, 13), response.error

    check()
    print(f"{len(ran)} examples, {sum(ran)} requests")
    assert {"error", "create_world", "join_world", "step"} <= kinds, kinds   # the fuzz reached past the parser
    assert resident() - before < BOUND, f"+{(resident() - before) / MB:.0f} MB"


def test_fuzzed_frames_on_a_real_connection_leave_the_server_serving():
    """Truncated and mutated frames on real connections: each connection may end, the server goes on."""
    from dmrpc_gym.server import Server
    ran: list[int] = []
    with Server(Catch) as server:
        before = resident()

        @fuzz_settings(25)
        @given(st.lists(mutated([message(pb.EnvironmentRequest.FromString(raw)) for raw in corpus()]),
                        min_size=1, max_size=4), st.integers(0, 40))
        def check(bodies: list[bytes], cut: int) -> None:
            ran.append(len(bodies))
            raw = RawClient(server.address, timeout=5)
            try:
                stream = raw.request_headers(1) + b"".join(data(1, body) for body in bodies)
                raw.send(stream[:len(stream) - cut] if cut else stream)
            finally:
                raw.close()

        check()
        print(f"{len(ran)} connections")
        stepped_beside(server.address)
        assert resident() - before < BOUND


# -- the client's decode path ---------------------------------------------------------------------

class RawAnswers:
    """A grpcio server that answers each request kind with the bytes the test sets (no parsing on its side)."""

    def __init__(self):
        self.answers: dict[str, bytes] = {}
        self._server = grpc.server(futures.ThreadPoolExecutor(4))
        handler = grpc.stream_stream_rpc_method_handler(self._process)     # bytes in, bytes out
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {METHOD: handler})])
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def _process(self, requests, context):
        for raw in requests:
            kind = pb.EnvironmentRequest.FromString(raw).WhichOneof("payload")
            yield self.answers.get(kind, b"")

    def stop(self) -> None:
        self._server.stop(None).wait(5)


def honest_answers() -> dict[str, bytes]:
    """What a Catch server answers, recorded from the real one (the corpus of the client fuzz)."""
    from dmrpc_gym.client.connection import Connection
    from dmrpc_gym.server import Server
    out = {}
    with Server(Catch) as server, Connection(server.address) as conn:
        for field, request in (("create_world", pb.CreateWorldRequest()),
                               ("join_world", None), ("step", pb.StepRequest(requested_observations=[1, 2, 3])),
                               ("reset", pb.ResetRequest()), ("leave_world", pb.LeaveWorldRequest()),
                               ("destroy_world", None)):
            if field == "join_world":
                request = pb.JoinWorldRequest(world_name=out["create_world"].create_world.world_name)
            if field == "destroy_world":
                request = pb.DestroyWorldRequest(world_name=out["create_world"].create_world.world_name)
            conn.submit(request)
            out[field] = pb.EnvironmentResponse(**{field: conn.receive()})
    return {field: response.SerializeToString() for field, response in out.items()}


def _request_answer(**payload) -> bytes:
    return pb.EnvironmentResponse(**payload).SerializeToString()


def _huge_spec_answer() -> bytes:
    spec = pb.TensorSpec(name="board", dtype=pb.DOUBLE, shape=[(1 << 31) - 1, (1 << 31) - 1])
    answer = pb.JoinWorldResponse()
    answer.specs.observations[1].CopyFrom(spec)
    answer.specs.actions[1].CopyFrom(pb.TensorSpec(name="paddle", dtype=pb.INT8))
    return _request_answer(join_world=answer)


#: What the client may raise for a malicious answer: named errors, never a crash.
CLIENT_ERRORS = (ValueError, TypeError, ConnectionError, DmRpcError, TimeoutError, RuntimeError)


@pytest.fixture(scope="module")
def raw_server():
    server = RawAnswers()
    yield server
    server.stop()


def test_the_client_takes_every_fuzzed_answer_or_names_what_is_wrong(raw_server):
    honest = honest_answers()
    before = resident()
    outcomes: set[str] = set()
    ran: list[str] = []

    @fuzz_settings(120)
    @example("join_world", _request_answer(join_world=pb.JoinWorldResponse()))   # no specs: spaces never made
    @example("join_world", b"\x13" + honest["join_world"][1:])                   # no EnvironmentResponse
    @example("join_world", _huge_spec_answer())                                 # bounds of 2**62 elements
    @given(st.sampled_from(["join_world", "step", "reset", "create_world"]),
           st.one_of(mutated([honest[k] for k in ("join_world", "step", "reset", "create_world")]),
                     st.sampled_from(list(honest.values()))))
    def check(field: str, answer: bytes) -> None:
        ran.append(field)
        raw_server.answers = {**honest, field: answer}
        done = threading.Event()
        start = time.monotonic()
        try:
            env = DmRpcEnv(raw_server.address, connect_timeout=5, step_timeout=5)
            try:
                env.reset(seed=0)
                env.step(env.action_space.sample())
                outcomes.add("stepped")
            finally:
                env.close()
        except CLIENT_ERRORS as err:
            outcomes.add(type(err).__name__)
        finally:
            done.set()
        assert time.monotonic() - start < 15

    check()
    print(f"{len(ran)} examples: {sorted(outcomes)}")
    assert "stepped" in outcomes and len(outcomes) > 1, outcomes
    assert resident() - before < BOUND, f"+{(resident() - before) / MB:.0f} MB"
