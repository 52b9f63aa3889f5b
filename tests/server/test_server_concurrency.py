"""Worlds step concurrently: env calls off the event loop (worker threads) or in worker processes.

Real servers on loopback ports, real clients. Overlap is shown structurally:
the test env records where and when each ``step`` ran, and the tests assert
that steps of different worlds were in progress at the same time, that a
world held inside ``step`` does not keep another from stepping, and (process
mode) in which processes envs ran. Nothing here asserts a duration.
"""
from __future__ import annotations

import os
import pathlib
import sys
import threading
import types
import time

import gymnasium as gym
import numpy as np
import pytest

import dmrpc_gym
import servers
from dmrpc_gym import DmRpcEnv
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.properties import Properties
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import pack_any, pb, props_pb, unpack_any
from dmrpc_gym.server import Server
from dmrpc_gym.client.vector import DmRpcVectorEnv
from dmrpc_gym.worlds.catch import Catch
from dmrpc_gym.worlds.tag import Tag

#: (env id, thread name, start, end) of every finished step, in this process (thread mode).
STEPS: list[tuple[int, str, float, float]] = []
#: Envs built with ``delay=-1`` wait for this in ``step`` (thread mode only).
HOLD = threading.Event()
#: Set when an env enters a held step.
HELD = threading.Event()
#: Seconds every Sleepy step sleeps on top of its own delay (thread mode).
EXTRA = [0.0]
BARRIER: list = [None]   # a threading.Barrier every in-process step waits at, when set
#: (id, building seconds) of every Sleepy closed (thread mode).
CLOSED: list[tuple[int, float]] = []
#: Set when a Sleepy with a building time starts being built (thread mode).
BUILDING = threading.Event()
WAIT = 30.0   # seconds a test waits for something that should happen at once


class Sleepy(gym.Env):
    """Each step sleeps ``delay`` s (outside the GIL) and is recorded in ``STEPS``.

    ``delay=-1`` waits for ``HOLD``; ``marker``: a file created when a step
    starts; ``fail``: step raises. The observation: the pid the env runs in,
    and when its last step started and ended (``time.monotonic``, one clock for
    every process of the machine).
    """

    metadata = {"render_modes": []}

    def __init__(self, delay: float = 0.01, marker: str = "", fail: bool = False, build: float = 0.0,
                 meet: str = ""):
        self.delay, self.marker, self.fail, self.build = float(delay), str(marker), bool(fail), float(build)
        self.meet = str(meet)   # a folder: each step waits there until 2 steps (of any process) have started
        if self.build:
            BUILDING.set()
        time.sleep(self.build)
        self.observation_space = gym.spaces.Box(0.0, np.inf, (3,), np.float64)
        self._last = (0.0, 0.0)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self) -> np.ndarray:
        return np.array([os.getpid(), *self._last], np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def close(self):
        CLOSED.append((id(self), self.build))

    def step(self, action):
        start = time.monotonic()
        if self.marker:
            open(self.marker, "w").close()
        if self.fail:
            raise ValueError("boom")
        if BARRIER[0] is not None:
            BARRIER[0].wait()                  # broken (an error) unless the others step meanwhile
        if self.meet:
            _meet(self.meet)
        if self.delay < 0:
            HELD.set()
            HOLD.wait(WAIT)
        elif self.delay + EXTRA[0] > 0:
            time.sleep(self.delay + EXTRA[0])
        self._last = (start, time.monotonic())
        STEPS.append((id(self), threading.current_thread().name, *self._last))
        return self._obs(), 1.0, False, False, {}


def _meet(folder: str, parties: int = 2) -> None:
    """Wait until ``parties`` steps, in any processes, have started (bounded by ``WAIT``)."""
    path = pathlib.Path(folder)
    (path / f"{os.getpid()}-{threading.get_ident()}").touch()
    deadline = time.monotonic() + WAIT
    while len(list(path.iterdir())) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(list(path.iterdir()))} of {parties} steps started together")
        time.sleep(0.005)


