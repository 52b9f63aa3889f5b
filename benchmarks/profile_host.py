"""Where a small vector step's time goes on one host: ``DmRpcVectorEnv`` against ``AsyncVectorEnv`` (issue 40 item 3).

Three parts, for ``--envs`` envs (default 4) of ``--env`` (``CartPole-v1``, or ``constant``: 4 floats,
never ending, ``constant_world.Constant``):

1. CPU per vector step of each of ``bench_host.py``'s contenders, split between this process and the
   others of the setup (workers, servers), with steps/s;
2. the server's event-loop thread under ``cProfile`` (enabled on the loop itself), while this process
   steps a ``DmRpcVectorEnv`` against it: the top functions by own time, and ``socket.send`` calls
   per vector step;
3. this process (the client) under ``cProfile``, the same way.

    python benchmarks/profile_host.py [--env constant] [--steps 3000]

Profiles slow Python down several times and shift where time goes; the call counts hold.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(1, ROOT)

import bench_host  # noqa: E402  (benchmarks/ is a folder of scripts)


def profiled_serve(env: str, top: int) -> None:
    """A server whose event-loop thread is profiled between the stdin lines ``start`` and ``stop``."""
    from dmrpc_gym.server import Server
    server = Server(bench_host.factory(env), kind="gym").start()
    print("ADDRESS", server.address, flush=True)
    profile, done = cProfile.Profile(), threading.Event()
    sys.stdin.readline()
    server._loop.call_soon_threadsafe(profile.enable)      # cProfile follows the thread that enables it
    sys.stdin.readline()
    server._loop.call_soon_threadsafe(lambda: (profile.disable(), done.set()))
    done.wait(30)
    print(summary(profile, top), flush=True)
    print("END", flush=True)
    sys.stdin.read()
    server.stop(0)


def summary(profile: cProfile.Profile, top: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    sends = sum(v[1] for k, v in stats.stats.items() if k[2] in ("<method 'send' of '_socket.socket' objects>",
                                                                 "<method 'sendmsg' of '_socket.socket' objects>"))
    return out.getvalue() + f"\nSENDS {sends}"


def split(env: str, n: int, steps: int) -> None:
    print(f"CPU per vector step of {n} envs ({env}), {steps} vector steps each:")
    for c in (bench_host.Async("async", env, n), bench_host.Ours("ours, 1 server", env, n, 1),
              bench_host.Ours("ours, N servers", env, n, n), bench_host.Sync("sync", env, n)):
        c.open()
        try:
            c.run(300)
            mine, others, start = time.process_time(), sum(map(bench_host.cpu_seconds, c.pids)), time.perf_counter()
            c.run(steps)
            wall = time.perf_counter() - start
            mine, others = time.process_time() - mine, sum(map(bench_host.cpu_seconds, c.pids)) - others
        finally:
            c.close()
        print(f"  {c.name:16} {steps * n / wall:9,.0f} steps/s; this process {mine / steps * 1e6:6.0f} us, "
              f"the others {others / steps * 1e6:6.0f} us, total {(mine + others) / steps * 1e6:6.0f} us")


def profiles(env: str, n: int, steps: int, top: int) -> None:
    from dmrpc_gym import DmRpcVectorEnv
    path = os.pathsep.join(filter(None, [ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
    server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", "--env", env, "--top", str(top)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": path})
    try:
        address = server.stdout.readline().split()[1]
        envs = DmRpcVectorEnv(n, address)
        envs.reset(seed=0)
        actions = bench_host.actions(env, n, np.int64)
        for _ in range(300):
            envs.step(actions)
        server.stdin.write("start\n")
        server.stdin.flush()
        time.sleep(0.2)
        for _ in range(steps):
            envs.step(actions)
        server.stdin.write("stop\n")
        server.stdin.flush()
        lines = []
        for line in server.stdout:
            if line.strip() == "END":
                break
            lines.append(line.rstrip())
        sends = int(lines[-1].split()[1])
        print(f"\nThe server's event-loop thread, {steps} vector steps of {n}: {sends / steps:.2f} socket sends "
              f"a vector step")
        print("\n".join(lines[:-1]))
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(steps):
            envs.step(actions)
        profile.disable()
        text = summary(profile, top)
        sends = int(text.rsplit("SENDS", 1)[1])
        print(f"\nThe client (this process), {steps} vector steps of {n}: {sends / steps:.2f} socket sends a "
              f"vector step")
        print(text.rsplit("\nSENDS", 1)[0])
        envs.close()
    finally:
        server.stdin.close()
        server.wait(20)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", nargs="?", default="driver", choices=["driver", "serve"])
    parser.add_argument("--env", default="CartPole-v1", help="CartPole-v1 (default), Pendulum-v1 or constant")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--top", type=int, default=15, help="functions shown of each profile")
    args = parser.parse_args(argv)
    if args.role == "serve":
        return profiled_serve(args.env, args.top)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")
    split(args.env, args.envs, args.steps)
    profiles(args.env, args.envs, args.steps, args.top)


if __name__ == "__main__":
    main()
