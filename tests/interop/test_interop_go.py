"""Interop with grpc-go (Debian's 1.33.3, BDP pings on as it ships them), both directions, against
real processes on loopback ports chosen by the OS: our client against a grpc-go server
(``tests/interop/go/server``), and a grpc-go client (``tests/interop/go/client``) against our server.

Episodes, 8 concurrent streams on one connection (20 connections in a row: the BDP pings that our
server once answered with GOAWAY too_many_pings, issue 30), a 16 MiB observation and action (BDP
PINGs and window growth), gzip, TLS with a token, Unix sockets, keepalive at grpc-go's default and
at an abusive rate, GOAWAY and graceful stop (grpc-go's GracefulStop, MaxConnectionAge, our
Server.stop(grace)), grpc-go's stream and header-list limits, SIGKILL of either side. Cleartext connections go through a frame tap (``frame_tap.FrameTap``), whose
frames pytest shows when a test fails.

Needs the two binaries that ``.ci/install_go_peer.sh`` builds, in the folder named by
``DMRPC_GO_PEER_DIR``; skipped without them unless ``DMRPC_REQUIRE_INTEROP=1`` (CI) makes that a failure.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import servers
from echo_world import Echo
from frame_tap import FrameTap
from gymnasium import spaces
from interop_peers import built_peers, echo_on_one_connection, self_signed
from processes import ROOT, ServedProcess

from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.env import DmRpcEnv
from dmrpc_gym.client.vector import DmRpcVectorEnv
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.transport.limits import ConnectionLimits
from dmrpc_gym.worlds.catch import Catch

(GO_SERVER, GO_CLIENT), pytestmark = built_peers("DMRPC_GO_PEER_DIR", ("dmrpc-go-server", "dmrpc-go-client"),
                                                ".ci/install_go_peer.sh")
IDLE = 2.5
MIB16 = 16 << 20
OK, UNAVAILABLE, UNAUTHENTICATED = 0, 14, 16




class GoServer:
    """``dmrpc-go-server FLAGS`` (the echo world): ``address``; ``lines`` holds what it printed after
    its port (``STREAM <code> <error>`` per finished stream, ``STOPPED``); ``command("graceful" or
    "stop")``; closing its stdin stops it gracefully."""

    def __init__(self, *flags: str):
        self.proc = subprocess.Popen([GO_SERVER, *flags], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("PORT "):
            self.close()
            raise RuntimeError(f"the grpc-go server said {line!r}")
        self.address = f"unix:{flags[flags.index('-unix') + 1]}" if "-unix" in flags else f"127.0.0.1:{line.split()[1]}"
        self.lines: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def next_line(self, prefix: str, timeout: float = 10.0) -> str:
        """The next line it prints that starts with ``prefix`` (AssertionError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the grpc-go server printed no {prefix!r} line in {timeout} s") from None
            if line.startswith(prefix):
                return line

    def command(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> GoServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _result(stdout: str) -> dict:
    lines = stdout.strip().splitlines()
    assert lines and lines[-1].startswith("{"), f"the grpc-go client printed {stdout!r}"
    return json.loads(lines[-1])


def go_client(address: str, *flags: str, timeout: float = 60) -> dict:
    """Run ``dmrpc-go-client FLAGS ADDRESS``: its JSON result (see tests/interop/go/client/main.go)."""
    out = subprocess.run([GO_CLIENT, *flags, address], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return _result(out.stdout)


class WaitingGoClient:
    """``dmrpc-go-client -wait``: started, it runs to its first stream's first Step and prints READY;
    ``go_on()`` lets it finish; ``result()`` is its JSON result. Killed on leaving the ``with``."""

    def __init__(self, address: str, *flags: str):
        self.proc = subprocess.Popen([GO_CLIENT, "-wait", *flags, address], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "READY":
            self.__exit__()
            raise AssertionError(f"the grpc-go client said {line!r}")

    def __enter__(self) -> WaitingGoClient:
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()

    def go_on(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def result(self, timeout: float = 30) -> dict:
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        return _result(out)


def goaways(tap: FrameTap) -> list[str]:
    """The GOAWAY frames the server sent through ``tap``, described. (Asked before the peer server
    stops: a tap's relay may still pass its closing GOAWAY after the tap is closed.)"""
    return [frame.summary for frame in tap.frames_of("GOAWAY", "<")]


def window_growth(tap: FrameTap, direction: str) -> list[str]:
    """The SETTINGS_INITIAL_WINDOW_SIZE changes sent in ``direction`` (grpc-go's BDP estimator
    sends one each time it grows its receive window; the peer must resize open streams' windows)."""
    return [f.summary for f in tap.frames_of("SETTINGS", direction) if "INITIAL_WINDOW_SIZE" in f.summary]


def step(value: int = 7, blob: bytes = b"") -> pb.StepRequest:
    actions = {1: pb.Tensor(int32s=pb.Tensor.Int32Array(array=[value]))}
    if blob:
        actions[2] = pb.Tensor(uint8s=pb.Tensor.Uint8Array(array=blob), shape=[len(blob)])
    return pb.StepRequest(actions=actions, requested_observations=[1, 2] if blob else [1])


def echoed(answer: pb.StepResponse) -> bytes:
    return bytes(answer.observations[1].uint8s.array)


# -- our client, grpc-go server ---------------------------------------------------------------------
def test_our_env_runs_episodes_on_a_go_server():
    with GoServer() as server, FrameTap(server.address) as tap:
        env = DmRpcEnv(tap.address, seed_setting=None, step_timeout=10)
        try:
            obs, _ = env.reset()
            assert obs.shape == (4,) and obs.dtype == np.uint8
            for action in (3, 9, 0, 5):
                obs, reward, terminated, truncated, _ = env.step(action)
                assert (obs == action).all() and not terminated and not truncated
            obs, _ = env.reset()
            assert env.step(2)[0].tolist() == [2] * 4
        finally:
            env.close()
        assert server.next_line("STREAM") == "STREAM 0 <nil>"     # the stream ended as it should
        assert goaways(tap) == [] and tap.frames_of("RST_STREAM") == []


def test_eight_streams_of_ours_on_one_connection_to_a_go_server():
    with GoServer() as server, FrameTap(server.address) as tap:
        echo_on_one_connection(tap.address, envs=8)
        assert len({frame.connection for frame in tap.frames}) == 1 and goaways(tap) == []


def test_our_client_takes_a_16mib_observation_and_sends_a_16mib_action():
    """grpc-go's server sends BDP PINGs while it reads our 16 MiB action; we answer them."""
    blob = bytes(range(256)) * (MIB16 // 256)
    with GoServer("-obs", str(MIB16), "-act", str(MIB16)) as server, FrameTap(server.address) as tap:
        with Connection(tap.address, timeout=30) as conn:
            conn.send(pb.CreateWorldRequest())
            answer = conn.send(step(6, blob))
            assert echoed(answer) == bytes([6]) * MIB16
            assert answer.observations[2].int64s.array[0] == MIB16 + 4
            assert echoed(conn.send(step(1, blob))) == bytes([1]) * MIB16
        assert tap.pings("<"), "grpc-go sent no BDP PING while reading 16 MiB"
        assert len(window_growth(tap, "<")) >= 2       # BDP: its window grew mid-stream, we followed
        assert goaways(tap) == []


def test_our_client_sends_gzip_and_decodes_gzip_answers_of_go():
    with GoServer("-obs", "100000") as server, FrameTap(server.address) as tap:
        with Connection(tap.address, compression="gzip") as conn:
            assert echoed(conn.send(step(5))) == bytes([5]) * 100_000
        answers = [f.summary for f in tap.frames_of("HEADERS", "<") if ":status" in f.summary]
        assert answers and all("grpc-encoding: gzip" in a for a in answers), answers
        data = tap.frames_of("DATA", "<")
        assert sum(int(f.summary.split()[0]) for f in data) < 10_000      # 100 kB of one byte, compressed


def test_our_client_over_tls_with_a_token_to_go(tmp_path):
    cert, key = self_signed(tmp_path)
    with GoServer("-cert", cert, "-key", key, "-token", "s3cret") as server:
        with Connection(server.address, tls=cert, token="s3cret") as conn:
            assert conn.send(pb.CreateWorldRequest()).world_name == "echo"
            assert echoed(conn.send(step(3))) == bytes([3]) * 4
        with pytest.raises(DmRpcError) as refused:
            with Connection(server.address, tls=cert) as conn:
                conn.send(pb.CreateWorldRequest())
        assert refused.value.code == UNAUTHENTICATED and "token" in str(refused.value)


@pytest.mark.parametrize("flags", [(), ("-keepalive", "1s", "-keepalive-timeout", "1s")],
                         ids=["go-default", "go-fastest-server-keepalive"])
def test_our_client_through_an_idle_gap_under_go_keepalive(flags):
    """grpc-go's server keepalive at its default (2 h) and at its fastest (1 s, a PING a second
    through the gap): our client answers, and its own default sends grpc-go no PING that its
    default enforcement policy (5 min, 2 strikes) would punish."""
    with GoServer(*flags) as server, FrameTap(server.address) as tap:
        with Connection(tap.address) as conn:
            conn.send(pb.CreateWorldRequest())
            time.sleep(IDLE)
            assert echoed(conn.send(step(7))) == bytes([7]) * 4
            time.sleep(IDLE)
            assert echoed(conn.send(step(2))) == bytes([2]) * 4
        assert goaways(tap) == []
        if flags:
            assert len(tap.pings("<")) >= 2
            acks = [f for f in tap.frames_of("PING", ">") if f.flags & 1]
            assert len(acks) >= len(tap.pings("<")) - 1


def test_go_graceful_stop_lets_our_stream_finish():
    """GracefulStop: grpc-go sends GOAWAY and waits; our open stream goes on to its end, and only
    then does the server stop. A new connection is then refused, and says so."""
    with GoServer() as server, FrameTap(server.address) as tap:
        with Connection(tap.address) as conn:
            conn.send(pb.CreateWorldRequest())
            server.command("graceful")
            deadline = time.monotonic() + 5
            while not goaways(tap) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert goaways(tap), "grpc-go sent no GOAWAY on GracefulStop"
            for value in range(5):
                assert echoed(conn.send(step(value))) == bytes([value]) * 4
            assert server.lines.empty()                 # still waiting for our stream
        assert server.next_line("STREAM") == "STREAM 0 <nil>"
        server.next_line("STOPPED")
        started = time.monotonic()
        with pytest.raises(Exception) as refused:
            with Connection(server.address, connect_timeout=1) as conn:
                conn.send(pb.CreateWorldRequest())
        assert time.monotonic() - started < 5 and "refused" in str(refused.value).lower(), refused.value
    assert all("NO_ERROR" in goaway for goaway in goaways(tap)), goaways(tap)


def test_our_client_across_go_max_connection_age():
    """grpc-go's MaxConnectionAge (a common production setting): GOAWAY at 1 s, then
    MaxConnectionAgeGrace (1 s) for open streams, then the connection closes. Our stream lives
    through the grace; a new connection made meanwhile is a new TCP connection; past the grace the
    step raises ConnectionError naming the GOAWAY, and with ``reconnect=True`` the next reset
    reconnects."""
    with GoServer("-max-age", "1s", "-age-grace", "1s") as server, FrameTap(server.address) as tap:
        env = DmRpcEnv(tap.address, seed_setting=None, reconnect=True, step_timeout=5)
        try:
            env.reset()
            started = time.monotonic()
            while not goaways(tap):
                assert time.monotonic() - started < 5, "grpc-go sent no GOAWAY at its MaxConnectionAge"
                assert env.step(3)[0].tolist() == [3] * 4
                time.sleep(0.05)
            with Connection(tap.address) as other:                       # made after the GOAWAY
                assert echoed(other.send(step(4))) == bytes([4]) * 4
            with pytest.raises(ConnectionError, match="GOAWAY"):
                while time.monotonic() - started < 10:
                    assert env.step(5)[0].tolist() == [5] * 4         # within the grace
                    time.sleep(0.05)
            with pytest.warns(RuntimeWarning, match="reconnected"):
                env.reset()
            assert env.step(6)[0].tolist() == [6] * 4 and env.reconnects == 1
        finally:
            env.close()
        assert len({f.connection for f in tap.frames}) == 3


def test_our_client_over_a_unix_socket_to_go(tmp_path):
    with GoServer("-unix", str(tmp_path / "go.sock")) as server:
        with Connection(server.address) as conn:
            assert echoed(conn.send(step(8))) == bytes([8]) * 4


def test_our_vector_env_within_a_go_servers_max_concurrent_streams():
    """grpc-go's MaxConcurrentStreams(2): our 4 sub-envs' streams do not all go on one connection."""
    with GoServer("-max-streams", "2") as server, FrameTap(server.address) as tap:
        env = DmRpcVectorEnv(4, tap.address, seed_setting=None, step_timeout=10)
        try:
            env.reset()
            assert env.step(np.arange(4, dtype=np.int32))[0][:, 0].tolist() == [0, 1, 2, 3]
        finally:
            env.close()
        assert len({f.connection for f in tap.frames}) == 2 and tap.frames_of("RST_STREAM") == []


def test_our_client_honours_a_go_servers_max_header_list_size():
    """grpc-go's MaxHeaderListSize(8 KiB) is advertised in its SETTINGS; a header list past it makes
    grpc-go close the connection. gRPC's clients (grpc-go, C-core) read the setting and fail such a
    call at once, naming the limit (grpc-go: "header list size to send violates the maximum size
    (8192 bytes) set by server"). Ours sends the 12 kB list anyway, takes the closed connection for
    an unreachable server, retries for the whole connect_timeout and then reports "the server
    closed the connection", naming neither the metadata nor the limit."""
    with GoServer("-max-header-list", "8192") as server, FrameTap(server.address) as tap:
        started = time.monotonic()
        with pytest.raises(Exception) as refused:
            with Connection(tap.address, metadata=[("x-long", "t" * 12_000)], connect_timeout=3) as conn:
                conn.send(pb.CreateWorldRequest())
        took = time.monotonic() - started
        assert any("MAX_HEADER_LIST_SIZE=8192" in f.summary for f in tap.frames_of("SETTINGS", "<"))
        assert "8192" in str(refused.value) and took < 1.5, f"after {took:.1f} s: {refused.value!r}"


def test_go_hard_stop_is_a_clear_error_at_once():
    with GoServer() as server:
        with Connection(server.address, connect_timeout=1) as conn:
            conn.send(pb.CreateWorldRequest())
            server.command("stop")
            server.next_line("STOPPED")
            started = time.monotonic()
            with pytest.raises(Exception) as ended:
                conn.send(step(1))
            assert time.monotonic() - started < 5
    assert isinstance(ended.value, ConnectionError) and server.address in str(ended.value), repr(ended.value)


def test_sigkill_of_the_go_server_is_a_clear_error_at_once():
    with GoServer() as server:
        with Connection(server.address, connect_timeout=1) as conn:
            conn.send(pb.CreateWorldRequest())
            server.proc.send_signal(signal.SIGKILL)
            server.proc.wait(5)
            started = time.monotonic()
            with pytest.raises(Exception) as ended:
                conn.send(step(1))
            assert time.monotonic() - started < 5
    assert isinstance(ended.value, ConnectionError) and server.address in str(ended.value), repr(ended.value)


def test_sigkill_of_the_go_server_mid_transfer_is_a_clear_error_at_once():
    """Killed while 16 MiB actions and observations cross: the step in flight raises at once."""
    blob = bytes([1]) * MIB16
    with GoServer("-obs", str(MIB16), "-act", str(MIB16)) as server:
        ended: dict = {}

        def exchange() -> None:
            try:
                with Connection(server.address, connect_timeout=1) as conn:
                    conn.send(pb.CreateWorldRequest())
                    while True:
                        conn.send(step(1, blob))
            except Exception as exc:  # noqa: BLE001 - what the test looks at
                ended["error"], ended["at"] = exc, time.monotonic()

        thread = threading.Thread(target=exchange, daemon=True)
        thread.start()
        time.sleep(0.3)
        server.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        thread.join(10)
    assert "error" in ended, "the step in flight did not end"
    assert ended["at"] - killed < 5 and isinstance(ended["error"], ConnectionError), repr(ended["error"])


def test_sigkill_of_our_client_ends_the_go_servers_stream():
    client = textwrap.dedent("""
        import sys, time
        from dmrpc_gym.client.connection import Connection
        from dmrpc_gym.protocol.wire import pb
        conn = Connection(sys.argv[1])
        conn.send(pb.CreateWorldRequest())
        print("READY", flush=True)
        time.sleep(60)
    """)
    with GoServer() as server:
        proc = subprocess.Popen([sys.executable, "-c", client, server.address], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            assert proc.stdout.readline().strip() == "READY"
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(10)
            proc.stdout.close()
        line = server.next_line("STREAM", timeout=5)
        assert line.startswith("STREAM 1 ") and "canceled" in line, line       # CANCELLED
        with Connection(server.address) as conn:              # and it serves on
            assert echoed(conn.send(step(4))) == bytes([4]) * 4


# -- grpc-go client, our server -----------------------------------------------------------------------
def test_go_client_runs_a_catch_episode():
    server = servers.start(Catch)
    try:
        with FrameTap(server.address) as tap:
            result = go_client(tap.address)
        assert result["ok"] and result["steps"] == 10, result    # the first Step, then 9 to the end
        assert goaways(tap) == [] and tap.frames_of("RST_STREAM") == []
    finally:
        server.stop()


def test_go_client_eight_streams_on_one_connection_twenty_times_without_goaway():
    """Issue 30's regression: grpc-go's BDP PINGs, one per burst of DATA it reads, met our server's
    ping policy (strikes kept between answers) and got GOAWAY ENHANCE_YOUR_CALM too_many_pings
    within milliseconds; the streams failed UNAVAILABLE "transport is closing"."""
    server = servers.start(functools.partial(Echo, obs_size=128 << 10, episode=10))
    try:
        with FrameTap(server.address) as tap:
            result = go_client(tap.address, "-streams", "8", "-runs", "20")
        assert goaways(tap) == [], goaways(tap)
        assert result["ok"] and result["streams_ok"] == 160 and result["steps"] == 160 * 11, result
        assert len({frame.connection for frame in tap.frames}) == 20
        assert tap.pings(">"), "grpc-go sent no BDP PING"
    finally:
        server.stop()


def test_go_client_over_a_unix_socket(tmp_path):
    server = servers.start(Catch, address=f"unix:{tmp_path / 'ours.sock'}")
    try:
        result = go_client(server.address)
        assert result["ok"] and result["steps"] == 10, result
    finally:
        server.stop()


def test_go_client_metadata_up_to_our_header_list_limit():
    """Our SETTINGS_MAX_HEADER_LIST_SIZE (16 KiB) reaches grpc-go, which refuses a larger list
    itself (INTERNAL, naming the size); a list within it is accepted."""
    server = servers.start(Catch)
    try:
        with FrameTap(server.address) as tap:
            assert go_client(tap.address, "-token", "t" * 15_000, "-steps", "1")["ok"]
            refused = go_client(tap.address, "-token", "t" * 16_500, "-steps", "1")
            assert refused["code"] == 13 and "16384" in refused["errors"][0], refused
            assert any("MAX_HEADER_LIST_SIZE=16384" in f.summary for f in tap.frames_of("SETTINGS", "<"))
            assert goaways(tap) == [] and tap.frames_of("RST_STREAM") == []
    finally:
        server.stop()


def test_go_client_16mib_observation_and_action():
    server = servers.start(functools.partial(Echo, obs_size=MIB16, action_size=MIB16, episode=2))
    try:
        with FrameTap(server.address) as tap:
            result = go_client(tap.address, "-fill", "3")
        assert result["ok"], result
        assert (result["max_obs_bytes"], result["obs_first"], result["obs_last"]) == (MIB16, 3, 3)
        assert result["int64_obs"] == 3 * MIB16                     # blob_sum: the whole action arrived
        assert goaways(tap) == [] and tap.pings(">")
        assert len(window_growth(tap, ">")) >= 2       # BDP: its window grew mid-stream, we followed
    finally:
        server.stop()


def test_go_client_with_gzip():
    server = servers.start(functools.partial(Echo, obs_size=100_000, episode=3))
    try:
        with FrameTap(server.address) as tap:
            result = go_client(tap.address, "-gzip")
        assert result["ok"] and result["max_obs_bytes"] == 100_000, result
        requests = [f.summary for f in tap.frames_of("HEADERS", ">")]
        assert requests and all("grpc-encoding: gzip" in r for r in requests), requests
    finally:
        server.stop()


def test_go_client_over_tls_with_a_token(tmp_path):
    cert, key = self_signed(tmp_path)
    server = servers.start(Catch, tls=(cert, key), token="s3cret")
    try:
        result = go_client(server.address, "-ca", cert, "-token", "s3cret", "-gzip")
        assert result["ok"] and result["steps"] == 10, result
        refused = go_client(server.address, "-ca", cert)
        assert refused["code"] == UNAUTHENTICATED, refused
    finally:
        server.stop()


def test_go_keepalive_only_the_abusive_client_gets_too_many_pings():
    """Three grpc-go clients at once through an idle gap, stream open, on a server that permits a
    PING a second (``min_ping_interval=1``, grpc-go's ``EnforcementPolicy.MinTime``): one at
    grpc-go's defaults (no keepalive; BDP PINGs only), one with keepalive PINGs every 2 s (within
    the policy), one every 100 ms (grpc-go's 10 s floor lowered, as its own tests do). Only the
    last is sent GOAWAY ENHANCE_YOUR_CALM too_many_pings."""
    server = servers.start(functools.partial(Echo, obs_size=64 << 10, episode=3),
                           limits=ConnectionLimits(min_ping_interval=1.0))
    clients = {"default": (), "permitted": ("-keepalive", "2s"), "abusive": ("-keepalive", "100ms")}
    taps = {name: FrameTap(server.address) for name in clients}
    outcomes: dict = {}

    def run(name: str) -> None:
        outcomes[name] = go_client(taps[name].address, "-pause", "4500ms", *clients[name])

    try:
        threads = [threading.Thread(target=run, args=(name,)) for name in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        for name in ("default", "permitted"):
            assert outcomes[name]["ok"], (name, outcomes[name])
            assert goaways(taps[name]) == [], (name, goaways(taps[name]))
        assert taps["default"].pings(">")                         # BDP PINGs, never strikes
        assert len(taps["permitted"].pings(">")) >= 3              # BDP + keepalive
        assert not outcomes["abusive"]["ok"] and outcomes["abusive"]["code"] == UNAVAILABLE, outcomes["abusive"]
        assert len(goaways(taps["abusive"])) == 1, goaways(taps["abusive"])
        assert "ENHANCE_YOUR_CALM 'too_many_pings'" in goaways(taps["abusive"])[0]
    finally:
        for tap in taps.values():
            tap.__exit__(None, None, None)
        server.stop()


def test_our_graceful_stop_lets_the_go_stream_finish():
    """Server.stop(grace): GOAWAY NO_ERROR, the open grpc-go stream goes on to its end; a new
    connection is refused at once, UNAVAILABLE."""
    server = servers.start(functools.partial(Echo, episode=5))
    try:
        with FrameTap(server.address) as tap, WaitingGoClient(tap.address) as client:
            stopping = threading.Thread(target=server.stop, kwargs={"grace": 10})
            stopping.start()
            deadline = time.monotonic() + 5
            while not goaways(tap) and time.monotonic() < deadline:
                time.sleep(0.02)
            client.go_on()
            result = client.result()
            stopping.join(15)
        assert result["ok"] and result["steps"] == 6, result
        assert goaways(tap) and all("NO_ERROR" in goaway for goaway in goaways(tap)), goaways(tap)
        started = time.monotonic()
        late = go_client(server.address)
        assert late["code"] == UNAVAILABLE and "refused" in late["errors"][0], late
        assert time.monotonic() - started < 5
    finally:
        server.stop()


def test_our_stop_past_its_grace_ends_the_go_stream_unavailable():
    server = servers.start(functools.partial(Echo, episode=5))
    try:
        with FrameTap(server.address) as tap, WaitingGoClient(tap.address) as client:
            stopping = threading.Thread(target=server.stop, kwargs={"grace": 0.5})
            stopping.start()
            stopping.join(10)
            client.go_on()
            result = client.result()
        assert result["code"] == UNAVAILABLE and "server shutting down" in result["errors"][0], result
        assert any("grpc-status: 14" in f.summary for f in tap.frames_of("HEADERS", "<"))
    finally:
        server.stop()


def test_sigkill_of_our_server_is_a_clear_error_for_go():
    served = ServedProcess(0)
    try:
        with WaitingGoClient(served.address, "-deadline", "60s") as client:
            served.kill()
            started = time.monotonic()
            client.go_on()
            result = client.result(timeout=20)
            assert time.monotonic() - started < 5
        assert result["code"] == UNAVAILABLE, result
    finally:
        served.close()


def test_sigkill_of_the_go_client_frees_its_world_on_our_server():
    """One world at most: while a grpc-go client holds it, another cannot create one; once that
    client is SIGKILLed mid-episode, our server sees its connection end and its world go (an orphan
    for 0.5 s), and the next grpc-go client gets one."""
    server = servers.start(functools.partial(Echo, episode=5), max_worlds=1, orphan_lifetime=0.5)
    try:
        with WaitingGoClient(server.address) as client:
            assert not go_client(server.address)["ok"]                 # the one world is taken
            client.proc.send_signal(signal.SIGKILL)
            client.proc.wait(5)
        deadline = time.monotonic() + 5
        while not (result := go_client(server.address))["ok"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert result["ok"] and result["steps"] == 6, result
    finally:
        server.stop()


class Big(gym.Env):
    """16 MiB observations, all equal to the last action; ``returning`` is set as the
    ``signal_at``-th step returns (the server then writes its answer)."""

    returning = threading.Event()

    def __init__(self, signal_at: int = 4):
        self.observation_space, self.action_space = spaces.Box(0, 255, (MIB16,), np.uint8), spaces.Discrete(10)
        self.signal_at, self.t = signal_at, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(MIB16, np.uint8), {}

    def step(self, action):
        self.t += 1
        obs = np.full(MIB16, int(action), np.uint8)
        if self.t == self.signal_at:
            Big.returning.set()
        return obs, 0.0, False, False, {}


def test_sigkill_of_a_go_client_mid_answer_stops_our_writes(caplog):
    """grpc-go clients SIGKILLed as our server begins a 16 MiB answer (their 4th): the server must
    stop writing to a connection once its socket has failed. It does not: while a large answer
    goes out in a loop of DATA frames (16 KiB each, grpc-go's SETTINGS_MAX_FRAME_SIZE, as grpc-js's
    and C-core's), ``Replies._write`` checks only its own ``_closed``, which ``connection_lost``
    sets later, from the event loop; a send that fails inside that loop leaves the transport lost
    and every further frame of the window is still written to it, each making asyncio log
    "socket.send() raised exception." (hundreds of lines per client). The failure needs the kill to
    land while that loop runs; up to 12 clients are killed, stopping at the first such log."""
    server = servers.start(Big)
    try:
        dead: list = []
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            for _ in range(12):
                Big.returning.clear()
                proc = subprocess.Popen([GO_CLIENT, "-steps", "1000", server.address],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                assert Big.returning.wait(20)
                proc.send_signal(signal.SIGKILL)
                proc.wait(5)
                time.sleep(0.2)
                dead = [r for r in caplog.records if "socket.send() raised exception" in r.getMessage()]
                if dead:
                    break
            result = go_client(server.address, "-steps", "1")                 # it serves on
        assert result["ok"], result
        assert dead == [], f"{len(dead)} writes to a connection already lost, after a SIGKILL"
    finally:
        server.stop()
