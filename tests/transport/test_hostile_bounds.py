"""Bounded cost per byte (issue 30, item 3), and the leftovers of item 5: what a peer's bytes may
cost in memory per message, in inflation across the server, in event-loop time per request and in
a pending TLS handshake; a frozen server of ours found by our client's default keepalive."""
from __future__ import annotations

import os
import signal
import socket
import ssl
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import servers
from hostile import BOUND, Honest, LoopLag, MB, Peak, measured, stepped_beside
from interop_peers import self_signed
from official_servers import start_official_server
from processes import ServedProcess
from raw_h2 import RawClient, data, first_answer, joined, message

from dmrpc_gym import DmRpcEnv
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.protowire import varint
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.transport import compression
from dmrpc_gym.transport.client.keepalive import MIN_KEEPALIVE, PING_TIMEOUT
from dmrpc_gym.worlds.catch import Catch


class Wide(gym.Env):
    """A world whose observation is ``size`` float32s and whose action is ``act`` float32s."""

    metadata = {"render_modes": []}

    def __init__(self, size: int = 1, act: int = 1):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (int(size),), np.float32)
        self.action_space = gym.spaces.Box(0.0, 1.0, (int(act),), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        return np.zeros(self.observation_space.shape, np.float32), 0.0, False, False, {}


def test_a_spec_past_the_client_s_largest_message_names_max_message_size():
    """A spec no message of the client's could carry is refused naming the option to raise."""
    with servers.start(Wide, max_message_size=8 << 20) as server:
        with pytest.raises(ValueError, match=r"more than 1048576 bytes, the largest message "
                                             r"\(set by max_message_size= of the client\)"):
            DmRpcEnv(server.address, max_message_size=1 << 20, world_settings={"size": 300_000})


# -- inflation: one budget per server -------------------------------------------------------------
def test_gzip_bombs_at_once_share_one_inflation_budget():
    """Twenty gzip bombs sent at once, each refused past 64 MiB, cost +535 MB together: each stream
    inflated its own. Now one message past its first MiB inflates at a time per server."""
    bomb = compression.compressor("gzip")(bytes(80 * MB))            # 80 KB that inflate to 80 MiB
    raws = []
    with servers.start(Catch) as server:
        honest = Honest(server.address)
        try:
            with Peak() as peak:
                for _ in range(20):
                    raw = RawClient(server.address, timeout=60)
                    raws.append(raw)
                    raw.send(raw.request_headers(1, (("grpc-encoding", "gzip"),)))
                honest.start()
                for raw in raws:                     # all twenty arrive before the first is refused
                    raw.send(data(1, b"\x01" + len(bomb).to_bytes(4, "big") + bomb))
                for raw in raws:
                    fields = raw.trailers(1)
                    assert fields["grpc-status"] == "8" and "max_message_size" in fields["grpc-message"]
                assert honest.finished(), honest.error
        finally:
            for raw in raws:
                raw.close()
    measured("20 gzip bombs at once, each refused past 64 MiB", f"{peak.grown / MB:+.0f} MB at the peak", honest)
    assert peak.grown < BOUND, f"{peak.grown / MB:+.0f} MB at the peak for 20 gzip bombs at once"


# -- TLS handshakes ------------------------------------------------------------------------------
def client_hello(ca: str) -> bytes:
    """The first flight of a TLS client (its ClientHello), as a client that goes no further sends it."""
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(["h2"])
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def resident_of(pid: int) -> int:
    """The resident memory of process ``pid`` in bytes."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("first", ["nothing", "a ClientHello"])
def test_a_pending_tls_handshake_holds_little(first, tmp_path):
    """400 connections that never finish their TLS handshake held 314 KB each until the handshake
    deadline (asyncio's SSL protocol reads into a 256 KiB buffer from the start). A handshake now
    reads into 4 KiB; the full buffer comes once it is done. Measured on a served process of its
    own (memory freed by one test is reused by the next in one process)."""
    tls = self_signed(tmp_path)
    hello = client_hello(tls[0]) if first == "a ClientHello" else b""
    n = 400
    served = ServedProcess(0, args=("--tls-cert", tls[0], "--tls-key", tls[1]))
    try:
        pid = served.processes[-1].pid
        host, port = served.address.rsplit(":", 1)
        stepped_beside(served.address, tls=tls[0])          # what a first TLS client costs, before
        before = resident_of(pid)
        socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(n)]
        try:
            for sock in socks:
                if hello:
                    sock.sendall(hello)
            if hello:
                for sock in socks:              # the server's flight came: each handshake is under way
                    assert sock.recv(1)
            time.sleep(0.5)                     # every connection accepted
            grown = resident_of(pid) - before
            honest = stepped_beside(served.address, tls=tls[0])
        finally:
            for sock in socks:
                sock.close()
    finally:
        served.close()
    each = grown / n
    measured(f"{n} TLS handshakes left pending after {first}", f"{grown / MB:+.0f} MB, {each / 1024:.0f} KB each", honest)
    assert each < 64 << 10, f"{each / 1024:.0f} KB held by each pending TLS handshake"


# -- memory per message: at most twice its size, lying tensors included ----------------------------
LIE = 60 * MB                   # a message under the 64 MiB limit, most of it one tensor


def framed(sid: int, request: "pb.EnvironmentRequest | bytes", flag: int = 0) -> bytes:
    """``request`` (a message, or its bytes as they are sent: compressed with ``flag`` 1) as one
    gRPC message in DATA frames of 1 MiB (the server's SETTINGS_MAX_FRAME_SIZE)."""
    if not isinstance(request, bytes):
        request = request.SerializeToString()
    body = bytes([flag]) + len(request).to_bytes(4, "big") + request
    return b"".join(data(sid, body[k:k + MB]) for k in range(0, len(body), MB))


def lying(payload: str, shape: list[int]) -> pb.Tensor:
    """A tensor of :data:`LIE` bytes of ``payload`` (``"floats"`` or ``"uint8s"``) claiming ``shape``."""
    if payload == "uint8s":
        return pb.Tensor(uint8s=pb.Tensor.Uint8Array(array=bytes(LIE)), shape=shape)
    tensor = pb.Tensor(shape=shape)
    tensor.MergeFromString(tensors.tensor_bytes(np.zeros(LIE // 4, np.float32)))
    del tensor.shape[:]
    tensor.shape.extend(shape)
    return tensor


@pytest.mark.parametrize("where, payload", [("a Step's action", "floats"), ("a Step's action", "uint8s"),
                                            ("a CreateWorld setting", "floats"),
                                            ("a CreateWorld setting", "uint8s")])
def test_a_lying_tensor_costs_the_server_at_most_twice_its_message(where, payload):
    """A 64 MiB-bounded message whose tensor lies about its shape cost 201 MB at the peak (3x):
    the lie was found only after the payload was decoded. Now the shape is judged against the
    payload's length first."""
    with servers.start(Wide, workers=0) as server:
        raw = RawClient(server.address, timeout=60)
        try:
            step = where == "a Step's action"
            if step:
                joined(raw, act=4)
                raw.send(data(1, message(pb.EnvironmentRequest(step=pb.StepRequest()))))
                first_answer(raw, 1)                                # the sequence's first step
                request = pb.EnvironmentRequest(step=pb.StepRequest(actions={1: lying(payload, [4])}))
            else:
                raw.send(raw.request_headers(1))
                request = pb.EnvironmentRequest(create_world=pb.CreateWorldRequest(
                    settings={"size": lying(payload, [3, 5])}))
            frames = framed(1, request)
            size = request.ByteSize()
            del request
            with Peak() as peak:
                raw.send(frames)
                answer = first_answer(raw, 1)
                error = answer.error
        finally:
            raw.close()
    measured(f"a {size / MB:.0f} MB message whose {payload} tensor lies about its shape in {where}",
             f"{peak.grown / MB:+.0f} MB at the peak ({peak.grown / size:.1f}x)")
    assert "does not fit shape" in error.message and error.code == 3, answer
    assert peak.grown < 2 * size + 8 * MB, f"{peak.grown / MB:+.0f} MB at the peak for a {size / MB:.0f} MB message"


def test_a_lying_observation_costs_the_client_nothing_past_its_message():
    """A foreign server's large observation whose shape lies is refused by the client's walk of the
    answer (naming its UID) before protobuf copies the message, or any payload is copied."""
    answer = pb.EnvironmentResponse(step=pb.StepResponse(observations={7: lying("floats", [3, 5])}))
    received = bytearray(answer.SerializeToString())
    del answer
    with Peak() as peak:
        with pytest.raises(ValueError, match=r"observation UID 7: cannot unpack a FLOAT tensor: "
                                             r"a payload of 15728640 elements does not fit shape \[3, 5\]"):
            large_tensors.split(received, large_tensors.OBSERVATIONS)
    assert peak.grown < len(received) // 4, f"{peak.grown / MB:+.0f} MB at the peak"



# -- work per byte: bounded by the spec, and no request holds the loop ----------------------------
def naming_uids(uid: int, count: int) -> bytes:
    """A Step request (serialized) whose ``requested_observations`` name ``uid`` ``count`` times
    (packed: a byte each for a UID under 128)."""
    packed = varint(uid) * count
    step = b"\x12" + varint(len(packed)) + packed
    return b"\x1a" + varint(len(step)) + step


@pytest.mark.parametrize("uid, what", [(99, "a UID the spec lacks"), (1, "a UID of the spec")])
def test_uid_floods_are_refused_without_holding_the_loop(uid, what):
    """Four 16 KB gzip Steps inflating to 16 MB that name 16,777,216 UIDs each held the event loop
    2.2 s apiece while every other client waited. A request naming a UID the spec lacks is now
    refused at the first one, and a long list of known ones costs the loop no more than ~50 ms."""
    count = 1 << 24
    bomb = compression.compressor("gzip")(naming_uids(uid, count))
    gzip = (("grpc-encoding", "gzip"),)
    with servers.start(Catch) as server:
        raws = [RawClient(server.address, timeout=60) for _ in range(4)]
        honest = Honest(server.address)
        try:
            for raw in raws:
                joined(raw, 1, gzip)
                raw.send(data(1, message(pb.EnvironmentRequest(step=pb.StepRequest()))))
                first_answer(raw, 1)                                # the sequence's first step
            honest.start()
            time.sleep(0.2)
            lag = LoopLag(server._loop).start()
            start = time.monotonic()
            for raw in raws:
                raw.send(data(1, b"\x01" + len(bomb).to_bytes(4, "big") + bomb))
            answers = [first_answer(raw, 1) for raw in raws]
            took = time.monotonic() - start
            worst = lag.stop()
            assert honest.finished(), honest.error
        finally:
            for raw in raws:
                raw.close()
    measured(f"4 gzip Steps of {len(bomb) // 1024} KB naming {what} {count} times",
             f"the loop held {worst * 1000:.0f} ms at most; {took:.2f} s until the 4 answers", honest)
    if uid == 99:
        assert all("no observation has UID 99" in a.error.message for a in answers), answers[0]
    else:
        assert all(a.WhichOneof("payload") == "step" for a in answers), answers[0]
    assert worst < 0.05, f"the loop was held {worst * 1000:.0f} ms"


def flood(kind: str) -> tuple[bytes, str]:
    """A request (serialized) of 16 MB or more made of tiny fields, and what its refusal says."""
    if kind == "settings":                      # a CreateWorld of a million settings
        one = tensors.tensor_bytes(1.0)
        entries = (b"\x0a\x07s" + b"%06d" % k + b"\x12" + varint(len(one)) + one for k in range(1_000_000))
        body = b"".join(b"\x0a" + varint(len(e)) + e for e in entries)
        return b"\x0a" + varint(len(body)) + body, "more than 1024 settings"
    if kind == "actions":                       # a Step giving action UID 1 four million times
        body = b"\x0a\x02\x08\x01" * (1 << 22)
        return b"\x1a" + varint(len(body)) + body, f"a StepRequest of more than {large_tensors.MAX_WALKED} fields"
    return b"\xa0\x06\x01" * (1 << 22), "an EnvironmentRequest of more than 64 fields"   # unknown fields


@pytest.mark.parametrize("kind", ["settings", "actions", "envelope"])
def test_floods_of_tiny_fields_are_refused_without_holding_the_loop(kind):
    """A request of millions of tiny fields was read field by field (a million settings: 0.7 s of
    protobuf and seconds of unpacking, all on the event loop). The walk now refuses it past a
    bound: settings, fields of a Step, fields of the envelope."""
    request, refusal = flood(kind)
    bomb = compression.compressor("gzip")(request)
    with servers.start(Catch) as server:
        raw = RawClient(server.address, timeout=60)
        honest = Honest(server.address)
        try:
            joined(raw, 1, (("grpc-encoding", "gzip"),))
            honest.start()
            time.sleep(0.2)
            lag = LoopLag(server._loop).start()
            start = time.monotonic()
            raw.send(framed(1, bomb, flag=1))
            answer = first_answer(raw, 1)
            took = time.monotonic() - start
            worst = lag.stop()
            assert honest.finished(), honest.error
        finally:
            raw.close()
    measured(f"a {len(request) / MB:.0f} MB request ({len(bomb) // 1024} KB of gzip) of tiny fields: {kind}",
             f"the loop held {worst * 1000:.0f} ms at most; answered in {took:.2f} s", honest)
    assert refusal in answer.error.message and answer.error.code == 3, answer
    assert worst < 0.05, f"the loop was held {worst * 1000:.0f} ms"


# -- a frozen server of ours is found by default ------------------------------------------------------
def test_a_frozen_server_of_ours_is_found_by_default():
    """A frozen server (SIGSTOP) hung step() forever with the default settings, even between our own
    client and server. Toward our servers the client now PINGs by default (every MIN_KEEPALIVE s
    in which nothing came, as our servers permit), so the call fails naming the unanswered PING
    within MIN_KEEPALIVE + PING_TIMEOUT (30 s) of the server's last word."""
    served = ServedProcess(0)
    process = served.processes[-1]
    killer = threading.Timer(MIN_KEEPALIVE + PING_TIMEOUT + 20, process.kill)   # the test never hangs
    env = None
    try:
        env = DmRpcEnv(served.address)
        assert env.unwrapped.connection.server_software is not None
        env.reset(seed=0)
        env.step(env.action_space.sample())
        process.send_signal(signal.SIGSTOP)
        killer.start()
        start = time.monotonic()
        with pytest.raises(ConnectionError, match=r"did not answer a keepalive PING within 20 s.*frozen"):
            env.step(env.action_space.sample())
        took = time.monotonic() - start
    finally:
        killer.cancel()
        process.send_signal(signal.SIGCONT)
        if env is not None:
            env.close()
        served.close()
    measured("a server of ours frozen (SIGSTOP) during a step, default settings",
             f"the step failed naming the unanswered PING after {took:.1f} s")
    assert took < MIN_KEEPALIVE + PING_TIMEOUT + 3, f"found after {took:.1f} s"


def test_toward_a_foreign_server_the_default_sends_no_pings():
    """grpc servers allow one PING per 5 minutes on a connection without data: toward a server
    that is not ours the default stays silent (keepalive=300 or more gives the same finding)."""
    with start_official_server() as server:
        with Connection(server.address) as conn:
            conn.send(pb.CreateWorldRequest())
            assert conn.server_software is None
            assert conn._transport._stream.connection._ping_every is None
    with servers.start(Catch) as server, Connection(server.address) as conn:
        conn.send(pb.CreateWorldRequest())
        assert conn._transport._stream.connection._ping_every == MIN_KEEPALIVE
    with servers.start(Catch) as server, Connection(server.address, keepalive=False) as conn:
        conn.send(pb.CreateWorldRequest())
        assert conn._transport._stream.connection._ping_every is None


def one_byte_varints(count: int, where: str) -> bytes:
    """A request whose int64 tensor (``shape=[count]``) is ``count`` one-byte varints, packed:
    in ``where``, a CreateWorld setting or a Step's action (UID 1)."""
    packed = b"\x01" * count
    payload = b"\x0a" + varint(len(packed)) + packed                   # Int64Array.array, packed
    tensor = b"\x2a" + varint(len(payload)) + payload + b"\x7a" + varint(len(varint(count))) + varint(count)
    if where == "a Step's action":
        entry = b"\x08\x01\x12" + varint(len(tensor)) + tensor
        step = b"\x0a" + varint(len(entry)) + entry
        return b"\x1a" + varint(len(step)) + step
    entry = b"\x0a\x04size\x12" + varint(len(tensor)) + tensor
    create = b"\x0a" + varint(len(entry)) + entry
    return b"\x0a" + varint(len(create)) + create


def refused_at_peak(request: bytes, gzip: bool) -> tuple[pb.EnvironmentResponse, int]:
    """Catch's answer to ``request`` (sent gzip-compressed or not) after a first step, and what
    the server's process grew by at its peak meanwhile."""
    sent = compression.compressor("gzip")(request) if gzip else request
    with servers.start(Catch) as server:
        raw = RawClient(server.address, timeout=60)
        try:
            joined(raw, 1, (("grpc-encoding", "gzip"),) if gzip else ())
            raw.send(data(1, message(pb.EnvironmentRequest(step=pb.StepRequest()))))
            first_answer(raw, 1)                                         # the sequence's first step
            frames = framed(1, sent, flag=int(gzip))
            del sent
            with Peak() as peak:
                raw.send(frames)
                answer = first_answer(raw, 1)
        finally:
            raw.close()
    return answer, peak.grown


@pytest.mark.parametrize("where", ["a CreateWorld setting", "a Step's action"])
def test_an_integer_tensor_decodes_to_no_more_than_its_bound(where):
    """60 MB of one-byte varints (60 KB of gzip) in an int64 tensor decoded to 480 MB in protobuf's
    repeated field and 480 MB more in numpy. Where no spec bounds it, an integer tensor may decode
    to 64 MiB (MAX_TENSOR_BYTES), an action to its spec's count of elements; past it the request
    is refused before protobuf reads it."""
    request = one_byte_varints(60 << 20, where)
    answer, grown = refused_at_peak(request, gzip=True)
    measured(f"{len(compression.compressor('gzip')(request)) // 1024} KB of gzip: 60 MB of one-byte "
             f"varints in an int64 tensor, in {where}", f"{grown / MB:+.0f} MB at the peak")
    expected = ("holds more than 1 elements: its spec holds 1 (shape [])" if where == "a Step's action"
                else "it decodes to more than the 67108864 bytes allowed")
    assert expected in answer.error.message, answer
    assert grown < 2 * len(request) + 8 * MB, f"{grown / MB:+.0f} MB at the peak"


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
def test_an_action_of_more_elements_than_its_spec_is_refused_from_its_header(gzip):
    """Issue 42, item 6: an 8 MB Step whose action (a scalar in Catch's spec) is 8,388,608 one-byte
    varints cost the server +218 MB at its peak (27x the message): within 64 MiB once decoded, it
    was left to protobuf and numpy before the spec was looked at. Now its elements are counted
    against the spec's from the tensor's header, before protobuf reads it: at most twice the
    message, plain or gzip-compressed."""
    request = one_byte_varints(8 << 20, "a Step's action")
    answer, grown = refused_at_peak(request, gzip)
    measured(f"an {len(request) / MB:.0f} MB Step whose scalar action is 8,388,608 one-byte varints"
             f"{', gzip' if gzip else ''}", f"{grown / MB:+.0f} MB at the peak ({grown / len(request):.1f}x)")
    assert answer.error.code == 3 and "action UID 1" in answer.error.message, answer
    assert "holds more than 1 elements: its spec holds 1 (shape [])" in answer.error.message, answer
    assert grown <= 2 * len(request), f"{grown / MB:+.0f} MB at the peak for a {len(request) / MB:.0f} MB message"
