"""Where a served two-agent Godot RL step goes: counts that noise cannot move much, and a cProfile.

    python benchmarks/profile_godot_rl.py [--steps 300] [--action-repeat 8] [--top 25] [--cprofile]

A server (``Server(GodotRLWorlds(WALKERS))``) and a ``dmrpc_gym.parallel_env`` client run in this
process; after a warm-up, a profile hook (as ``bench_counts.py``'s) counts, per world step, the Python
calls on each thread (the client's main thread, the gRPC reader, the server's event loop, the env
workers) and the calls of the functions that tell where the time goes: event-loop turns
(``_run_once``), hand-offs to a worker thread (``Lane._run_one``), env steps run inline on the loop
(``Lane.inline``), the game's exchanges, observation decodings, hex decodings, space checks.
``--cprofile``: then a cProfile of the same steps, every thread, the top functions by own time.
``--cpu``: instead, CPU milliseconds per world step of each process (from ``/proc``: user + system),
served (client, ``dmrpc-gym serve`` subprocess, its game) and direct (this process, its game), and the
wall time a step takes in each: what a served step adds, by process, beyond the game's own work.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import sys
import threading
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import dmrpc_gym  # noqa: E402
from dmrpc_gym.integrations.godot_rl import WALKERS_PROJECT, GodotRLWarning, GodotRLWorlds  # noqa: E402
from dmrpc_gym.server import Server  # noqa: E402
from servers import serve_command  # noqa: E402
from bench_godot_rl import children  # noqa: E402

ACTION = {"move": np.array([0.5], np.float32), "run": 0}
#: Functions (by qualified name, or a C function's name) whose calls per step tell where a step goes.
WATCHED = ("BaseEventLoop._run_once", "Lane._run_one", "Lane.inline", "Lane.quick", "Lane.call",
           "GodotRLGame.step", "GodotRLGame.send", "GodotRLGame.step_answer", "Link.receive", "Link.send",
           "decode_observation", "encode_action", "fromhex", "ParallelWorld.act", "ParallelWorld._round",
           "ParallelWorld._notify", "ParallelWorld._wait", "ParallelAgent.step", "call_soon_threadsafe",
           "Box.contains", "Dict.contains", "Discrete.contains", "loads", "dumps", "sendall", "recv")


def _role(thread: str) -> str:
    if thread == "MainThread":
        return "client (main thread)"
    if thread.startswith("dmrpc-gym-server"):
        return "server event loop"
    if thread.startswith("dmrpc-gym-env"):
        return "server env workers"
    return f"other ({thread.split('-')[0] if thread else '?'})"


class Counter:
    """A profile hook: Python calls per thread role, and calls of the :data:`WATCHED` functions; once
    ``profiling`` is set, each thread's next call starts a cProfile of that thread instead (in ``profiles``)."""

    def __init__(self) -> None:
        self.on = self.profiling = False
        self.per_role: collections.Counter = collections.Counter()
        self.per_name: collections.Counter = collections.Counter()
        self.profiles: dict[str, list[cProfile.Profile]] = collections.defaultdict(list)
        self._lock = threading.Lock()

    def __call__(self, frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        if self.profiling:
            profile = cProfile.Profile()
            with self._lock:
                self.profiles[_role(threading.current_thread().name)].append(profile)
            profile.enable()                 # replaces this hook on this thread
            return
        if not self.on or event not in ("call", "c_call"):
            return
        if event == "call":
            code = frame.f_code
            name = getattr(code, "co_qualname", code.co_name)
        else:
            name = getattr(arg, "__qualname__", getattr(arg, "__name__", ""))
        with self._lock:
            if event == "call":
                self.per_role[_role(threading.current_thread().name)] += 1
            if name in WATCHED or name.rsplit(".", 1)[-1] in ("fromhex", "contains", "sendall", "recv"):
                self.per_name[name] += 1


class _Snapshot:
    """What ``pstats.Stats`` reads of a profile still enabled on another thread."""

    def __init__(self, profile: cProfile.Profile) -> None:
        self.profile = profile

    def create_stats(self) -> None:
        self.profile.snapshot_stats()
        self.stats = self.profile.stats


def steps(env, n: int) -> None:
    for _ in range(n):
        if not env.agents:
            env.reset()
        env.step({agent: ACTION for agent in env.agents})


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_table(n: int, action_repeat: int, heavy: bool = False, serve_args: tuple[str, ...] = (),
              tree: str | None = None) -> None:
    """CPU ms per world step of each process, served and direct, and the wall ms of a step; ``heavy``:
    the game spending ``godot_rl_heavy.FRAME_COST_USEC`` of CPU on each physics frame."""
    from dmrpc_gym.integrations.godot_rl import GodotRLParallelEnv
    from godot_rl_heavy import EXTRA_ARGS
    server, address = serve_command("godot_rl_heavy:WORLDS" if heavy else f"godot-rl:{WALKERS_PROJECT}", *serve_args,
                                    **({"tree": tree} if tree else {}))
    try:
        served = dmrpc_gym.parallel_env(address, world_settings={"seed": 0, "action_repeat": action_repeat})
        served.reset()
        steps(served, 200)
        game = [pid for pid in children(server.pid)][-1]
        pids = {"client": os.getpid(), "server": server.pid, "game": game}
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        started = time.perf_counter()
        steps(served, n)
        wall = time.perf_counter() - started
        used = {name: (cpu_seconds(pid) - before[name]) / n * 1e3 for name, pid in pids.items()}
        served.close()
    finally:
        server.kill()
        server.wait()
    direct = GodotRLParallelEnv(WALKERS_PROJECT, seed=0, action_repeat=action_repeat,
                                extra_args=EXTRA_ARGS if heavy else ())
    try:
        direct.reset()
        steps(direct, 200)
        game = children(os.getpid())[-1]
        pids = {"client": os.getpid(), "game": game}
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        started = time.perf_counter()
        steps(direct, n)
        direct_wall = time.perf_counter() - started
        direct_used = {name: (cpu_seconds(pid) - before[name]) / n * 1e3 for name, pid in pids.items()}
    finally:
        direct.close()
    print(f"# CPU ms per world step (user + system, /proc; {n} steps, action_repeat {action_repeat}, "
          f"{'the heavy game, ' if heavy else ''}{' '.join(serve_args) + ', ' if serve_args else ''}"
          f"{'served by ' + tree + ', ' if tree else ''}"
          f"load average {os.getloadavg()[0]:.1f})")
    print("| | client (Python) | server | game | wall ms a step |")
    print("|---|---:|---:|---:|---:|")
    print(f"| served | {used['client']:.3f} | {used['server']:.3f} | {used['game']:.3f} | {wall / n * 1e3:.3f} |")
    print(f"| direct | {direct_used['client']:.3f} | - | {direct_used['game']:.3f} | {direct_wall / n * 1e3:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--action-repeat", type=int, default=8)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--workers", type=int, default=None, help="the server's workers (default: its own)")
    parser.add_argument("--cpu", action="store_true", help="CPU ms per step of each process instead")
    parser.add_argument("--heavy", action="store_true", help="with --cpu: the game of godot_rl_heavy.py")
    parser.add_argument("--serve-arg", action="append", default=[], help="with --cpu: an argument of `serve`")
    parser.add_argument("--tree", help="with --cpu: served by this checkout's server (a before, say)")
    args = parser.parse_args()
    warnings.simplefilter("ignore", GodotRLWarning)
    if args.cpu:
        cpu_table(args.steps, args.action_repeat, args.heavy, tuple(args.serve_arg), args.tree)
        return
    options = {} if args.workers is None else {"workers": args.workers}
    counter = Counter()
    threading.setprofile(counter)                        # every thread started from now on
    sys.setprofile(counter)
    server = Server(GodotRLWorlds(WALKERS_PROJECT), **options).start()
    env = dmrpc_gym.parallel_env(server.address, world_settings={"seed": 0, "action_repeat": args.action_repeat})
    try:
        env.reset()
        steps(env, 200)                                  # warm-up: the lane's streak, caches
        counter.on = True
        started = time.perf_counter()
        steps(env, args.steps)
        took = time.perf_counter() - started
        counter.on = False
        n = args.steps
        print(f"# {n} world steps of 2 agents, action_repeat {args.action_repeat}, "
              f"{took / n * 1e3:.2f} ms a step under the hook (load average {os.getloadavg()[0]:.1f})")
        print("\nPython calls per world step, by thread:")
        for role, count in sorted(counter.per_role.items()):
            print(f"  {role:28s} {count / n:8.1f}")
        print(f"  {'all':28s} {sum(counter.per_role.values()) / n:8.1f}")
        print("\nCalls per world step of the watched functions:")
        for name, count in sorted(counter.per_name.items()):
            print(f"  {name:28s} {count / n:8.2f}")
        if args.cprofile:
            counter.profiling = True
            steps(env, 5)                                # every thread starts its cProfile
            started = time.perf_counter()
            steps(env, args.steps)
            took = time.perf_counter() - started
            print(f"\n# cProfile: {took / n * 1e3:.2f} ms a step under it (the first 5 steps' calls included)")
            for role, profiles in sorted(counter.profiles.items()):
                out = io.StringIO()
                stats = pstats.Stats(*map(_Snapshot, profiles), stream=out)
                print(f"\ncProfile of {role} ({len(profiles)} thread(s)), by own time:")
                stats.sort_stats("tottime").print_stats(args.top)
                print("\n".join(line for line in out.getvalue().splitlines()[3:] if line.strip()))
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        env.close()
        server.stop(0)


if __name__ == "__main__":
    main()