class SlowTag(Tag):
    """Tag whose ``reset`` and ``step`` sleep 20 ms and count the calls in progress at once."""

    calls = {"now": 0, "most": 0, "steps": 0}
    lock = threading.Lock()
    entered = threading.Event()

    def _timed(self, call, *args, **kwargs):
        with self.lock:
            self.calls["now"] += 1
            self.calls["most"] = max(self.calls["most"], self.calls["now"])
        self.entered.set()
        try:
            time.sleep(0.02)
            return call(*args, **kwargs)
        finally:
            with self.lock:
                self.calls["now"] -= 1

    def reset(self, seed=None, options=None):
        return self._timed(super().reset, seed=seed, options=options)

    def step(self, actions):
        self.calls["steps"] += 1
        return self._timed(super().step, actions)


def max_overlap(steps: list[tuple[int, str, float, float]]) -> int:
    """The most steps that were in progress at one moment."""
    events = sorted([(s, 1) for _, _, s, _ in steps] + [(e, -1) for _, _, _, e in steps])
    best = now = 0
    for _, change in events:
        now += change
        best = max(best, now)
    return best


def pids_of(obs: np.ndarray) -> set[int]:
    return {int(p) for p in np.asarray(obs)[:, 0]}


# -- threads -------------------------------------------------------------------------------

def test_worlds_of_one_vector_env_step_at_the_same_time_off_the_loop():
    STEPS.clear()
    with Server(Sleepy) as server:
        envs = DmRpcVectorEnv(num_envs=8, address=server.address)
        try:
            envs.reset(seed=0)
            BARRIER[0] = threading.Barrier(8, timeout=WAIT)    # the 8 worlds' steps must meet
            try:
                envs.step(np.zeros(8, np.int64))
            finally:
                BARRIER[0] = None
            for _ in range(5):
                envs.step(np.zeros(8, np.int64))
        finally:
            envs.close()
    assert len(STEPS) == 48
    assert len({env for env, *_ in STEPS}) == 8
    # Every step ran on a worker thread, never on the server's event-loop thread.
    assert all(name.startswith("dmrpc-gym-env") for _, name, _, _ in STEPS), {n for _, n, _, _ in STEPS}
    assert len({name for _, name, _, _ in STEPS}) >= 2
    # Steps of all 8 worlds were in progress together (the barrier above passed: a world
    # stepping alone would have broken it) ... and never two steps of one env.
    for env in {env for env, *_ in STEPS}:
        assert max_overlap([step for step in STEPS if step[0] == env]) == 1


def test_a_world_held_inside_step_delays_no_other_world_nor_other_requests():
    STEPS.clear()
    HOLD.clear()
    HELD.clear()
    with Server(Sleepy) as server:
        slow = DmRpcEnv(server.address, world_settings={"delay": -1})
        fast = DmRpcEnv(server.address, world_settings={"delay": 0.0})
        stuck = threading.Thread(target=slow.step, args=(0,), daemon=True)
        try:
            slow.reset(seed=0)
            fast.reset(seed=0)
            stuck.start()
            assert HELD.wait(WAIT), "the slow world never entered step"
            for _ in range(5):
                fast.step(1)
            # Other requests of other streams are answered too: properties, CreateWorld + JoinWorld.
            assert fast.properties["episode_step"].item() == 5
            late = DmRpcEnv(server.address, world_settings={"delay": 0.0})
            late.reset(seed=1)
            late.step(0)
            late.close()
            # All that happened while the slow world was still inside its step.
            assert stuck.is_alive() and not HOLD.is_set()
            assert len(STEPS) == 6 and id(slow) not in {env for env, *_ in STEPS}
        finally:
            HOLD.set()
            stuck.join(WAIT)
            slow.close()
            fast.close()
    assert not stuck.is_alive()


@pytest.mark.parametrize("delay, rounds", [(0.005, 6), (0.0, 30)], ids=["on workers", "worker then inline"])
def test_one_stream_is_answered_strictly_in_order(delay, rounds):
    # Quick steps move from the workers to the loop (answered on the turn that read them, with
    # no task) after a streak: the order holds across that change, in one pipelined burst.
    read = pack_any(props_pb.PropertyRequest(read_property=props_pb.ReadPropertyRequest(key="episode_step")))
    STEPS.clear()
    with Server(Sleepy) as server, Connection(server.address) as conn:
        world = conn.send(pb.CreateWorldRequest(settings={"delay": tensors.pack(delay)}))
        conn.send(pb.JoinWorldRequest(world_name=world.world_name))
        # Pipelined: every request is written before any answer is read.
        for _ in range(rounds):
            conn.submit(pb.StepRequest())
            conn.submit_extension(read)
        seen = []
        for _ in range(rounds):
            assert conn.receive().state == pb.RUNNING
            answer = unpack_any(conn.receive(), props_pb.PropertyResponse)
            seen.append(int(answer.read_property.value.int64s.array[0]))
    # Each read answers after the step before it: the first step starts the sequence (0 taken).
    assert seen == list(range(rounds)), seen
    on_loop = {name == f"dmrpc-gym-server {server.factory.name}" for _, name, _, _ in STEPS}
    assert on_loop == ({False} if delay else {False, True}), STEPS


