"""What a dashboard watching a world costs the training (issue 43): two CartPole servers side by side, one
watched by ``dmrpc-gym dashboard`` showing a frame a second, one that nobody watches.

- **CPU time per step, interleaved rounds**: each server runs in a subprocess; this process's client
  (``render_mode="rgb_array"`` on both, so that both envs can render and only the watch differs) steps
  each in turn, ``--steps`` steps per server per round, ``--rounds`` rounds, the order alternating. Per
  round: the server's CPU time per step (its ``time.process_time``: all its threads, renders included)
  and the client's (this process's, over the round: nothing else runs in it). The dashboard is a third
  process (a :class:`~dmrpc_gym.app.dashboard.DashboardServer` watching world-1 at 1 frame/s) with a
  thread that reads ``/api/state`` and ``/api/frame.png`` every second, as the page does. Ratios are
  medians of the per-round ratios watched / not watched, and best round / best round.
- **calls per step with nobody watching** (``bench_counts.py``'s profile hook, its small step): this tree,
  and ``--tree`` checkouts (one before the dashboard) beside it.

::

    python benchmarks/bench_dashboard.py                         # watched vs nobody watching
    python benchmarks/bench_dashboard.py --tree /tmp/before      # and the calls of a checkout before it
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
sys.path[:0] = [HERE, TREE]

import bench_counts  # noqa: E402

ENV_ID = "CartPole-v1"


def server_role() -> None:
    """Serve CartPole; say ``ADDRESS addr``, then answer each stdin line with the process's CPU seconds."""
    from dmrpc_gym.server import Server
    server = Server(ENV_ID).start()
    print("ADDRESS", server.address, flush=True)
    for _ in sys.stdin:
        print(time.process_time(), flush=True)
    server.stop(0)


def dashboard_role(address: str, fps: float) -> None:
    """A dashboard of ``address`` watching world-1 at ``fps``, read as the page reads it; stops at stdin's end."""
    from dmrpc_gym.app.dashboard import DashboardServer
    with DashboardServer(address) as dash:
        dash.feed.choose("world-1", fps)
        stop = threading.Event()

        def page() -> None:
            frames = 0
            while not stop.wait(1.0):
                state = json.loads(urllib.request.urlopen(dash.url + "api/state", timeout=10).read())
                if state.get("frame"):
                    frames += len(urllib.request.urlopen(dash.url + "api/frame.png", timeout=10).read()) > 0
            print("FRAMES", frames, flush=True)
        thread = threading.Thread(target=page, daemon=True)
        thread.start()
        print("WATCHING", dash.url, flush=True)
        sys.stdin.read()
        stop.set()
        thread.join(10)


class Served:
    """One server subprocess and this process's env stepping it."""

    def __init__(self, name: str, env: dict):
        self.name = name
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.address = bench_counts._line(self.proc, "ADDRESS")
        import gymnasium as gym
        import dmrpc_gym  # noqa: F401 - registers dmrpc/Remote-v0
        self.env = gym.make("dmrpc/Remote-v0", address=self.address, render_mode="rgb_array")
        self.env.reset(seed=0)
        self.server_cpu: list[float] = []     # server CPU microseconds per step, per round
        self.client_cpu: list[float] = []     # client CPU microseconds per step, per round

    def cpu_seconds(self) -> float:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def round(self, steps: int) -> None:
        env = self.env
        server, client = self.cpu_seconds(), time.process_time()
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(_action())
            if terminated or truncated:
                env.reset()
        self.client_cpu.append(1e6 * (time.process_time() - client) / steps)
        self.server_cpu.append(1e6 * (self.cpu_seconds() - server) / steps)

    def close(self) -> None:
        self.env.close()
        self.proc.stdin.close()
        self.proc.wait(30)


_flip = [0]


def _action() -> int:
    """Left, right, left...: CartPole's episodes end after some tens of steps, resets included in a round."""
    _flip[0] ^= 1
    return _flip[0]


def ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("role", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--tree", action="append", default=[], help="a checkout whose calls per step to count too "
                                                                   "(repeatable)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=20000, help="steps per server per round (default: %(default)s)")
    parser.add_argument("--fps", type=float, default=1.0, help="frames a second the dashboard shows (default: %(default)s)")
    parser.add_argument("--count-steps", type=int, default=2000, help="steps counted for calls per step")
    args = parser.parse_args()
    if args.role[:1] == ["serve"]:
        return server_role()
    if args.role[:1] == ["dashboard"]:
        return dashboard_role(args.role[1], args.fps)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TREE, HERE]), PYTHONHASHSEED="0")
    served = [Served("nobody watching", env), Served(f"watched, {args.fps:g} frame/s", env)]
    dashboard = subprocess.Popen([sys.executable, os.path.abspath(__file__), "dashboard", served[1].address,
                                  "--fps", str(args.fps)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
    bench_counts._line(dashboard, "WATCHING")
    try:
        for s in served:               # a warm-up round, not kept
            s.round(args.steps // 3)
            s.server_cpu.clear()
            s.client_cpu.clear()
        start = time.monotonic()
        for r in range(args.rounds):
            for s in (served if r % 2 == 0 else served[::-1]):
                s.round(args.steps)
            print(f"  round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        seconds = time.monotonic() - start
    finally:
        dashboard.stdin.close()
        frames = bench_counts._line(dashboard, "FRAMES")
        dashboard.wait(30)
        for s in served:
            s.close()
    off, on = served
    print(f"{args.rounds} rounds of {args.steps} CartPole steps per server, interleaved (order alternating), "
          f"{seconds:.0f} s; the page read {frames} frames of the watched world meanwhile\n")
    print("| server | server CPU us/step (median) | min | max | client CPU us/step (median) | min | max |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s in served:
        print(f"| {s.name} | {statistics.median(s.server_cpu):.1f} | {min(s.server_cpu):.1f} | "
              f"{max(s.server_cpu):.1f} | {statistics.median(s.client_cpu):.1f} | {min(s.client_cpu):.1f} | "
              f"{max(s.client_cpu):.1f} |")
    print("\n| ratio | server CPU, median of per-round ratios | best / best | client CPU, median of per-round "
          "ratios | best / best |")
    print("|---|---:|---:|---:|---:|")
    print(f"| watched / nobody watching | {ratio(on.server_cpu, off.server_cpu):.3f} | "
          f"{min(on.server_cpu) / min(off.server_cpu):.3f} | {ratio(on.client_cpu, off.client_cpu):.3f} | "
          f"{min(on.client_cpu) / min(off.client_cpu):.3f} |")
    print("\n| tree, nobody watching | client: Python calls / step | C calls | server: Python calls / step | C calls |")
    print("|---|---:|---:|---:|---:|")
    for name, tree in [("this tree", TREE), *[(t, os.path.abspath(t)) for t in args.tree]]:
        counted = bench_counts.calls(tree, args.count_steps)
        print(f"| {name} | {counted[0]:.1f} | {counted[1]:.1f} | {counted[2]:.1f} | {counted[3]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
