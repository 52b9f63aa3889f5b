"""Resident memory over 1e5 steps: flat, for the client and the server.

Steps a ``DmRpcEnv`` and then a ``DmRpcVectorEnv`` (8 sub-envs) 1e5 env steps
each against the trivial server of ``servers.py`` (ours, in a subprocess), and
prints the resident set size (VmRSS) of this process and of the server every
1e4 steps. A leak of even one small object per step would show as a steady
climb of about 1 MB per 1e4 steps.

    python benchmarks/memory.py            # 1e5 steps each
    python benchmarks/memory.py --steps 20000 --every 2000

``--save`` writes the table into ``README.md`` (section "Resident memory").
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import servers  # noqa: E402


def rss_mb(pid: int | str = "self") -> float:
    """Resident set size of a process in MB (``/proc/<pid>/status`` VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def track(name: str, step, per_call: int, steps: int, every: int, server_pid: int) -> list[tuple]:
    """Call ``step`` until ``steps`` env steps are done; a row of RSS every ``every`` env steps."""
    rows = [(name, 0, rss_mb(), rss_mb(server_pid), 0.0)]
    print(f"{name:<10}{0:>9}{rows[0][2]:>12.1f}{rows[0][3]:>12.1f}", flush=True)
    done, start = 0, time.perf_counter()
    while done < steps:
        for _ in range(every // per_call):
            step()
        done += (every // per_call) * per_call
        row = (name, done, rss_mb(), rss_mb(server_pid), done / (time.perf_counter() - start))
        rows.append(row)
        print(f"{name:<10}{done:>9}{row[2]:>12.1f}{row[3]:>12.1f}{row[4]:>12.0f}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> list[tuple]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000)
    parser.add_argument("--save", action="store_true", help="write the table into README.md")
    args = parser.parse_args(argv)

    from dmrpc_gym.client.env import DmRpcEnv
    from dmrpc_gym.client.vector import DmRpcVectorEnv

    proc, address = servers.spawn("ours")
    rows = []
    try:
        print(f"{'client':<10}{'steps':>9}{'client MB':>12}{'server MB':>12}{'steps/s':>12}")
        env = DmRpcEnv(address)
        env.reset(seed=0)
        rows += track("single", lambda: env.step(1), 1, args.steps, args.every, proc.pid)
        env.close()
        envs = DmRpcVectorEnv(8, address)
        envs.reset(seed=0)
        actions = np.ones(8, np.int64)
        rows += track("vector 8", lambda: envs.step(actions), 8, args.steps, args.every, proc.pid)
        envs.close()
    finally:
        proc.stdin.close()
        proc.wait(10)
    for name in ("single", "vector 8"):
        mine = [r for r in rows if r[0] == name]
        # Growth after the first 1e4 steps (allocator warm-up) to the end.
        print(f"{name}: client {mine[1][2]:.1f} -> {mine[-1][2]:.1f} MB, "
              f"server {mine[1][3]:.1f} -> {mine[-1][3]:.1f} MB after the first {args.every} steps")
    if args.save:
        save_section(rows, os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md"))
    return rows


def save_section(rows: list[tuple], path: str) -> None:
    """Replace (or add) README.md's "Resident memory" section with ``rows``."""
    import platform

    import grpc
    from bench_steps import MEMORY_SECTION, machine
    m = machine()
    steps = max(r[1] for r in rows)
    lines = [f"{MEMORY_SECTION} over {steps} steps (`memory.py`)", "",
             f"{m['date']}, {m['nproc']} cpus ({m['cpu']}), Python {platform.python_version()}, "
             f"grpcio {grpc.__version__}: `DmRpcEnv` then `DmRpcVectorEnv(8)`, {steps} env steps each, "
             "against `servers.py ours` (VmRSS in MB):", "",
             "| client | env steps | client MB | server MB |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {steps} | {mine:.1f} | {server:.1f} |" for name, steps, mine, server, _ in rows]
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        text = "# Benchmarks\n"
    at = text.find(MEMORY_SECTION)
    head = text if at < 0 else text[:at]
    with open(path, "w") as f:
        f.write(head.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
