"""Async batches against the synchronous vector env, side by side on one server (issue 22).

16 remote worlds whose steps sleep (on the server's worker threads, as a simulator's frame
would take): ``spiky``, 1 ms and 20 ms one step in ten (seeded: a reset or a heavy frame);
``uniform``, 1 to 10 ms. The synchronous ``DmRpcVectorEnv`` of 16 waits for the slowest
world every step; ``send`` / ``recv`` with ``batch_size=8`` goes on with the first 8 answers.
Env steps per second, rounds taking turns, medians compared (the machines are noisy)::

    python benchmarks/bench_async.py             # prints the table (benchmarks/async.md)
    python benchmarks/bench_async.py --quick
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np

ENVS, BATCH = 16, 8


class Sleepy(gym.Env):
    """A world whose step sleeps as ``profile`` says (its times drawn from the reset seed: every
    sub-env differs, and every run is the same)."""

    observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, profile: str = "spiky"):
        self.profile, self.rng = profile, np.random.default_rng(0)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        if self.profile == "spiky":
            time.sleep(0.020 if self.rng.random() < 0.1 else 0.001)
        else:
            time.sleep(self.rng.uniform(0.001, 0.010))
        return np.zeros(4, np.float32), 1.0, False, False, {}


def serve() -> None:
    """The server role: print the address, serve until stdin closes."""
    from dmrpc_gym.server import Server
    with Server(Sleepy, kind="gym", workers=ENVS * 2) as server:
        print(server.address, flush=True)
        sys.stdin.read()


def rate(envs, asynchronous: bool, seconds: float) -> float:
    """Env steps per second of ``envs`` for about ``seconds``."""
    actions = np.zeros(ENVS, np.int64)
    steps, start = 0, time.perf_counter()
    if asynchronous:
        envs.send(actions)
        while time.perf_counter() - start < seconds:
            *_, ids = envs.recv()
            steps += len(ids)
            envs.send(actions[:len(ids)], ids)
        while envs.in_flight:       # drain, so the next round starts from rest
            envs.recv()
    else:
        while time.perf_counter() - start < seconds:
            envs.step(actions)
            steps += ENVS
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", nargs="?", default="driver", choices=["driver", "serve"])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    if args.role == "serve":
        return serve()
    from dmrpc_gym import DmRpcVectorEnv
    rounds, seconds = (2, 0.5) if args.quick else (args.rounds, args.seconds)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        address = proc.stdout.readline().strip()
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {ENVS} worlds, batch_size={BATCH}, "
              f"{rounds} rounds x {seconds} s per case")
        print("\n| worlds' step time | sync vector (env steps/s) | send/recv, batch 8 | ratio |\n|---|---:|---:|---:|")
        for profile in ("spiky", "uniform"):
            envs = DmRpcVectorEnv(ENVS, address, batch_size=BATCH, world_settings={"profile": profile})
            envs.reset(seed=0)                # sub-env i draws its step times from seed i
            sync, async_ = [], []
            for _ in range(rounds):
                sync.append(rate(envs, False, seconds))
                async_.append(rate(envs, True, seconds))
            envs.close()
            s, a = statistics.median(sync), statistics.median(async_)
            label = "1 ms, 20 ms one step in ten" if profile == "spiky" else "uniform 1-10 ms"
            print(f"| {label} | {s:,.0f} | {a:,.0f} | {a / s:.2f}x |")
    finally:
        proc.stdin.close()
        proc.wait(10)


if __name__ == "__main__":
    main()
