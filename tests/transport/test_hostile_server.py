"""What a hostile client may cost our server's transport (issue 23, findings 3 to 7 and 12).

Each attack is measured as it is made, against a real server over loopback:
the server's resident memory (it runs in this process) before and after, an
honest client's 100 steps during the attack, and the time until what the
attack held is released.
"""
from __future__ import annotations

import threading
import time

from typing import Iterator

import grpc
import hpack
import pytest
import servers
from hostile import BOUND, Honest, MB, measured, resident, stepped_beside
from interop_peers import self_signed
from raw_h2 import LARGE_HEADERS, RawClient, connections, data, first_answer, joined, message, released, step_request
from hostile import Slow

from dmrpc_gym import DmRpcEnv
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.wire import METHOD_PATH, pb
from dmrpc_gym.transport import compression
from dmrpc_gym.transport.frames import (CANCEL, END_HEADERS, END_STREAM, ENHANCE_YOUR_CALM, FLOW_CONTROL_ERROR, GOAWAY, HEADERS,
                                        NO_ERROR, PING, PREFACE, RST_STREAM, SETTINGS, U32, frame)
from dmrpc_gym.transport.limits import ConnectionLimits
from dmrpc_gym.worlds.catch import Catch


@pytest.fixture(scope="module")
def catch():
    server = servers.start(Catch, limits=LARGE_HEADERS)     # a 60 KB :path is echoed
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
    measured("40 calls with a 60 KB :path (finding 4)", f"{took:.2f} s until the last refusal", honest)
    assert took < 3.0, f"40 refusals of a 60 KB path took {took:.1f} s"
    raw = RawClient(catch.address)
    try:
        raw.send(raw.request_headers(1, path="/" + "y" * 60_000))
        message = raw.trailers(1)["grpc-message"]
        assert "y" * 16_000 in message and len(message) < 17_000 and "more characters" in message
    finally:
        raw.close()


# -- finding 3: inbound flow control ------------------------------------------------------------
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
        honest = stepped_beside(slow_server.address)
        grown = resident() - before
        answers.cancel()
    measured("400 MB sent behind a stalled stream (finding 3)", f"{grown / MB:+.0f} MB", honest)
    assert grown < BOUND, f"{grown / MB:+.0f} MB queued behind a stalled stream"

    raw = RawClient(slow_server.address, timeout=10)
    try:
        joined(raw, delay=20.0)
        raw.send(data(1, step_request() + step_request()))
        flood_raw(raw, data(1, step_request(MB - 64)), 200 * MB)
        assert raw.goaway()[0] == FLOW_CONTROL_ERROR
    finally:
        raw.close()


def test_gzip_requests_are_inflated_one_at_a_time_as_taken(slow_server):
    """1 MB of gzip queued behind a stalled stream cost +1.1 GB: requests were inflated on arrival.
    Now each waits compressed and is inflated when the session takes it, a step at a time, and
    refused (RESOURCE_EXHAUSTED) as soon as it passes the size limit."""
    bomb = compression.compressor("gzip")(bytes(60 * MB))          # 60 KB that inflate to 60 MiB
    gzip = (("grpc-encoding", "gzip"),)
    before = resident()
    raw = RawClient(slow_server.address, timeout=30)
    try:
        joined(raw, 1, gzip, delay=20.0)
        raw.send(data(1, step_request() + step_request()))   # the second takes 20 s: what follows waits
        raw.send(b"".join(data(1, b"\x01" + len(bomb).to_bytes(4, "big") + bomb) for _ in range(8)))
        time.sleep(1)
        honest = stepped_beside(slow_server.address)
        grown = resident() - before
    finally:
        raw.close()
    measured(f"{8 * len(bomb) // 1024} KB of gzip (8 x 60 MiB inflated) waiting (finding 3)", f"{grown / MB:+.0f} MB", honest)
    assert grown < BOUND, f"{grown / MB:+.0f} MB for {8 * len(bomb) // 1024} KB of gzip waiting"

    past = compression.compressor("gzip")(bytes(80 * MB))           # inflates past 64 MiB
    raw = RawClient(slow_server.address, timeout=30)
    try:
        raw.send(raw.request_headers(1, gzip) + data(1, b"\x01" + len(past).to_bytes(4, "big") + past))
        fields = raw.trailers(1)
        assert fields["grpc-status"] == "8" and "max_message_size" in fields["grpc-message"]
    finally:
        raw.close()


# -- finding 5: queued work ---------------------------------------------------------------------
def opened_and_reset(raw: RawClient, streams: int, request: pb.EnvironmentRequest) -> bytes:
    """``streams`` calls, each sending ``request`` and then resetting its stream (RST_STREAM CANCEL)."""
    body = message(request)
    return b"".join(raw.request_headers(sid) + data(sid, body) + frame(RST_STREAM, 0, sid, U32.pack(CANCEL))
                    for sid in range(1, 2 * streams, 2))


