"""Shared memory between our client and our server (dmrpc_gym.transport.shared_memory), end to end over real
servers on port 0: values bit-identical with the regions on and off, arrays the user owns, nothing left behind
by a peer killed mid-step, every reference from a peer checked, another user refused, foreign ends unaffected."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from large_worlds import Camera, Frames
from processes import ROOT, ServedProcess, as_nobody
from processes import memfds as any_memfds

from dmrpc_gym.client.agent import RemoteAgent
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.env import DmRpcEnv
from dmrpc_gym.client.vector import DmRpcVectorEnv
from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.protowire import varint
from dmrpc_gym.protocol.region_refs import REF, reference, targets
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server import Server
from dmrpc_gym.transport import STEADY_STEP_ENV, RegionLink
from dmrpc_gym.transport.shared_memory import HELLO

REF_TAG = varint((REF << 3) | 2)
SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")


def memfds(label: str = "dmrpc_gym") -> list[str]:
    """Our regions this process holds (:func:`processes.memfds` of ``label``)."""
    return any_memfds(label)


def until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def same(a, b) -> bool:
    """Equal values of the same types (arrays: dtype, shape, bytes; NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def episode(address: str, shared_memory: bool, steps: int = 12):
    """What a DmRpcEnv returns over ``steps`` steps of a Camera (seeded), and what it said of shared memory."""
    rng = np.random.default_rng(1)
    with DmRpcEnv(address, shared_memory=shared_memory) as env:
        out = [env.reset(seed=3)]
        for _ in range(steps):
            action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
            result = env.step(action)
            out.append(result)
            if result[2]:
                out.append(env.reset())
        return out, env.connection.shared_memory


@pytest.mark.parametrize("steady", ["1", "0"])
def test_values_are_bit_identical_with_the_regions_on_and_off(monkeypatch, steady):
    monkeypatch.setenv(STEADY_STEP_ENV, steady)
    with Server(Camera) as server:
        on, said_on = episode(server.address, True)
        off, said_off = episode(server.address, False)
    assert (said_on, said_off) == ("on", "off")
    assert same(on, off)
    assert any(np.isnan(obs["depth"]).any() for obs, *_ in on[1:])     # NaNs came through, bit for bit


def test_the_arrays_are_the_users_and_the_actions_the_envs():
    """Each observation is a fresh array the next step leaves alone; the action the env keeps (Camera checks
    the ones it kept, else the step fails) is its own, not the region's."""
    with Server(Camera) as server, DmRpcEnv(server.address) as env:
        obs, _ = env.reset(seed=0)
        action = np.full(env.action_space.shape, 0.5, np.float32)
        first, *_ = env.step(action)
        kept = {k: v.copy() for k, v in first.items()}
        for _ in range(5):
            action[:] = -action                   # the next action overwrites the region's action span
            later, *_ = env.step(action)
            assert not np.shares_memory(later["image"], first["image"])
        assert same(first, kept)
        assert all(v.flags.writeable and v.flags.owndata for v in first.values() if v.nbytes >= 1 << 14)
        assert server.stats.snapshot()["shared_memory"]["streams"] == 1


def test_a_server_without_it_and_a_small_world_use_none():
    with Server(Frames, shared_memory=False) as server, DmRpcEnv(server.address) as env:
        env.reset()
        assert env.step(1)[0][0] == 1
        assert env.connection.shared_memory.startswith("not offered by the server")
        assert server.stats.snapshot()["shared_memory"] == {"offered": False, "streams": 0, "bytes": 0}
    with Server("CartPole-v1") as server, DmRpcEnv(server.address) as env:
        env.reset(seed=0)
        env.step(0)
        assert env.connection.shared_memory.startswith("unused (no tensor of a fixed size")
    assert not memfds()


def test_a_token_still_guards_the_call():
    with Server(Frames, token="s3cret") as server:
        with pytest.raises(DmRpcError, match="UNAUTHENTICATED"):
            DmRpcEnv(server.address, token="wrong", connect_timeout=2)
        with DmRpcEnv(server.address, token="s3cret") as env:
            env.reset()
            assert env.step(0)[0][5] == 1 and env.connection.shared_memory == "on"


# -- peers killed mid-step --------------------------------------------------------------------------
_CLIENT = textwrap.dedent("""
    import sys
    from dmrpc_gym.client.env import DmRpcEnv
    env = DmRpcEnv(sys.argv[1])
    env.reset()
    print(env.connection.shared_memory, flush=True)
    env.step(0)
""")


def test_a_client_killed_mid_step_leaves_nothing_behind():
    with Server(lambda: Frames(1 << 20, sleep=0.6)) as server:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), SUPPORT, os.environ.get("PYTHONPATH", "")]))
        child = subprocess.Popen([sys.executable, "-c", _CLIENT, server.address], env=env, stdout=subprocess.PIPE,
                                 text=True)
        try:
            assert child.stdout.readline().strip() == "on"
            assert until(lambda: memfds("dmrpc_gym-client"))      # the server maps the client's region
            time.sleep(0.2)                                           # (mid-step: the env sleeps 0.6 s)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(10)
            child.stdout.close()
        assert until(lambda: not memfds("dmrpc_gym-client")), memfds()
        assert until(lambda: not server.shared_memory.links)
        assert server.stats.snapshot()["shared_memory"]["streams"] == 0