def test_an_env_built_for_a_stream_that_ended_meanwhile_is_closed():
    CLOSED.clear()
    with Server(Sleepy) as server:
        first = Connection(server.address)
        world = first.send(pb.CreateWorldRequest(settings={"build": tensors.pack(0.5)})).world_name
        first.send(pb.JoinWorldRequest(world_name=world))      # takes the env CreateWorld built
        second = Connection(server.address)
        BUILDING.clear()
        second.submit(pb.JoinWorldRequest(world_name=world))   # builds another env (0.5 s) ...
        assert BUILDING.wait(WAIT)
        second.close()                                          # ... for a stream that ends meanwhile
        deadline = time.monotonic() + WAIT
        while not CLOSED and time.monotonic() < deadline:
            time.sleep(0.02)
        assert CLOSED and CLOSED[0][1] == 0.5, CLOSED
        first.close()


def test_workers_zero_runs_envs_on_the_loop_and_bad_numbers_are_refused():
    STEPS.clear()
    with Server(Sleepy, workers=0) as server:
        env = DmRpcEnv(server.address, world_settings={"delay": 0.0})
        env.reset(seed=0)
        env.step(0)
        env.close()
    assert [name for _, name, _, _ in STEPS] == [f"dmrpc-gym-server {server.factory.name}"]
    with pytest.raises(ValueError, match="workers must be a whole number"):
        Server(Catch, workers=-1)
    with pytest.raises(ValueError, match="processes must be a whole number"):
        Server(Catch, processes=-2)
    with pytest.raises(ValueError, match="processes= needs worker threads"):
        Server(Catch, processes=1, workers=0)


def test_quick_steps_run_on_the_loop_until_one_is_slow():
    STEPS.clear()
    EXTRA[0] = 0.0
    with Server(Sleepy, inline_below=0.05) as server, Server(Sleepy, inline_below=0) as never:
        loop_thread = f"dmrpc-gym-server {server.factory.name}"
        env = DmRpcEnv(server.address, world_settings={"delay": 0.0})
        env.reset(seed=0)
        for _ in range(60):
            env.step(0)
        quick = [name for _, name, _, _ in STEPS]
        # The first calls (the reset, then 7 steps) go to a worker; once a streak of 8 quick
        # ones is seen, they run on the loop.
        assert all(name.startswith("dmrpc-gym-env") for name in quick[:7])
        assert loop_thread in quick[7:], quick
        STEPS.clear()
        EXTRA[0] = 0.1     # the env turns slow: the first slow step sends the next ones to workers
        try:
            for _ in range(6):
                env.step(0)
        finally:
            EXTRA[0] = 0.0
        slow = [name for _, name, _, _ in STEPS]
        assert all(name.startswith("dmrpc-gym-env") for name in slow[1:]), slow
        env.close()
        STEPS.clear()
        env = DmRpcEnv(never.address, world_settings={"delay": 0.0})
        env.reset(seed=0)
        for _ in range(30):
            env.step(0)
        env.close()
        assert all(name.startswith("dmrpc-gym-env") for _, name, _, _ in STEPS)
    with pytest.raises(ValueError, match="inline_below must be"):
        Server(Catch, inline_below=-1)


def test_an_env_stepping_alone_runs_its_sub_millisecond_steps_on_the_loop():
    # 0.3 ms steps are slow for inline_below (0.1 ms) but short for ALONE_BELOW (10 ms): alone on
    # its server, the env saves the hand-off to a thread; with a second env stepping beside it,
    # its steps go back to the workers (where the two overlap).
    STEPS.clear()
    EXTRA[0] = 0.0
    with Server(Sleepy) as server:
        loop_thread = f"dmrpc-gym-server {server.factory.name}"
        first = DmRpcEnv(server.address, world_settings={"delay": 0.0003})
        second = DmRpcEnv(server.address, world_settings={"delay": 0.0003})
        try:
            first.reset(seed=0)
            for _ in range(40):
                first.step(0)
            alone = [name for env, name, _, _ in STEPS]
            assert loop_thread in alone[8:], alone
            second.reset(seed=0)
            STEPS.clear()
            for _ in range(20):
                first.step(0)
                second.step(0)
            together = [name for _, name, _, _ in STEPS]
        finally:
            first.close()
            second.close()
    assert loop_thread not in together[4:], together