def test_rapid_reset_is_cut_off_after_a_bounded_number_of_resets(catch):
    """20k streams each opened with a CreateWorld and reset at once gave a 13 s outage and +400 MB;
    past ConnectionLimits.max_resets (200) resets in a second the connection ends, ENHANCE_YOUR_CALM."""
    before = resident()
    raw = RawClient(catch.address, timeout=30)
    try:
        burst = opened_and_reset(raw, 20_000, pb.EnvironmentRequest(create_world=pb.CreateWorldRequest()))
        flood_raw(raw, burst, len(burst))
        honest = Honest(catch.address)
        honest.start()
        code, debug = raw.goaway()
        assert code == ENHANCE_YOUR_CALM and "max_resets" in debug
        assert honest.finished()
        grown = resident() - before
    finally:
        raw.close()
    measured("Rapid Reset: 20k CreateWorld streams reset (finding 5)", f"{grown / MB:+.0f} MB, ENHANCE_YOUR_CALM", honest)
    assert grown < BOUND, f"{grown / MB:+.0f} MB for a Rapid Reset burst"


def test_a_reset_stream_s_queued_world_is_never_built():
    """A reset did not cancel a CreateWorld already queued for a worker: every one was built, then
    thrown away, while the honest clients waited behind them."""
    server = servers.start(Slow, workers=2)
    Slow.BUILT.clear()
    raw = RawClient(server.address, timeout=30)
    try:
        create = pb.EnvironmentRequest(create_world=pb.CreateWorldRequest(settings={"build": tensors.pack(0.5)}))
        raw.send(opened_and_reset(raw, 40, create))
        time.sleep(0.5)
        honest = stepped_beside(server.address)
        time.sleep(1.0)
        slow_builds = Slow.BUILT.count(0.5)
    finally:
        raw.close()
        server.stop()
    measured("40 streams reset with a slow CreateWorld queued (finding 5)", f"{slow_builds} of 40 worlds built", honest)
    assert slow_builds <= 4, f"{slow_builds} of 40 worlds built for streams reset before their build began"


