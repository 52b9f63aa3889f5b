"""Worlds stepping concurrently on one server: slow envs, CPU-bound envs in processes, and the cost for trivial steps.

Every server runs in a subprocess of its own (``python bench_concurrency.py serve ...``);
the cases are measured in turn, round after round, and the tables give medians
(ratios are medians of per-round ratios), since only numbers taken side by side compare.

- (a) ``sleepy``: a gymnasium env whose step sleeps 10 ms (outside the GIL).
  One ``DmRpcVectorEnv`` of N worlds against one server: time per vector step
  for N = 8 relative to N = 1, with the default worker threads and with
  ``workers=0`` (every env on the event loop, as servers were before).
- (b) ``cpu``: a pure-Python env whose step computes for a few ms (holding the
  GIL). Vector steps per second with ``processes=2`` relative to the same
  server with its envs in its own process (threads) and with ``processes=1``.
- (c) ``catch``: trivial steps of the bundled Catch world: ``DmRpcEnv.step`` and
  a vector of 8, default workers vs ``workers=0``, and vs the server of another
  source tree (``--base DIR``, e.g. an export of the previous commit).

    python benchmarks/bench_concurrency.py                      # about a minute
    python benchmarks/bench_concurrency.py --quick              # a smoke run
    python benchmarks/bench_concurrency.py --base /tmp/old-tree # (c) against an older server
    python benchmarks/bench_concurrency.py --parts b            # only (b)
"""
from __future__ import annotations

import argparse
import os
import selectors
import statistics
import subprocess
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)


