"""What Prometheus metrics cost a step (issue 34, item 3): one server with metrics off, one with them on
(scraped every ``--scrape`` seconds meanwhile), and optionally a baseline checkout (``--tree``), side by side.

Two measures, since wall clock on a 2-vCPU VM swings by 15 %:

- **per round, interleaved**: every server runs in a subprocess; this process's ``DmRpcEnv`` steps each
  in turn, ``--steps`` small steps per server per round, ``--rounds`` rounds. Steps/s (wall clock) and the
  server's CPU time per step (its ``time.process_time``, scrapes included) are taken per round; the
  ratios are medians of the per-round ratios on / off, and those of the best rounds (the least disturbed);
- **calls per step** on the server (``bench_counts.py``'s profile hook: Python functions entered and C
  functions called, every server thread); with ``workers=0`` every step runs on the event loop and the
  counts repeat to the call (with worker threads, the timing-driven choice of inline or thread moves them).

The small step is ``bench_counts.py``'s: a constant env, a 4-float observation, a Discrete action::

    python benchmarks/bench_metrics.py                       # on vs off
    python benchmarks/bench_metrics.py --tree /tmp/before    # and a checkout without metrics (stats)
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
sys.path[:0] = [HERE, TREE]     # this tree's client steps every server, whatever is installed

import bench_counts  # noqa: E402


# -- the server role (runs in the tree it measures) ----------------------------------------------------
def server_role(metrics: bool) -> None:
    """Serve the small world (metrics on a free port with ``metrics``); say ``ADDRESS addr [metrics addr]``,
    then answer each stdin line with the process's CPU seconds so far."""
    from constant_world import Constant

    from dmrpc_gym.server import Server

    server = Server(Constant, kind="gym", **({"metrics_port": 0} if metrics else {})).start()
    print("ADDRESS", server.address, *([server.metrics_address] if metrics else []), flush=True)
    for _ in sys.stdin:
        print(time.process_time(), flush=True)
    server.stop(0)


# -- the driver ------------------------------------------------------------------------------------------
class Served:
    """One server subprocess and this process's env stepping it."""

    def __init__(self, name: str, tree: str, metrics: bool):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, HERE]), PYTHONHASHSEED="0")
        self.name = name
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve",
                                      *(["--metrics"] if metrics else [])],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        words = bench_counts._line(self.proc, "ADDRESS").split()
        self.address, self.metrics = words[0], (words[1] if len(words) > 1 else None)
        import numpy as np

        from dmrpc_gym import DmRpcEnv
        self.env, self.action = DmRpcEnv(self.address), np.int64(1)
        self.env.reset()
        self.rates: list[float] = []      # steps/s per round
        self.cpu: list[float] = []        # server CPU microseconds per step, per round

    def cpu_seconds(self) -> float:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def round(self, steps: int) -> None:
        step, action = self.env.step, self.action
        cpu = self.cpu_seconds()
        start = time.perf_counter()
        for _ in range(steps):
            step(action)
        took = time.perf_counter() - start
        self.cpu.append(1e6 * (self.cpu_seconds() - cpu) / steps)
        self.rates.append(steps / took)

    def close(self) -> None:
        self.env.close()
        self.proc.stdin.close()
        self.proc.wait(30)


def scraper(url: str, every: float, stop: threading.Event, scrapes: list[float]) -> None:
    """GET ``url`` every ``every`` seconds until ``stop``; each scrape's wall time goes to ``scrapes``."""
    while not stop.wait(every):
        start = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as answer:
            answer.read()
        scrapes.append(time.perf_counter() - start)


def ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("role", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--metrics", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help="a checkout to measure too (metrics off: it may predate them)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=3000, help="steps per server per round (default: %(default)s)")
    parser.add_argument("--scrape", type=float, default=1.0,
                        help="seconds between scrapes of the metrics-on server (default: %(default)s; 0: none)")
    parser.add_argument("--count-steps", type=int, default=2000, help="steps counted for calls per step")
    args = parser.parse_args()
    if args.role[:1] == ["serve"]:
        return server_role(args.metrics)
    cases = [("metrics off", TREE, False), ("metrics on", TREE, True)]
    if args.tree:
        cases.append((f"{args.tree} (no metrics)", os.path.abspath(args.tree), False))
    served = [Served(*case) for case in cases]
    stop, scrapes = threading.Event(), []
    on = served[1]
    if args.scrape > 0:
        threading.Thread(target=scraper, args=(f"http://{on.metrics}/metrics", args.scrape, stop, scrapes),
                         daemon=True).start()
    try:
        for s in served:               # a warm-up round, not kept
            s.round(args.steps // 3)
            s.rates.clear()
            s.cpu.clear()
        for r in range(args.rounds):
            order = served if r % 2 == 0 else served[::-1]
            for s in order:
                s.round(args.steps)
            print(f"  round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        stop.set()
        for s in served:
            s.close()
    off = served[0]
    took = f", {1000 * statistics.median(scrapes):.1f} ms each (median, wall clock)" if scrapes else ""
    print(f"{args.rounds} rounds of {args.steps} steps each, interleaved (order alternating); the metrics-on "
          f"server scraped {len(scrapes)} times (every {args.scrape:g} s){took}\n")
    print("| server | steps/s (median) | min | max | server CPU us/step (median) | min | max |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s in served:
        print(f"| {s.name} | {statistics.median(s.rates):.0f} | {min(s.rates):.0f} | {max(s.rates):.0f} | "
              f"{statistics.median(s.cpu):.1f} | {min(s.cpu):.1f} | {max(s.cpu):.1f} |")
    print("\n| ratio | steps/s, median of per-round ratios | best round / best round | server CPU per step, "
          "median of per-round ratios | best round / best round |")
    print("|---|---:|---:|---:|---:|")
    for s in served[1:]:
        print(f"| {s.name} / metrics off | {ratio(s.rates, off.rates):.3f} | {max(s.rates) / max(off.rates):.3f} | "
              f"{ratio(s.cpu, off.cpu):.3f} | {min(s.cpu) / min(off.cpu):.3f} |")
    print("\n| server | Python calls / step | C calls / step | the same, workers=0 (every step inline) | C |")
    print("|---|---:|---:|---:|---:|")
    for name, tree, metrics in cases:
        counted = bench_counts.calls(tree, args.count_steps, metrics=metrics)
        inline = bench_counts.calls(tree, args.count_steps, metrics=metrics, inline=True)
        print(f"| {name} | {counted[2]:.1f} | {counted[3]:.1f} | {inline[2]:.1f} | {inline[3]:.1f} |", flush=True)

if __name__ == "__main__":
    main()
