"""Where shared memory starts to pay: one env's step with a uint8 observation of each size, through a region and
in the messages, side by side in one run (issue 40: "a threshold you measure").

For each size, two ``DmRpcEnv`` against one server process (``bench_host.py``'s constant image) are stepped in
turn, round after round: one with every tensor in the messages (``shared_memory=False``), one with the size's
observation through a region (the client's threshold lowered to 1 byte, so that every size goes there). The
table gives the median of the per-round ratios (regions / messages, steps per second) with their spread, and
the median steps per second of each. The threshold (``dmrpc_gym.transport.shared_memory.THRESHOLD``) is the
smallest size from which the regions are not slower in every round.

    python benchmarks/shm_threshold.py               # sizes 1 KiB .. 1 MiB, 7 rounds of 0.5 s
    python benchmarks/shm_threshold.py --quick       # a smoke run (numbers meaningless)
    python benchmarks/shm_threshold.py --save        # host.md's "threshold" section
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(1, ROOT)

from sections import commit, write_section  # noqa: E402  (benchmarks/ is a folder of scripts)

SIZES = (1 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20)


def server(nbytes: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "bench_host.py"), "serve", "--observation",
                             str(nbytes)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                filter(None, [ROOT, HERE, os.environ.get("PYTHONPATH", "")]))})
    line = proc.stdout.readline().split()
    return proc, line[1]


def steps_per_second(env, k: int) -> float:
    start = time.perf_counter()
    for _ in range(k):
        env.step(0)
    return k / (time.perf_counter() - start)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args(argv)
    from dmrpc_gym import DmRpcEnv
    from dmrpc_gym.transport import shared_memory
    rounds, seconds = (2, 0.05) if args.quick else (args.rounds, args.seconds)
    rows = []
    load = [os.getloadavg()[0]]
    for nbytes in SIZES:
        proc, address = server(nbytes)
        try:
            was, shared_memory.THRESHOLD = shared_memory.THRESHOLD, 1
            try:
                region = DmRpcEnv(address)
            finally:
                shared_memory.THRESHOLD = was
            plain = DmRpcEnv(address, shared_memory=False)
            assert region.connection.shared_memory == "on", region.connection.shared_memory
            for env in (region, plain):
                env.reset()
                steps_per_second(env, 200)
            k = max(1, int(steps_per_second(plain, 200) * seconds))
            samples = []
            for r in range(rounds):
                pair = [(region, "r"), (plain, "p")][::1 if r % 2 else -1]
                got = {name: steps_per_second(env, k) for env, name in pair}
                samples.append((got["r"], got["p"]))
            region.close()
            plain.close()
        finally:
            proc.stdin.close()
            proc.wait(20)
        ratios = [r / p for r, p in samples]
        rows.append((nbytes, statistics.median(ratios), min(ratios), max(ratios),
                     statistics.median(r for r, _ in samples), statistics.median(p for _, p in samples)))
        print(f"  {nbytes} bytes: done", file=sys.stderr, flush=True)
        load.append(os.getloadavg()[0])
    lines = [f"`python benchmarks/shm_threshold.py {' '.join(sys.argv[1:])}`: commit {commit()}; {os.cpu_count()} cpus; "
             f"{rounds} rounds of ~{seconds} s per contender, taking turns; 1-minute load average before and after "
             f"each size: {', '.join(f'{x:.2f}' for x in load)} (a shared, noisy VM).", "",
             "| observation | regions / messages, steps/s: median (min-max) | regions, steps/s | messages, steps/s |",
             "|---:|---:|---:|---:|"]
    for nbytes, mid, low, high, r, p in rows:
        lines.append(f"| {nbytes:,} B | {mid:.2f}x ({low:.2f}-{high:.2f}) | {r:,.0f} | {p:,.0f} |")
    text = "\n".join(lines) + "\n"
    if args.quick:
        text = "**A smoke run (`--quick`): its numbers show that the script works, nothing more.**\n\n" + text
    print(text)
    if args.save:
        write_section(os.path.join(HERE, "host.md"), "threshold", text, "Same host")


if __name__ == "__main__":
    main()
