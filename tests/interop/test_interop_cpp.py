"""Interop with gRPC C++ (C-core, Debian's libgrpc++), both directions, on real processes over
loopback: our client (``Connection``, ``DmRpcEnv``) against a C++ server of the echo world, and a
C++ client against our ``Server`` serving the echo world (``tests/support/echo_world.py``). Episodes,
8 concurrent streams on one connection, 16 MiB observations and actions, gzip, TLS with a token,
keepalive (C-core's default and an abusive rate), GOAWAY and graceful stop, SIGKILL of either side.
C-core's BDP pings stay on, as it ships them. Cleartext cases run through a frame tap
(``tests/support/frame_tap.py``) whose frames pytest shows when a case fails.

Needs the peers built by ``.ci/install_cpp_peer.sh`` (``tests/interop/cpp``) in the directory
named by ``DMRPC_CPP_PEER_DIR``; skipped without them unless ``DMRPC_REQUIRE_INTEROP=1`` (CI)
makes that a failure.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest
from echo_world import Echo
from frame_tap import FrameTap
from interop_peers import built_peers, echo_on_one_connection, self_signed
from processes import ServedProcess

import dmrpc_gym
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.vector import DmRpcVectorEnv
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from dmrpc_gym.transport.limits import ConnectionLimits

(SERVER, CLIENT), pytestmark = built_peers("DMRPC_CPP_PEER_DIR", ("dmrpc_cpp_server", "dmrpc_cpp_client"),
                                          ".ci/install_cpp_peer.sh")
OK, RESOURCE_EXHAUSTED, UNAVAILABLE, UNAUTHENTICATED = 0, 8, 14, 16
MIB16 = 16 << 20
IDLE = 2.5




def _flags(options: dict) -> list[str]:
    """``{"obs_size": 8, "grpc.keepalive_time_ms": 100}`` -> ``["--obs_size=8", "--grpc.keepalive_time_ms=100"]``."""
    return [f"--{name}={int(value) if isinstance(value, bool) else value}" for name, value in options.items()]


class _Peer:
    """A C++ peer process: its stdout lines in a queue, its stderr (C-core's log) in a file."""

    def __init__(self, program: str, options: dict):
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([program, *_flags(options)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        self.lines: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.proc.stdout.close()
        self.lines.put(None)

    def wait_for(self, prefix: str | tuple[str, ...], timeout: float = 20.0) -> str:
        """The next stdout line that starts with ``prefix`` (or one of them); AssertionError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {prefix!r} line within {timeout} s; stderr: {self.stderr()}") from None
            if line is None:
                raise AssertionError(f"the peer exited before a {prefix!r} line; stderr: {self.stderr()}")
            if line.startswith(prefix):
                return line

    def stderr(self) -> str:
        """What C-core logged (the last 4000 characters); kept in ``errors`` once closed."""
        if self.log.closed:
            return self.errors
        self.log.seek(0)
        return self.log.read()[-4000:]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        try:
            self.proc.stdin.close()          # the server's cue to stop
        except OSError:
            pass                             # it died: its pipe is broken
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if not self.log.closed:
            self.errors = self.stderr()
            self.log.close()
            if self.errors:
                print(f"{os.path.basename(self.proc.args[0])} stderr:\n{self.errors}")


class CppServer(_Peer):
    """``dmrpc_cpp_server`` (the echo world); ``address``; ``stop(grace_ms)`` shuts it down
    gracefully; closing its stdin stops it within 1 s."""

    def __init__(self, **options):
        super().__init__(SERVER, options)
        self.address = f"127.0.0.1:{self.wait_for('PORT ').split()[1]}"

    def stop(self, grace_ms: int) -> None:
        self.proc.stdin.write(f"stop {grace_ms}\n")
        self.proc.stdin.flush()

    def __enter__(self) -> CppServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CppClient(_Peer):
    """``dmrpc_cpp_client`` running; ``result()`` waits for its streams' outcomes."""

    def __init__(self, address: str, **options):
        super().__init__(CLIENT, {"address": address, **options})

    def result(self, timeout: float = 60.0) -> list[dict]:
        outcomes = json.loads(self.wait_for("RESULT ", timeout)[len("RESULT "):])
        self.proc.wait(10)
        self.close()
        return outcomes


def cpp_client(address: str, **options) -> list[dict]:
    """Run ``dmrpc_cpp_client`` to the end: one outcome per stream (code, details, answers, states, ...)."""
    return CppClient(address, **options).result()


def step(value: int, blob: bytes | None = None) -> pb.StepRequest:
    request = pb.StepRequest(actions={1: pb.Tensor(int32s=pb.Tensor.Int32Array(array=[value]))})
    if blob is not None:
        request.actions[2].uint8s.array = blob
        request.actions[2].shape.append(len(blob))
    return request


def no_goaway(tap: FrameTap) -> None:
    assert not tap.frames_of("GOAWAY") and not tap.frames_of("RST_STREAM"), tap.dump()


# -- our client, C++ server -------------------------------------------------------------------------
def test_our_env_plays_episodes_on_a_cpp_server():
    # The echo world counts the step that reset() sends to start an episode: 1 + 3 steps.
    with CppServer(episode=4) as server, FrameTap(server.address) as tap:
        env = dmrpc_gym.DmRpcEnv(tap.address, step_timeout=10.0)
        try:
            for _ in range(2):
                obs, _ = env.reset()
                ends = []
                for t in range(3):
                    obs, reward, terminated, truncated, _ = env.step(t + 4)
                    assert (obs == t + 4).all() and reward == t + 4
                    ends.append((terminated, truncated))
                assert ends == [(False, False), (False, False), (True, False)]
        finally:
            env.close()
        no_goaway(tap)


def test_our_client_runs_8_streams_on_one_connection_to_a_cpp_server():
    with CppServer() as server, FrameTap(server.address) as tap:
        echo_on_one_connection(tap.address, envs=8)
        streams = {f.stream for f in tap.frames_of("HEADERS", ">")}
        assert len(streams) == 8 and {f.connection for f in tap.frames} == {0}, tap.dump()
        no_goaway(tap)


def test_our_client_sends_and_receives_16mib_with_a_cpp_server():
    blob = (np.arange(MIB16) * 31 + 7).astype(np.uint8)
    with CppServer(obs_size=MIB16, action_size=MIB16) as server, FrameTap(server.address) as tap:
        env = dmrpc_gym.DmRpcEnv(tap.address, step_timeout=30.0)
        try:
            env.reset()
            for value in (3, 8):
                obs, reward, *_ = env.step({"act": value, "blob": blob})
                assert obs["obs"].shape == (MIB16,) and (obs["obs"] == value).all() and reward == value
                assert obs["blob_sum"] == int(blob.sum(dtype=np.int64))
        finally:
            env.close()
        assert tap.pings("<"), "C-core's BDP probes should ping while it receives 16 MiB:\n" + tap.dump()
        no_goaway(tap)


def test_cpp_servers_default_4mib_limit_refuses_a_16mib_action_by_name():
    with CppServer(action_size=MIB16, max_recv=4 << 20) as server:
        with Connection(server.address) as conn:
            conn.send(pb.CreateWorldRequest())
            with pytest.raises(Exception) as refused:
                conn.send(step(1, bytes(MIB16)))
    text = str(refused.value)
    assert "RESOURCE_EXHAUSTED" in text or "resource" in text.lower(), text
    assert "4194304" in text, text


@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
def test_our_client_with_a_gzip_cpp_server(compression):
    with CppServer(gzip=True, obs_size=100_000) as server, FrameTap(server.address) as tap:
        with Connection(tap.address, compression=compression) as conn:
            assert bytes(conn.send(step(5)).observations[1].uint8s.array) == bytes([5]) * 100_000
        answers = " ".join(f.summary for f in tap.frames_of("HEADERS", "<"))
        assert "grpc-encoding: gzip" in answers, tap.dump()
        if compression:
            asked = " ".join(f.summary for f in tap.frames_of("HEADERS", ">"))
            assert f"grpc-encoding: {compression}" in asked, tap.dump()
        no_goaway(tap)


def test_our_client_over_tls_with_a_token_to_a_cpp_server(tmp_path):
    cert, key = self_signed(tmp_path)
    with CppServer(cert=cert, key=key, token="s3cret") as server:
        with Connection(server.address, tls=cert, token="s3cret") as conn:
            assert conn.send(pb.CreateWorldRequest()).world_name == "echo"
            assert bytes(conn.send(step(6)).observations[1].uint8s.array) == bytes([6]) * 4
        with Connection(server.address, tls=cert) as conn:
            with pytest.raises(Exception, match="UNAUTHENTICATED|bearer token"):
                conn.send(pb.CreateWorldRequest())


def test_our_client_acks_a_cpp_servers_keepalive_through_an_idle_gap():
    options = {"grpc.keepalive_time_ms": 200, "grpc.keepalive_timeout_ms": 1000,
               "grpc.keepalive_permit_without_calls": 1, "grpc.http2.max_pings_without_data": 0}
    with CppServer(**options) as server, FrameTap(server.address) as tap:
        with Connection(tap.address) as conn:
            conn.send(pb.CreateWorldRequest())
            time.sleep(IDLE)
            assert bytes(conn.send(step(7)).observations[1].uint8s.array) == bytes([7]) * 4
        assert len(tap.pings("<")) >= 3, tap.dump()
        no_goaway(tap)


def test_our_clients_default_keepalive_is_never_too_many_pings_for_a_cpp_server():
    """C-core's default ping policy (5 minutes without data, 2 strikes) against our client's
    default settings, through an idle gap: no GOAWAY."""
    with CppServer() as server, FrameTap(server.address) as tap:
        with Connection(tap.address) as conn:
            conn.send(pb.CreateWorldRequest())
            time.sleep(IDLE)
            assert conn.send(step(2)).state == pb.RUNNING
        no_goaway(tap)


def test_our_client_will_not_ping_abusively():
    """Our client refuses a keepalive that gRPC servers would answer with GOAWAY too_many_pings;
    at its floor (10 s) a C-core server with default settings kept the connection (50 s seen)."""
    with pytest.raises(ValueError, match="too_many_pings"):
        Connection("127.0.0.1:1", keepalive=0.1)


def test_cpp_servers_graceful_stop_lets_our_open_stream_finish():
    with CppServer() as server, FrameTap(server.address) as tap:
        with Connection(tap.address) as conn:
            conn.send(pb.CreateWorldRequest())
            server.stop(5000)
            deadline = time.monotonic() + 5
            while not tap.frames_of("GOAWAY", "<") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert tap.frames_of("GOAWAY", "<"), tap.dump()
            for value in (1, 2):
                assert bytes(conn.send(step(value)).observations[1].uint8s.array) == bytes([value]) * 4
        started = time.monotonic()
        server.wait_for("STOPPED", timeout=5)
        assert time.monotonic() - started < 4     # the stream ended: no need to wait out the grace
        assert server.proc.wait(5) == 0
        with pytest.raises(Exception):
            Connection(server.address, connect_timeout=0.5).send(pb.CreateWorldRequest())


def test_our_stream_past_a_cpp_servers_grace_ends_with_a_clear_error():
    with CppServer() as server:
        with Connection(server.address) as conn:
            conn.send(pb.CreateWorldRequest())
            server.stop(300)
            server.wait_for("STOPPED", timeout=5)
            started = time.monotonic()
            with pytest.raises(Exception) as failed:
                conn.send(step(1))
            assert time.monotonic() - started < 5
    print("our client said:", failed.value)


@pytest.mark.parametrize("when", ["between steps", "mid-step"])
def test_sigkill_of_the_cpp_server_is_a_clear_error_for_our_client(when):
    with CppServer(delay_ms=0 if when == "between steps" else 5000) as server:
        env = dmrpc_gym.DmRpcEnv(server.address)
        try:
            env.reset()                  # the first step of an episode: no delay
            if when == "between steps":
                env.step(1)
                server.kill()
            else:
                threading.Timer(0.5, server.kill).start()
            started = time.monotonic()
            with pytest.raises(ConnectionError) as failed:
                env.step(2)
            assert time.monotonic() - started < 4
        finally:
            env.close()
    print("our client said:", failed.value)
    assert server.address in str(failed.value) and "step" in str(failed.value), str(failed.value)


def test_our_vector_env_past_a_cpp_servers_max_concurrent_streams():
    """A C++ server that takes 2 streams per connection: 4 sub-envs open a second connection."""
    with CppServer(**{"grpc.max_concurrent_streams": 2}) as server, FrameTap(server.address) as tap:
        env = DmRpcVectorEnv(4, tap.address, seed_setting=None, step_timeout=10.0)
        try:
            env.reset()
            actions = np.array([1, 2, 3, 4])
            assert (env.step(actions)[0] == actions[:, None]).all()
        finally:
            env.close()
        streams = [(f.connection, f.stream) for f in tap.frames_of("HEADERS", ">")]
        assert sorted(streams) == [(0, 1), (0, 3), (1, 1), (1, 3)], tap.dump()
        assert not tap.frames_of("GOAWAY"), tap.dump()


def test_our_env_through_a_cpp_servers_max_connection_age():
    """C-core's max_connection_age: GOAWAY at 1 s; the open stream may finish within the grace
    (0.5 s), a new env meanwhile takes a new connection; past the grace the step fails naming the
    server, and with reconnect=True the next reset() connects again."""
    age = {"grpc.max_connection_age_ms": 1000, "grpc.max_connection_age_grace_ms": 800}
    with CppServer(**age) as server, FrameTap(server.address) as tap:
        env = dmrpc_gym.DmRpcEnv(tap.address, reconnect=True)
        other = None
        try:
            env.reset()
            deadline = time.monotonic() + 5
            while not tap.frames_of("GOAWAY", "<") and time.monotonic() < deadline:
                time.sleep(0.02)
            assert env.step(2)[1] == 2                   # within the grace
            other = dmrpc_gym.DmRpcEnv(tap.address)
            other.reset()
            assert other.step(3)[1] == 3
            time.sleep(1.0)
            with pytest.raises(ConnectionError, match=tap.address):
                env.step(4)
            with pytest.warns(RuntimeWarning, match="reconnected"):
                env.reset()
            assert env.step(5)[1] == 5
        finally:
            env.close()
            if other is not None:
                other.close()
        assert len({f.connection for f in tap.frames}) >= 2, tap.dump()


def test_our_env_close_lets_a_cpp_server_end_the_call():
    """Our client's close() half-closed its stream and closed the socket at once: a C++ server that takes
    a moment to end the call (here 200 ms) saw every env.close() as a cancelled call. It now waits for the
    status (at most CLOSE_WAIT seconds)."""
    with CppServer(finish_delay_ms=200) as server, FrameTap(server.address) as tap:
        env = dmrpc_gym.DmRpcEnv(tap.address)
        env.reset()
        env.step(1)
        env.close()
        assert server.wait_for(("FINISHED", "CANCELLED"), timeout=5) == "FINISHED", tap.dump()


_OUR_CLIENT = """
import sys, time
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.vector import DmRpcVectorEnv
from dmrpc_gym.protocol.wire import pb
conn = Connection(sys.argv[1])
conn.send(pb.CreateWorldRequest())
print("READY", flush=True)
time.sleep(60)
"""


def test_sigkill_of_our_client_is_seen_by_the_cpp_server():
    with CppServer() as server:
        ours = subprocess.Popen([sys.executable, "-c", _OUR_CLIENT, server.address], stdout=subprocess.PIPE,
                                text=True)
        try:
            assert ours.stdout.readline().strip() == "READY"
            ours.send_signal(signal.SIGKILL)
            ours.wait(10)
        finally:
            ours.kill()
            ours.stdout.close()
        server.wait_for("CANCELLED", timeout=5)
        with Connection(server.address) as conn:
            assert conn.send(pb.CreateWorldRequest()).world_name == "echo"


# -- C++ client, our server ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def echo():
    server = Server(Echo).start()
    yield server
    server.stop()


def assert_ok(outcomes: list[dict], answers: int) -> None:
    for outcome in outcomes:
        assert outcome["code"] == OK and outcome["answers"] == answers, outcomes
        assert outcome["obs_ok"] and outcome["blob_ok"] and outcome["world"], outcomes


def test_cpp_client_plays_episodes_on_our_server(echo):
    with FrameTap(echo.address) as tap:
        # dm_env_rpc: the first step of an episode starts it (the reset's observation).
        [outcome] = cpp_client(tap.address, steps=8, **{"setting.episode": 3})
        assert_ok([outcome], 2 + 8 + 2)
        assert outcome["states"] == "RRRTRRRT", outcome
        no_goaway(tap)


def test_cpp_client_runs_8_streams_on_one_channel_to_our_server(echo):
    with FrameTap(echo.address) as tap:
        outcomes = cpp_client(tap.address, streams=8, steps=20, **{"setting.obs_size": 1000})
        assert len(outcomes) == 8
        assert_ok(outcomes, 2 + 20 + 2)
        assert {f.connection for f in tap.frames} == {0}, tap.dump()
        assert len({f.stream for f in tap.frames_of("HEADERS", ">")}) == 8, tap.dump()
        no_goaway(tap)


def test_cpp_client_sends_and_receives_16mib_with_our_server(echo):
    with FrameTap(echo.address) as tap:
        [outcome] = cpp_client(tap.address, steps=3, **{"setting.obs_size": MIB16, "setting.action_size": MIB16})
        assert_ok([outcome], 2 + 3 + 2)
        assert outcome["obs_bytes"] == MIB16, outcome
        assert tap.pings(">"), "C-core's BDP probes should ping while it receives 16 MiB:\n" + tap.dump()
        no_goaway(tap)


def test_cpp_client_with_gzip_to_our_server(echo):
    with FrameTap(echo.address) as tap:
        outcomes = cpp_client(tap.address, gzip=True, streams=2, **{"setting.obs_size": 100_000})
        assert_ok(outcomes, 2 + 3 + 2)
        asked = " ".join(f.summary for f in tap.frames_of("HEADERS", ">"))
        assert "grpc-encoding: gzip" in asked, tap.dump()
        no_goaway(tap)


def test_cpp_client_over_tls_with_a_token_to_our_server(tmp_path):
    cert, key = self_signed(tmp_path)
    server = Server(Echo, tls=(cert, key), token="s3cret").start()
    try:
        assert_ok(cpp_client(server.address, ca=cert, token="s3cret", gzip=True), 2 + 3 + 2)
        [refused] = cpp_client(server.address, ca=cert)
        assert refused["code"] == UNAUTHENTICATED and refused["answers"] == 0, refused
    finally:
        server.stop()


def test_cpp_client_at_c_cores_default_keepalive_survives_an_idle_pause(echo):
    """C-core's client defaults (keepalive off, BDP probes on), a 16 MiB answer before a pause."""
    with FrameTap(echo.address) as tap:
        [outcome] = cpp_client(tap.address, steps=4, pause_ms=IDLE * 1000, **{"setting.obs_size": MIB16})
        assert_ok([outcome], 2 + 4 + 2)
        no_goaway(tap)


def test_only_the_abusive_cpp_client_is_told_too_many_pings():
    """Three C++ clients on one server of ours (PINGs 2 s apart permitted) through a 5 s idle pause:
    C-core's defaults (no keepalive, BDP probes), keepalive every 3 s, and keepalive every 100 ms
    (C-core 1.51 sends those about once a second). Only the last is sent GOAWAY too_many_pings."""
    server = Server(Echo, limits=ConnectionLimits(min_ping_interval=2.0)).start()
    # C-core's client holds its PINGs to one per 5 minutes without data unless told otherwise.
    keepalive = {"grpc.keepalive_permit_without_calls": 1, "grpc.http2.max_pings_without_data": 0,
                 "grpc.http2.min_time_between_pings_ms": 10}
    clients = [{}, {"grpc.keepalive_time_ms": 3000, **keepalive}, {"grpc.keepalive_time_ms": 100, **keepalive}]
    try:
        with FrameTap(server.address) as tap:
            running: list[CppClient] = []
            for options in clients:     # one at a time, so that tap connection i is client i
                running.append(CppClient(tap.address, steps=2, pause_ms=5000, **options))
                running[-1].wait_for("STEP 0 0")
            default, polite, abusive = (client.result() for client in running)
            assert_ok(default + polite, 2 + 2 + 2)
            pings = [len([f for f in tap.pings(">") if f.connection == i]) for i in range(3)]
            assert pings[1] >= 2 + 1 and pings[2] >= 2 + 3, tap.dump()     # BDP probes + keepalives
            goaways = tap.frames_of("GOAWAY", "<")
            assert [f.connection for f in goaways] == [2], tap.dump()
            assert "ENHANCE_YOUR_CALM" in goaways[0].summary and "too_many_pings" in goaways[0].summary, tap.dump()
            assert abusive[0]["code"] == UNAVAILABLE, abusive
            assert 'ENHANCE_YOUR_CALM and debug data equal to "too_many_pings"' in running[2].stderr()
            assert "too_many_pings" not in running[0].stderr() + running[1].stderr()
    finally:
        server.stop()


def test_cpp_client_finishes_its_stream_through_our_graceful_stop():
    server = Server(Echo).start()
    with FrameTap(server.address) as tap:
        client = CppClient(tap.address, steps=4, pause_ms=1500)
        client.wait_for("STEP 0 1")
        stopping = threading.Thread(target=server.stop, kwargs={"grace": 10.0})
        started = time.monotonic()
        stopping.start()
        [outcome] = client.result()
        stopping.join(15)
        assert time.monotonic() - started < 6    # the stream's end ended the grace
        assert_ok([outcome], 2 + 4 + 2)
        goaways = tap.frames_of("GOAWAY", "<")
        assert goaways and "NO_ERROR" in goaways[0].summary, tap.dump()
        [after] = cpp_client(server.address, deadline_ms=5000)
        assert after["code"] == UNAVAILABLE, after


def test_cpp_clients_stream_past_our_grace_ends_unavailable():
    server = Server(Echo).start()
    client = CppClient(server.address, steps=4, pause_ms=2000)
    client.wait_for("STEP 0 1")
    server.stop(grace=0.3)
    started = time.monotonic()
    [outcome] = client.result()
    assert time.monotonic() - started < 5
    assert outcome["code"] == UNAVAILABLE and outcome["answers"] == 4, outcome


@pytest.mark.parametrize("when", ["between steps", "mid-step"])
def test_sigkill_of_our_server_is_unavailable_for_the_cpp_client(when):
    served = ServedProcess(0, "tests.support.echo_world:Echo")
    try:
        if when == "between steps":
            client = CppClient(served.address, steps=4, pause_ms=1500)
            client.wait_for("STEP 0 1")
        else:                                    # blocked in Read: the second step takes 5 s
            client = CppClient(served.address, steps=4, **{"setting.delay_ms": 5000})
            client.wait_for("STEP 0 0")
            time.sleep(0.5)
        served.kill()
        started = time.monotonic()
        [outcome] = client.result()
        assert time.monotonic() - started < 4
        answers = 4 if when == "between steps" else 3
        assert outcome["code"] == UNAVAILABLE and outcome["answers"] == answers, outcome
    finally:
        served.close()


def test_sigkill_of_the_cpp_client_frees_its_connection_on_our_server(echo):
    with FrameTap(echo.address) as tap:
        client = CppClient(tap.address, steps=4, pause_ms=30_000)
        client.wait_for("STEP 0 1")
        client.kill()
        client.close()
        deadline = time.monotonic() + 5
        while not [f for f in tap.frames_of("EOF", "<")] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tap.frames_of("EOF", "<"), "our server kept the dead client's connection open:\n" + tap.dump()
    assert_ok(cpp_client(echo.address), 2 + 3 + 2)
