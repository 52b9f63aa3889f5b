"""What a hostile client may cost our server's transport (issue 23, findings 3 to 7 and 12).

Each attack is measured as it is made, against a real server over loopback:
the server's resident memory (it runs in this process) before and after, an
honest client's 100 steps during the attack, and the time until what the
attack held is released.
"""
from __future__ import annotations

import time

from typing import Iterator

import grpc
import gymnasium as gym
import hpack
import numpy as np
import pytest
import servers
from hostile import BOUND, MB, Honest, resident
from raw_h2 import RawClient, data, message

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.wire import METHOD_PATH, pb
from dmrpc_gym.transport.frames import DATA, END_HEADERS, FLOW_CONTROL_ERROR, HEADERS, frame
from dmrpc_gym.worlds.catch import Catch


@pytest.fixture(scope="module")
def catch():
    server = servers.start(Catch)
    yield server
    server.stop()


def unknown_path_calls(address: str, calls: int, path_length: int) -> float:
    """Make ``calls`` calls on one connection whose ``:path`` is ``path_length`` bytes of text;
    the seconds until the last one's refusal came back."""
    raw = RawClient(address, timeout=60)
    block = hpack.Encoder().encode([(":method", "POST"), (":scheme", "http"), (":path", "/" + "x" * path_length),
                                    (":authority", "x"), ("content-type", "application/grpc")], huffman=False)
    try:
        start = time.monotonic()
        for k in range(calls):       # the block refers to no dynamic-table entry: each stream may reuse it
            raw.send(frame(HEADERS, END_HEADERS, 1 + 2 * k, block))
        for k in range(calls):
            assert raw.trailers(1 + 2 * k)["grpc-status"] == "12"
        return time.monotonic() - start
    finally:
        raw.close()


def test_an_unknown_path_is_echoed_at_a_bounded_linear_cost(catch):
    """Finding 4: 40 calls with a 60 KB path cost the server 9.7 s of CPU (hpack's Huffman coder is
    quadratic), stalling every client. The echo is now cut at 16 KiB and not Huffman coded."""
    honest = Honest(catch.address)
    honest.start()
    took = unknown_path_calls(catch.address, 40, 60_000)
    assert honest.finished()
    assert took < 3.0, f"40 refusals of a 60 KB path took {took:.1f} s"
    raw = RawClient(catch.address)
    try:
        raw.send(raw.request_headers(1, path="/" + "y" * 60_000))
        message = raw.trailers(1)["grpc-message"]
        assert "y" * 16_000 in message and len(message) < 17_000 and "more characters" in message
    finally:
        raw.close()


# -- finding 3: inbound flow control ------------------------------------------------------------
class Slow(gym.Env):
    """A world whose steps take ``delay`` seconds (on a worker thread) and whose observation is ``size`` floats."""

    metadata = {"render_modes": []}
    BUILT: list[float] = []

    def __init__(self, delay: float = 0.0, size: int = 1, build: float = 0.0):
        Slow.BUILT.append(build)
        time.sleep(build)
        self.delay = float(delay)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (int(size),), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        time.sleep(self.delay)
        return np.zeros(self.observation_space.shape, np.float32), 0.0, False, False, {}


def joined(raw: RawClient, sid: int = 1, **settings) -> None:
    """Open ``sid``, and create, join and reset a world of ``settings`` on it (answers read)."""
    raw.send(raw.request_headers(sid))
    create = pb.EnvironmentRequest(create_world=pb.CreateWorldRequest(
        settings={k: tensors.pack(v) for k, v in settings.items()}))
    raw.send(data(sid, message(create)))
    name = first_answer(raw, sid).create_world.world_name
    raw.send(data(sid, message(pb.EnvironmentRequest(join_world=pb.JoinWorldRequest(world_name=name)))))
    first_answer(raw, sid)
    raw.send(data(sid, message(pb.EnvironmentRequest(reset=pb.ResetRequest()))))
    assert first_answer(raw, sid).WhichOneof("payload") == "reset"


def first_answer(raw: RawClient, sid: int) -> pb.EnvironmentResponse:
    """The next whole answer on ``sid`` (one DATA frame holds a small one)."""
    while (got := raw.next_frame()) is not None:
        kind, _, stream, payload = got
        if kind == DATA and stream == sid and payload:
            return pb.EnvironmentResponse.FromString(payload[5:])
    raise ConnectionError("closed before an answer")


def step_request(blob: int = 0) -> bytes:
    """A Step; ``blob`` bytes of padding ride along in an unknown action (the answer is an error)."""
    actions = {999: pb.Tensor(uint8s=pb.Tensor.Uint8Array(array=bytes(blob)))} if blob else {}
    return message(pb.EnvironmentRequest(step=pb.StepRequest(actions=actions)))


def flood_raw(raw: RawClient, chunk: bytes, total: int, patience: float = 3.0) -> int:
    """Send ``chunk`` until ``total`` bytes are out or the server stops taking them for ``patience`` s."""
    raw.sock.settimeout(patience)
    sent = 0
    try:
        while sent < total:
            raw.sock.sendall(chunk)
            sent += len(chunk)
    except (TimeoutError, ConnectionError, OSError):
        pass
    return sent


@pytest.fixture
def slow_server():
    server = servers.start(Slow)
    yield server
    server.stop()


def requests_of(*requests: pb.EnvironmentRequest, then=()) -> Iterator[pb.EnvironmentRequest]:
    yield from requests
    yield from then


def test_a_stalled_stream_queues_no_more_than_its_window(slow_server):
    """768 MB queued behind a stalled stream cost +771 MB. The client may now send what the session
    consumed plus one largest message (64 MiB): grpcio, which keeps to flow control, waits there; a
    peer that sends past the window is a FLOW_CONTROL_ERROR."""
    before = resident()
    blob = pb.Tensor(uint8s=pb.Tensor.Uint8Array(array=bytes(MB)))
    stalled = pb.EnvironmentRequest(step=pb.StepRequest())
    flood = (pb.EnvironmentRequest(step=pb.StepRequest(actions={999: blob})) for _ in range(400))
    with grpc.insecure_channel(slow_server.address) as channel:
        call = channel.stream_stream(METHOD_PATH, request_serializer=pb.EnvironmentRequest.SerializeToString,
                                     response_deserializer=pb.EnvironmentResponse.FromString)
        answers = call(requests_of(
            pb.EnvironmentRequest(create_world=pb.CreateWorldRequest(settings={"delay": tensors.pack(20.0)})),
            pb.EnvironmentRequest(join_world=pb.JoinWorldRequest(world_name="world-1")),
            pb.EnvironmentRequest(reset=pb.ResetRequest()), stalled, stalled, then=flood), timeout=60)
        for _ in range(3):                         # created, joined, reset: the next step takes 20 s
            next(answers)
        time.sleep(2)                              # the flood goes as far as the window lets it
        honest = Honest(slow_server.address)
        honest.start()
        assert honest.finished()
        grown = resident() - before
        answers.cancel()
    assert grown < BOUND, f"+{grown / MB:.0f} MB queued behind a stalled stream"

    raw = RawClient(slow_server.address, timeout=10)
    try:
        joined(raw, delay=20.0)
        raw.send(data(1, step_request() + step_request()))
        flood_raw(raw, data(1, step_request(MB - 64)), 200 * MB)
        assert raw.goaway()[0] == FLOW_CONTROL_ERROR
    finally:
        raw.close()