# -- processes -----------------------------------------------------------------------------

def test_envs_live_in_worker_processes(tmp_path):
    STEPS.clear()
    with Server(Sleepy, processes=2) as server:
        assert len(server.env_pids) == 2 and os.getpid() not in server.env_pids
        envs = DmRpcVectorEnv(num_envs=2, address=server.address,
                              world_settings={"delay": 0.0, "meet": str(tmp_path)})
        try:
            first, _ = envs.reset(seed=0)
            obs, *_ = envs.step(np.zeros(2, np.int64))
        finally:
            envs.close()
        pids = pids_of(obs)
        assert pids == pids_of(first)
        # Two envs, each in its own worker process (the least loaded one gets the next env) ...
        assert pids == set(server.env_pids)
        # ... and the two processes were in their steps at the same time (each waited for the other).
        starts, ends = obs[:, 1], obs[:, 2]
        assert starts.min() > 0 and starts.max() < ends.min(), obs
    assert not STEPS, "no step ran in the test's (the server's) process"


def test_process_mode_serves_rgb_errors_and_properties():
    with Server(Catch, processes=1) as server:
        env = DmRpcEnv(server.address, render_mode="rgb_array", world_settings={"rows": 6}, seed_setting="seed")
        env.reset(seed=3)
        frame = env.render()
        assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
        env.step(env.action_space.sample())
        assert env.properties["episode_step"].item() == 1
        env.properties["seed"] = 17
        assert env.properties["seed"].item() == 17
        assert set(env.properties) >= {"env_id", "worlds", "world_name", "seed", "episode_step", "episode_return"}
        env.close()
    with Server(Sleepy, processes=1) as server:
        env = DmRpcEnv(server.address, world_settings={"fail": True})
        env.reset(seed=0)
        with pytest.raises(DmRpcError, match="step raised ValueError: boom") as caught:
            env.step(0)
        assert caught.value.code_name == "INTERNAL"
        env.close()


def test_process_mode_needs_a_factory_a_process_can_import(monkeypatch):
    with pytest.raises(ValueError, match="processes= needs a factory"):
        Server(lambda: Sleepy(), processes=1)
    # Picklable here, but its module exists only in this process: the worker cannot load it.
    ghost = types.ModuleType("ghost_module_of_this_test")
    ghost.Ghost = type("Ghost", (Sleepy,), {"__module__": ghost.__name__})
    monkeypatch.setitem(sys.modules, ghost.__name__, ghost)
    server = Server(ghost.Ghost, processes=1)
    with pytest.raises(ValueError, match="env worker process .*Ghost"):
        server.start()
    server.stop()


def _tag_rounds(env) -> tuple[list, np.ndarray]:
    observations, _ = env.reset(seed=4)
    states = [sorted(observations)]
    for _ in range(3):
        observations, *_ = env.step({a: 0 for a in env.agents})   # stay: no capture ends the episode early
        states.append(sorted(observations))
    props = Properties(env.connections[env.possible_agents[0]])
    return states, props["episode_step"]


@pytest.mark.parametrize("options", [{}, {"workers": 0}, {"processes": 2}], ids=["threads", "loop", "processes"])
def test_multi_agent_tag_and_its_properties(options):
    with Server(Tag, **options) as server:
        agents = Tag(pursuers=1, evaders=1).possible_agents
        env = dmrpc_gym.parallel_env(server.address, world_settings={"pursuers": 1, "evaders": 1, "size": 12},
                                     agents=agents, step_timeout=WAIT)
        try:
            states, steps = _tag_rounds(env)
        finally:
            env.close()
    assert states[0] == sorted(agents)
    assert steps.item() == 3