# -- finding 6: writes under back-pressure ------------------------------------------------------
def test_a_client_that_reads_nothing_cannot_grow_the_servers_write_buffer(slow_server):
    """A client that never reads: its SETTINGS ACKs were buffered 1:1 (+47 MB per 49 MB sent) and
    28 KB of Steps made +285 MB of answers. Answers now wait for the write buffer, and a client
    whose unread ACKs pass 4 MiB is dropped."""
    before = resident()
    steps = RawClient(slow_server.address, timeout=10)
    acks = RawClient(slow_server.address, timeout=10)
    try:
        joined(steps, size=50_000)                     # each answer carries 200 KB of observation
        flood_raw(steps, data(1, step_request() * 1500), 1)
        chunk = frame(SETTINGS, 0, 0) * (MB // 9)
        sent = flood_raw(acks, chunk, 150 * MB)
        time.sleep(1)
        honest = stepped_beside(slow_server.address)
        grown = resident() - before
    finally:
        steps.close()
        acks.close()
    measured("a client reading nothing: 1500 Steps of 200 KB answers, 150 MB of SETTINGS (finding 6)",
             f"{grown / MB:+.0f} MB; {sent / MB:.0f} MB of SETTINGS taken before the drop", honest)
    assert sent < 150 * MB, "the server took 150 MB of SETTINGS it could not acknowledge"
    assert grown < BOUND, f"+{grown / MB:.0f} MB of answers to clients that read nothing"


# -- finding 7: deadlines -----------------------------------------------------------------------
QUICK = ConnectionLimits(handshake_timeout=1, frame_timeout=1, idle_timeout=1)


@pytest.mark.parametrize("stuck", ["half a preface", "a header block never ended", "half a frame",
                                   "a connection with no stream", "a TLS handshake never begun"])
def test_a_connection_stuck_half_way_is_released_by_its_deadline(stuck, tmp_path):
    """1,000 half-preface connections were still held after 26 s, 200 with unfinished header
    blocks pinned 389 MB, 400 before the TLS handshake 122 MB for 60 s: each now ends at its
    ConnectionLimits deadline (here 1 s), while an honest client steps beside them."""
    tls = self_signed(tmp_path) if stuck == "a TLS handshake never begun" else None
    server = servers.start(Catch, limits=QUICK, tls=tls)
    raw = RawClient.__new__(RawClient)           # only its header encoder is used
    raw._encoder = hpack.Encoder()
    opening = PREFACE + frame(SETTINGS, 0, 0)
    first = {"half a preface": PREFACE[:10],
             "a header block never ended": opening + frame(HEADERS, 0, 1, bytes(16_000)),
             "half a frame": opening + frame(PING, 0, 0, bytes(8))[:12],
             "a connection with no stream": opening,
             "a TLS handshake never begun": b""}[stuck]
    try:
        socks = connections(server.address, 100, first)
        honest = Honest(server.address, **({"tls": tls[0]} if tls else {}))
        honest.start()
        took = released(socks, within=15)
        assert honest.finished()
        for sock in socks:
            sock.close()
    finally:
        server.stop()
    measured(f"100 connections stuck at {stuck} (finding 7; deadlines of 1 s here)", f"all released in {took:.1f} s", honest)
    assert took < 8, f"{stuck}: the connections were still open after {took:.0f} s"


def test_a_connection_is_idle_from_the_end_of_its_last_stream():
    """No deadline timer runs while a stream is open; the idle one starts when the last stream ends."""
    server = servers.start(Catch, limits=QUICK)
    raw = RawClient(server.address, timeout=10)
    try:
        create = pb.EnvironmentRequest(create_world=pb.CreateWorldRequest())
        raw.send(raw.request_headers(1) + data(1, message(create)))
        time.sleep(1.5)                          # open past the idle timeout: not idle
        raw.send(data(1, b"", end=True))
        assert raw.trailers(1)["grpc-status"] == "0"
        ended = time.monotonic()
        code, debug = raw.goaway()
        assert code == 0 and "idle_timeout" in debug
        assert 0.9 < time.monotonic() - ended < 3
    finally:
        raw.close()
        server.stop()


def test_a_quiet_stream_is_not_idle(catch):
    """A client that holds its stream open and says nothing (a notebook left alone) keeps its connection."""
    server = servers.start(Catch, limits=QUICK)
    env = DmRpcEnv(server.address)
    try:
        env.reset(seed=0)
        time.sleep(2.5)                         # 2.5 idle_timeouts
        env.step(env.action_space.sample())
    finally:
        env.close()
        server.stop()


# -- finding 12: etiquette ----------------------------------------------------------------------
def test_pings_too_close_together_end_the_connection_as_grpc_servers_do(catch):
    """29 idle PINGs in 3 s were all answered; past two strikes (PINGs closer than min_ping_interval,
    with no answer of ours between) it is GOAWAY ENHANCE_YOUR_CALM "too_many_pings", as grpc servers send."""
    raw = RawClient(catch.address)
    try:
        raw.send(b"".join(frame(PING, 0, 0, bytes(8)) for _ in range(29)))
        assert raw.goaway() == (ENHANCE_YOUR_CALM, "too_many_pings")
    finally:
        raw.close()
    raw = RawClient(catch.address)            # answers forgive: a PING beside each step is no strike
    try:
        joined(raw)
        for _ in range(5):
            raw.send(frame(PING, 0, 0, bytes(8)) + data(1, step_request()))
            assert first_answer(raw, 1).WhichOneof("payload") == "step"
    finally:
        raw.close()


def test_a_stopping_server_resets_the_streams_it_ends_while_their_clients_may_still_send():
    """After the UNAVAILABLE trailers, a stream whose client had not finished is reset NO_ERROR (RFC 9113
    8.1, as gRPC's servers do), before the GOAWAY and the connection's end: the stream closes by its frames."""
    server = servers.start(Catch)
    raw = RawClient(server.address)
    try:
        raw.send(raw.request_headers(1))
        raw.send(data(1, message(pb.EnvironmentRequest(create_world=pb.CreateWorldRequest()))))
        first_answer(raw, 1)
        server.stop(grace=0)
        frames = []
        while (got := raw.next_frame()) is not None:
            frames.append(got)
    finally:
        raw.close()
    seen = [(kind, sid) for kind, _, sid, _ in frames]
    trailers = next(i for i, (kind, flags, sid, _) in enumerate(frames) if kind == HEADERS and flags & END_STREAM)
    reset = seen.index((RST_STREAM, 1))
    assert trailers < reset < seen.index((GOAWAY, 0)), seen
    assert frames[reset][3] == U32.pack(NO_ERROR)


def test_a_stopping_server_ends_its_streams_unavailable():
    """A stop ended streams with no gRPC status (grpc-go saw "transport is closing"); they now end
    UNAVAILABLE "server shutting down", which clients take as a reason to reconnect."""
    server = servers.start(Catch)
    with grpc.insecure_channel(server.address) as channel:
        call = channel.stream_stream(METHOD_PATH, request_serializer=pb.EnvironmentRequest.SerializeToString,
                                     response_deserializer=pb.EnvironmentResponse.FromString)
        wait = threading.Event()
        answers = call(requests_of(pb.EnvironmentRequest(create_world=pb.CreateWorldRequest()),
                                   then=iter(lambda: wait.wait(), True)), timeout=30)
        next(answers)
        server.stop(grace=0.5)
        with pytest.raises(grpc.RpcError) as ended:
            next(answers)
        wait.set()
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
    assert ended.value.details() == "server shutting down"