class SleepyEnv(gym.Env):
    """Each step sleeps ``delay`` seconds (releasing the GIL, like a simulator in C or another process)."""

    metadata = {"render_modes": []}

    def __init__(self, delay: float = 0.010):
        self.delay = float(delay)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._obs = np.zeros(4, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs, {}

    def step(self, action):
        time.sleep(self.delay)
        return self._obs, 1.0, False, False, {}


class CpuEnv(SleepyEnv):
    """Each step runs ``work`` iterations of pure Python (holding the GIL the whole time)."""

    def __init__(self, work: int = 200_000):
        super().__init__(0.0)
        self.work = int(work)

    def step(self, action):
        total = 0
        for i in range(self.work):
            total += i * i % 7
        self._obs[0] = total % 3 - 1
        return self._obs, 1.0, False, False, {}


TARGETS = {"sleepy": "bench_concurrency:SleepyEnv", "cpu": "bench_concurrency:CpuEnv",
           "catch": "dmrpc_gym.worlds.catch:Catch"}


# -- servers in subprocesses -------------------------------------------------------------------

def serve(argv: list[str]) -> None:
    """``serve TARGET [--workers N] [--processes N]``: print ``ADDRESS host:port``, serve until stdin closes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--processes", type=int, default=0)
    args = parser.parse_args(argv)
    from dmrpc_gym.server import Server
    options: dict[str, Any] = {}
    if args.workers is not None:
        options["workers"] = args.workers
    if args.processes:
        options["processes"] = args.processes
    server = Server(TARGETS[args.target], **options).start()
    print(f"ADDRESS {server.address}", flush=True)
    sys.stdin.read()
    server.stop()


def spawn(target: str, *options: str, tree: str = TREE) -> tuple[subprocess.Popen, str]:
    """A server of ``tree``'s dmrpc_gym in a subprocess: ``(process, address)``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, HERE]))
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", target, *options],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=HERE)
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    if not selector.select(60):
        proc.kill()
        raise TimeoutError(f"the {target} server {options} did not start")
    line = proc.stdout.readline().split()
    if line[:1] != ["ADDRESS"]:
        proc.kill()
        raise RuntimeError(f"the {target} server said {line!r}")
    return proc, line[1]


# -- cases ------------------------------------------------------------------------------------

class Case:
    """``n`` sub-envs (a ``DmRpcVectorEnv``; ``n=0``: one ``DmRpcEnv``) stepping on one server."""

    def __init__(self, label: str, address: str, n: int):
        self.label, self.address, self.n = label, address, n

    def open(self) -> None:
        from dmrpc_gym import DmRpcEnv
        from dmrpc_gym.client.vector import DmRpcVectorEnv
        if self.n:
            self.env = DmRpcVectorEnv(num_envs=self.n, address=self.address)
        else:
            self.env = DmRpcEnv(self.address)
        self.env.reset(seed=0)
        self.action = self.env.action_space.sample()
        self.env.step(self.action)

    def seconds_per_step(self, budget: float) -> float:
        step, action = self.env.step, self.action
        steps, start = 0, time.perf_counter()
        while True:
            step(action)
            steps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= budget and steps >= 3:
                return elapsed / steps

    def close(self) -> None:
        self.env.close()


def measure(cases: dict[str, Case], rounds: int, budget: float) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {key: [] for key in cases}
    keys = list(cases)
    for r in range(rounds):
        shift = r % len(keys)    # each round starts with another case: no case always goes first
        for key in keys[shift:] + keys[:shift]:
            samples[key].append(cases[key].seconds_per_step(budget))
        print(f"  round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    return samples


def ratio(samples: dict[str, list[float]], a: str, b: str) -> float:
    """median over rounds of time(a) / time(b)."""
    return statistics.median(x / y for x, y in zip(samples[a], samples[b]))


def run(quick: bool, base: str | None, parts: str = "abc", rounds: int | None = None,
        budget: float | None = None) -> str:
    rounds = rounds or (2 if quick else 5)
    budget = budget or (0.3 if quick else 1.0)
    servers = {}
    if "a" in parts:
        servers.update({"sleepy threads": ("sleepy",), "sleepy loop": ("sleepy", "--workers", "0")})
    if "b" in parts:
        servers.update({"cpu threads": ("cpu",), "cpu 1 process": ("cpu", "--processes", "1"),
                        "cpu 2 processes": ("cpu", "--processes", "2")})
    if "c" in parts:
        servers.update({"catch threads": ("catch",), "catch loop": ("catch", "--workers", "0")})
    procs, addr = [], {}
    try:
        for name, args in servers.items():
            proc, addr[name] = spawn(*args)
            procs.append(proc)
        if base and "c" in parts:
            proc, addr["catch base"] = spawn("catch", tree=os.path.abspath(base))
            procs.append(proc)
        cases = {}
        for server in ("sleepy threads", "sleepy loop"):
            for n in (1, 8):
                if server in addr:
                    cases[f"{server} x{n}"] = Case(f"{server} x{n}", addr[server], n)
        for server in ("cpu threads", "cpu 1 process", "cpu 2 processes"):
            for n in (2, 4):
                if server in addr:
                    cases[f"{server} x{n}"] = Case(server, addr[server], n)
        for server in ("catch threads", "catch loop", "catch base"):
            if server in addr:
                cases[f"{server} single"] = Case(server, addr[server], 0)
                cases[f"{server} x8"] = Case(server, addr[server], 8)
        for case in cases.values():
            case.open()
        try:
            print(f"measuring {len(cases)} cases, {rounds} rounds of ~{budget} s each", file=sys.stderr)
            samples = measure(cases, rounds, budget)
        finally:
            for case in cases.values():
                case.close()
    finally:
        for proc in procs:
            proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
    return report(samples, rounds, budget)


def report(samples: dict[str, list[float]], rounds: int, budget: float) -> str:
    lines = [f"machine: {os.cpu_count()} cpus, Python {sys.version.split()[0]}; {rounds} rounds of ~{budget} s per case",
             "", f"{'case':<28} {'ms / step':>10} {'steps/s':>10}"]
    for key, values in samples.items():
        per = statistics.median(values)
        lines.append(f"{key:<28} {per * 1e3:>10.3f} {1 / per:>10.1f}")
    lines += ["", f"{'ratio':<62} {'value':>7}  target"]

    def row(what: str, value: float, target: str = "") -> None:
        lines.append(f"{what:<62} {value:>7.2f}  {target}")

    if "sleepy threads x8" in samples:
        row("(a) 10 ms step, 8 worlds / 1 world, time per step (threads)",
            ratio(samples, "sleepy threads x8", "sleepy threads x1"), "<= 1.5")
        row("(a) 10 ms step, 8 worlds / 1 world, time per step (workers=0)",
            ratio(samples, "sleepy loop x8", "sleepy loop x1"), "(before: 7.9)")
    for n in (2, 4):
        if f"cpu threads x{n}" in samples:
            row(f"(b) CPU-bound x{n}, steps/s: 2 processes / envs in the server",
                ratio(samples, f"cpu threads x{n}", f"cpu 2 processes x{n}"), ">= 1.6")
            row(f"(b) CPU-bound x{n}, steps/s: 2 processes / 1 process",
                ratio(samples, f"cpu 1 process x{n}", f"cpu 2 processes x{n}"), ">= 1.6")
    for shape in ("single", "x8") if "catch threads x8" in samples else ():
        row(f"(c) Catch {shape}, time per step: threads / workers=0",
            ratio(samples, f"catch threads {shape}", f"catch loop {shape}"))
        if f"catch base {shape}" in samples:
            row(f"(c) Catch {shape}, time per step: threads / base tree",
                ratio(samples, f"catch threads {shape}", f"catch base {shape}"), "~1 (no slower)")
            row(f"(c) Catch {shape}, time per step: workers=0 / base tree",
                ratio(samples, f"catch loop {shape}", f"catch base {shape}"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        return serve(argv[1:])      # dmrpc_gym from the PYTHONPATH spawn() set
    sys.path.insert(0, TREE)        # the clients: this tree's dmrpc_gym, not an installed one
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--base", metavar="DIR", help="a source tree whose server (c) compares against")
    parser.add_argument("--parts", default="abc", help="which of (a), (b), (c) to run (default: abc)")
    parser.add_argument("--rounds", type=int, help="rounds of every case (default 5, quick 2)")
    parser.add_argument("--seconds", type=float, help="seconds per case per round (default 1, quick 0.3)")
    args = parser.parse_args(argv)
    print(run(args.quick, args.base, args.parts, args.rounds, args.seconds))


if __name__ == "__main__":
    main()