def test_a_server_killed_mid_step_leaves_nothing_behind(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", SUPPORT)
    monkeypatch.setenv("LARGE_WORLDS_SLEEP", "0.6")
    served = ServedProcess(0, "large_worlds:Frames")
    try:
        with DmRpcEnv(served.address) as env:
            env.reset()
            assert env.connection.shared_memory == "on" and memfds("dmrpc_gym-client")
            killer = threading.Timer(0.2, served.kill)
            killer.start()
            with pytest.raises(ConnectionError):
                env.step(0)
            killer.join()
            assert not memfds(), memfds()                        # released once the loss is known
            assert served.processes[-1].poll() == -signal.SIGKILL
    finally:
        served.close()
    assert not memfds()


# -- references from a peer -----------------------------------------------------------------------
def joined(address: str) -> tuple[Connection, RemoteAgent]:
    conn = Connection(address)
    agent = RemoteAgent(conn, conn.send(pb.CreateWorldRequest()).world_name)
    agent.reset()
    return conn, agent


@pytest.mark.parametrize("wrong, said", [
    (lambda size: reference((1 << 14,), pb.FLOAT, size - 4), "runs past the region"),
    (lambda size: reference((1 << 14,), pb.FLOAT, 0, region=3), "region 3, which this connection does not have"),
    (lambda size: reference((1 << 14,), pb.STRING, 0), "data type 10, which no region holds"),
    (lambda size: reference((1 << 14,), pb.FLOAT, 2), "must start at a multiple of 4"),
    (lambda size: reference((1 << 40, 1 << 40), pb.FLOAT, 0), "larger than the region"),
    (lambda size: reference((1 << 14,), pb.FLOAT, 0) + b"\x0a\x00", "a payload beside it"),
    (lambda size: REF_TAG + b"\x02\x00\x00", "3 numbers"),
])
def test_a_clients_garbage_reference_is_refused_by_name(wrong, said):
    with Server(Camera) as server:
        conn, agent = joined(server.address)
        with conn:
            assert conn.shared_memory == "on"
            request, pieces = pb.StepRequest(), large_tensors.Pieces(large_tensors.ACTIONS)
            pieces.add_bytes(1, wrong(conn.regions.region.size))
            with pytest.raises(DmRpcError, match="INVALID_ARGUMENT") as refused:
                conn.send_step(request, pieces)
            assert said in str(refused.value)
            agent.step(np.zeros(1 << 14, np.float32))           # the stream goes on


@pytest.mark.parametrize("spans, said", [
    ({1: (1 << 40, 64)}, "not a span of the region"),
    ({1: (3, 64)}, "not a span of the region"),
])
def test_a_clients_garbage_targets_are_refused_by_name(spans, said):
    with Server(Camera) as server:
        conn, agent = joined(server.address)
        with conn:
            request = pb.StepRequest(requested_observations=agent.requested)
            request.MergeFromString(targets(spans))
            with pytest.raises(DmRpcError, match="INVALID_ARGUMENT") as refused:
                conn.send_step(request)
            assert said in str(refused.value)
            bad = pb.StepRequest()
            bad.MergeFromString(REF_TAG + b"\x02\x01\x02")     # not triples
            with pytest.raises(DmRpcError, match="triples"):
                conn.send_step(bad)


@pytest.mark.parametrize("lie, said", [
    (lambda offset, shape, dt: reference(shape, dt, offset + 64), "this client asked for at most"),
    (lambda offset, shape, dt: reference((shape[0] * 2, *shape[1:]), dt, offset), "this client asked for at most"),
    (lambda offset, shape, dt: reference(shape, pb.DOUBLE, offset), "this client asked for at most"),
    (lambda offset, shape, dt: reference(shape, dt, offset, region=1), "region 1, which this connection does not"),
])
def test_a_servers_garbage_reference_is_a_clear_error(monkeypatch, lie, said):
    place = RegionLink.place

    def lying(self, uid, value, dtype):
        ref = place(self, uid, value, dtype)
        if ref is None or self.reads is not None:              # (the client's own actions: as they are)
            return ref
        offset = self.writes[uid][0]
        return lie(offset, value.shape, pb.UINT8 if value.dtype == np.uint8 else pb.FLOAT)

    with Server(Camera) as server, DmRpcEnv(server.address) as env:
        env.reset()
        monkeypatch.setattr(RegionLink, "place", lying)
        with pytest.raises(ConnectionError, match="no EnvironmentResponse") as failed:
            env.step(np.zeros(env.action_space.shape, np.float32))
        assert said in str(failed.value)
    assert not memfds()


def test_garbage_bools_in_a_region_are_refused():
    from dmrpc_gym.transport import RegionError
    from dmrpc_gym.transport.shm_regions import Region
    with Region.create(1 << 12) as region:
        region.write(0, np.array([1, 0, 7], np.uint8))
        with pytest.raises(RegionError, match="bools at offset 0 hold bytes other than 0 and 1"):
            region.array(0, np.bool_, (3,))


# -- who may join ---------------------------------------------------------------------------------
_NOBODY = textwrap.dedent("""
    import socket, sys
    name, hello = sys.argv[1], bytes.fromhex(sys.argv[2])
    import os, fcntl, struct
    fd = os.memfd_create("nobody", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 4096)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect("\\0" + name)
    try:
        socket.send_fds(sock, [hello + struct.pack("<4sBQ", b"DRGN", 1, 4096)], [fd])
        print(repr(sock.recv(512)), flush=True)
    except (BrokenPipeError, ConnectionResetError):
        print("b''", flush=True)                 # closed before it could even send
""")


def test_a_process_of_another_user_cannot_join():
    nobody = as_nobody()
    python = nobody.pop("python")
    with Server(Camera) as server:
        conn, agent = joined(server.address)
        with conn:
            ours = conn.regions.region
            link = server.shared_memory.links[conn.regions.nonce]
            adopted = link.region
            hello = HELLO.pack(b"DMSM", 1, conn.regions.nonce).hex()      # even with the stream's own nonce
            child = subprocess.run([python, "-c", _NOBODY, server.shared_memory.name, hello], **nobody,
                                   capture_output=True, text=True, timeout=30)
            if "PermissionError" in child.stderr or "ModuleNotFoundError" in child.stderr:
                pytest.skip(f"the child as 'nobody' could not run: {child.stderr[-300:]}")
            assert child.stdout.strip() == "b''", child.stderr        # closed without a word (no b"\x01")
            assert link.region is adopted and conn.regions.region is ours
            agent.step(np.zeros(1 << 14, np.float32))                  # the stream's own region still serves


def test_the_client_checks_the_servers_user(monkeypatch):
    """Our client gives its region only to a server of its own user (SO_PEERCRED): told that the server
    runs as another, it uses none, says why, and steps as plain dm_env_rpc."""
    from dmrpc_gym.transport import shared_memory
    real = shared_memory.check_peer
    monkeypatch.setattr(shared_memory, "check_peer", lambda sock: real(sock, uid=os.geteuid() + 1))
    with Server(Frames) as server, DmRpcEnv(server.address) as env:
        env.reset()
        assert env.step(0)[0][9] == 1
        assert env.connection.shared_memory.startswith("failed: the process at the other end")
        assert server.stats.snapshot()["shared_memory"]["streams"] == 0


def test_a_malformed_or_reused_nonce_gets_no_region():
    with Server(Frames) as server:
        for value in ("zz", "33" * 15, "00" * 16):
            with Connection(server.address, metadata=[("dmrpc-shared-memory", value)], shared_memory=False) as conn:
                conn.send(pb.CreateWorldRequest())
                assert not server.shared_memory.links


# -- vector envs: one region, copy=False ------------------------------------------------------------
def vector_run(address: str, **options) -> tuple[list, Any]:
    from dmrpc_gym.client.vector import DmRpcVectorEnv
    rng = np.random.default_rng(0)
    envs = DmRpcVectorEnv(3, address, **options)
    try:
        obs, _ = envs.reset(seed=1)
        seq = [{k: v.copy() for k, v in obs.items()}]
        for _ in range(9):
            obs, rewards, terminated, truncated, _ = envs.step(rng.uniform(-1, 1, (3, 1 << 14)).astype(np.float32))
            seq.append(({k: v.copy() for k, v in obs.items()}, rewards, terminated, truncated))
        return seq, ([e.connection.shared_memory for e in envs.envs], len(envs._shared.rows))
    finally:
        envs.close()


def test_a_vector_env_has_one_region_and_the_same_values_with_and_without_views():
    with Server(Camera) as server:
        plain, said_plain = vector_run(server.address, shared_memory=False)
        copied, said_copied = vector_run(server.address)
        viewed, said_viewed = vector_run(server.address, copy=False)
    assert said_plain == (["off"] * 3, 0)
    assert said_copied == said_viewed == (["on"] * 3, 4)      # image, depth, mask, signed: a [3, ...] array each
    assert same(copied, plain) and same(viewed, plain)
    assert not memfds()


def test_copy_false_gives_views_valid_until_the_next_step():
    from dmrpc_gym.client.vector import DmRpcVectorEnv
    with Server(Frames) as server:
        envs = DmRpcVectorEnv(4, server.address, copy=False)
        try:
            envs.reset()
            first = envs.step(np.zeros(4, np.int64))[0]
            assert not first.flags.owndata and first.shape == (4, 1 << 20) and (first == 1).all()
            second = envs.step(np.zeros(4, np.int64))[0]
            assert np.shares_memory(first, second) and (first == 2).all()    # the next step overwrote it
        finally:
            envs.close()
        del first, second
        envs = DmRpcVectorEnv(4, server.address)
        try:
            envs.reset()
            first = envs.step(np.zeros(4, np.int64))[0]
            envs.step(np.zeros(4, np.int64))
            assert first.flags.owndata and (first == 1).all()                # copy=True: the caller's own
        finally:
            envs.close()
        del envs                                   # (its latest observations: views of the region)
    assert not memfds()


@pytest.mark.parametrize("steady", ["1", "0"])
def test_steps_through_regions_take_the_steady_path_with_the_same_values(monkeypatch, steady):
    """A Discrete action's steps, their observations in the region: the steady-state paths (client and server)
    take them once learned, and every value is what the general path over plain messages gives."""
    from large_worlds import DiscreteCamera
    monkeypatch.setenv(STEADY_STEP_ENV, steady)
    runs = {}
    with Server(DiscreteCamera) as server:
        for shared_memory in (True, False):
            with DmRpcEnv(server.address, shared_memory=shared_memory) as env:
                out = [env.reset(seed=5)]
                for i in range(23):
                    out.append(env.step(i % 3))
                    if out[-1][2]:
                        out.append(env.reset())
                runs[shared_memory] = out
                steady_path = env._agent.steady
                if shared_memory and steady == "1":
                    assert steady_path.layout is not None and len(steady_path.region_slots) == 4
                    assert server.shared_memory.in_use()[0] == 1
    assert same(runs[True], runs[False])


# -- every client takes shared_memory=, the command line and the reports say it ---------------------
def test_the_parallel_env_has_a_region_per_agent_and_the_same_values():
    pytest.importorskip("pettingzoo")
    from large_worlds import Cameras
    from dmrpc_gym.client.parallel import DmRpcParallelEnv
    runs = {}
    with Server(Cameras, kind="pettingzoo") as server:
        for shared_memory in (True, False):
            env = DmRpcParallelEnv(server.address, shared_memory=shared_memory)
            try:
                out = [env.reset(seed=1)]
                while env.agents:
                    out.append(env.step({a: i + 1 for i, a in enumerate(env.agents)}))
                runs[shared_memory] = out
                said = {c.shared_memory for c in env.connections.values()}
            finally:
                env.close()
            assert said == ({"on"} if shared_memory else {"off"})
    assert same(runs[True], runs[False]) and len(runs[True]) == 7


def test_sb3_and_dm_env_clients_take_it():
    from dmrpc_gym.client.dm_env_client import connect_dm_env
    with Server(Frames) as server:
        for shared_memory in (True, False):
            env = connect_dm_env(server.address, shared_memory=shared_memory)
            try:
                env.reset()
                step = env.step(1)
                assert step.observation[3] == 1
                assert env.env.connection.shared_memory == ("on" if shared_memory else "off")
            finally:
                env.close()
        sb3 = pytest.importorskip("stable_baselines3")
        assert sb3
        from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv
        for shared_memory in (True, False):
            venv = DmRpcSB3VecEnv(2, server.address, shared_memory=shared_memory)
            try:
                venv.reset()
                obs, *_ = venv.step(np.array([1, 0]))
                assert obs.shape == (2, 1 << 20) and (obs[:, 7] == 1).all()
                assert {e.connection.shared_memory for e in venv.envs} == {"on" if shared_memory else "off"}
            finally:
                venv.close()


def test_serve_no_shared_memory_and_what_inspect_and_status_say(monkeypatch):
    from dmrpc_gym.app.report import format_report, inspect_world
    from dmrpc_gym.app.status import StatusReader, format_status, with_rates
    monkeypatch.setenv("PYTHONPATH", SUPPORT)
    served = ServedProcess(0, "large_worlds:Frames", ("--no-shared-memory",))
    try:
        with DmRpcEnv(served.address) as env:
            assert env.connection.shared_memory.startswith("not offered by the server")
        report = format_report(inspect_world(served.address))
        assert "Shared memory: not offered by the server" in report and "Unix socket" not in report
        with StatusReader(served.address) as reader:
            assert "shared mem   not offered (serve --no-shared-memory)" in format_status(
                with_rates(reader.read(), None), served.address)
    finally:
        served.close()
    with Server(Frames) as server:
        assert format_report(inspect_world(server.address)).splitlines()[1:3] == [
            "Shared memory: on", "Connection: moved to the server's Unix socket (same host)"]
        with DmRpcEnv(server.address) as env, StatusReader(server.address) as reader:
            env.reset()
            assert "shared mem   offered; 1 streams use it (1.0 MB of regions)" in format_status(
                with_rates(reader.read(), None), server.address)


def test_a_region_past_the_servers_bound_is_refused_and_the_steps_go_on():
    with Server(Frames, max_shared_memory=1 << 16) as server, DmRpcEnv(server.address) as env:
        env.reset()
        assert env.step(1)[0][11] == 1
        assert env.connection.shared_memory == ("failed: the server refused the region: the peer announced a region "
                                                f"of {1 << 20} bytes; at most {1 << 16} are accepted")
        assert server.stats.snapshot()["shared_memory"]["streams"] == 0
    with pytest.raises(ValueError, match="max_shared_memory must be a whole number of bytes >= 1, got 0"):
        Server(Frames, max_shared_memory=0)
    assert not memfds()


class OddFrames(gym.Env):
    """A uint8 observation of an odd number of bytes (99 x 101 x 3): its rows cannot lie back to back."""

    observation_space, action_space = gym.spaces.Box(0, 255, (99, 101, 3), np.uint8), gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        return np.zeros((99, 101, 3), np.uint8), {}

    def step(self, action):
        return np.full((99, 101, 3), int(action) + 1, np.uint8), 0.0, False, False, {}


def test_a_vector_env_of_rows_that_cannot_lie_back_to_back_steps_and_says_copy_false_gives_copies():
    with Server(OddFrames) as server:
        envs = DmRpcVectorEnv(3, server.address)          # copy=True: nothing to say
        try:
            envs.reset(seed=0)
            obs = envs.step(np.array([0, 1, 2]))[0]
            assert [int(o[0, 0, 0]) for o in obs] == [1, 2, 3]
            assert all(env.connection.shared_memory == "on" for env in envs.envs)
        finally:
            envs.close()
        with pytest.warns(UserWarning, match=r"copy=False.*copies here.*29997 bytes are not a multiple of 8"):
            envs = DmRpcVectorEnv(3, server.address, copy=False)
        try:
            envs.reset(seed=0)
            first = envs.step(np.array([2, 1, 0]))[0]
            assert [int(o[0, 0, 0]) for o in first] == [3, 2, 1] and first.flags.owndata
        finally:
            envs.close()