def test_a_multi_agent_env_is_called_one_call_at_a_time_through_resets_and_aborts():
    SlowTag.calls.update(now=0, most=0, steps=0)
    with Server(SlowTag, inline_below=0) as server:
        agents = ["pursuer_0", "evader_0"]
        env = dmrpc_gym.parallel_env(server.address, world_settings={"pursuers": 1, "evaders": 1, "size": 12},
                                     agents=agents, step_timeout=WAIT)
        other = Connection(server.address)
        try:
            env.reset(seed=0)
            results: list = []
            for round_ in range(6):
                SlowTag.entered.clear()
                stepping = threading.Thread(target=lambda: results.append(
                    env.step({a: 0 for a in env.agents})), daemon=True)
                stepping.start()
                assert SlowTag.entered.wait(WAIT)
                if round_ % 2:   # ResetWorld while the env steps: the episode ends for both agents
                    other.send(pb.ResetWorldRequest(world_name=env.world_name))
                stepping.join(WAIT)
                assert not stepping.is_alive()
                if not env.agents:
                    env.reset(seed=round_)
        finally:
            other.close()
            env.close()
    # Rounds whose episode a ResetWorld ended came back truncated for every agent.
    assert any(all(truncations.values()) for _, _, _, truncations, _ in results[1::2])
    assert SlowTag.calls["steps"] >= 3
    assert SlowTag.calls["most"] == 1, SlowTag.calls


def test_tag_env_on_the_embedded_server_still_plays():
    env = dmrpc_gym.tag_env(pursuers=1, evaders=1, size=10, step_timeout=WAIT)
    try:
        states, steps = _tag_rounds(env)
    finally:
        env.close()
    assert states[0] == ["evader_0", "pursuer_0"] and steps.item() == 3


# -- stopping ------------------------------------------------------------------------------

def _stop_in_thread(server: Server) -> threading.Thread:
    stopper = threading.Thread(target=server.stop, daemon=True)
    stopper.start()
    stopper.join(WAIT * 2)
    return stopper


def test_stop_returns_while_a_world_is_stuck_in_step():
    HOLD.clear()
    HELD.clear()
    server = Server(Sleepy).start()
    env = DmRpcEnv(server.address, world_settings={"delay": -1})
    env.reset(seed=0)
    stuck = threading.Thread(target=lambda: pytest.raises(Exception, env.step, 0), daemon=True)
    stuck.start()
    try:
        assert HELD.wait(WAIT)
        assert not _stop_in_thread(server).is_alive(), "stop() hung on a stuck env"
    finally:
        HOLD.set()
        stuck.join(WAIT)
        env.close()


def test_stop_terminates_worker_processes_stuck_in_step(tmp_path):
    marker = tmp_path / "stepping"
    server = Server(Sleepy, processes=1).start()
    pids = server.env_pids
    env = DmRpcEnv(server.address, world_settings={"delay": 3600.0, "marker": str(marker)})
    env.reset(seed=0)
    stuck = threading.Thread(target=lambda: pytest.raises(Exception, env.step, 0), daemon=True)
    stuck.start()
    try:
        deadline = time.monotonic() + WAIT
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), "the env never started its step"
        assert not _stop_in_thread(server).is_alive(), "stop() hung on a stuck worker process"
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        stuck.join(WAIT)
        env.close()


def test_cli_serve_takes_workers_and_processes():
    server = servers.serve_like_cli("dmrpc_gym.worlds.catch:Catch", "--workers", "3", "--processes", "1")
    try:
        assert server.workers == 3 and len(server.env_pids) == 1
        env = DmRpcEnv(server.address)
        env.reset(seed=0)
        env.step(env.action_space.sample())
        env.close()
    finally:
        server.stop()


def test_closing_the_pool_runs_the_calls_already_posted_first():
    """Server.stop() closes worlds by posting env closes: they must have run when it returns
    (a Godot game, say, is a process that close() ends), unless an env is stuck."""
    from dmrpc_gym.server.running.workers import WorkerPool
    pool = WorkerPool(2)
    lane, done = pool.lane(), []
    for i in range(3):                      # several calls queued on one lane: each hands it back
        lane.post(lambda i=i: (time.sleep(0.05), done.append(i)))
    pool.close(timeout=WAIT)
    assert done == [0, 1, 2]

    stuck, release = WorkerPool(1), threading.Event()
    stuck.lane().post(release.wait)
    closer = threading.Thread(target=stuck.close, kwargs={"timeout": 0.2}, daemon=True)
    closer.start()
    closer.join(WAIT)
    assert not closer.is_alive(), "close() waited on a call that never ends"
    release.set()
