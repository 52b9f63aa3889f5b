"""Stable-Baselines3 vector envs over dm_env_rpc: env steps/s of ``VecEnv.step``, checkouts side by side.

Eight Catch envs stepped with random actions through SB3's ``VecEnv`` API, as PPO's rollout steps them
(``step_async`` then ``step_wait``; finished sub-envs restart within the step), in three cases:

- ``DmRpcSB3VecEnv``: ``DmRpcSB3VecEnv(8, address, flat_spaces=True)``, the fan-out vector env (the
  sub-envs on one shared HTTP/2 connection, a stream each, every request in flight at once);
- ``make_vec_env``: SB3's ``DummyVecEnv`` over 8 ``FlatSpaces(DmRpcEnv(address))``, what
  ``make_vec_env`` builds (the sub-envs stepped one after another, a round trip each);
- ``local``: ``DummyVecEnv`` over 8 ``FlatSpaces(Catch())`` in the client's process, the reference.

Every checkout (``--tree``, repeatable; this one first) serves Catch from its own ``dmrpc-gym serve``
process and steps from a client process of its own; rounds take the checkouts in turn, case by case
(A, B, A, B...), so that the machine's drift falls on all of them alike. A row gives the median env
steps/s over the rounds, the median of the per-round ratios to ``local`` and to the first checkout.

    python benchmarks/bench_sb3.py --tree /tmp/old --rounds 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from servers import serve_command

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
CASES = ("DmRpcSB3VecEnv", "make_vec_env", "local")
N = 8


def measure(case: str, address: str, steps: int) -> float:
    """Env steps/s of ``steps`` vector steps of ``case`` (after a warm-up of 100)."""
    import numpy as np
    from stable_baselines3.common.vec_env import DummyVecEnv

    from dmrpc_gym.integrations.flat_spaces import FlatSpaces
    if case == "DmRpcSB3VecEnv":
        from dmrpc_gym.integrations.sb3 import DmRpcSB3VecEnv
        venv = DmRpcSB3VecEnv(N, address, flat_spaces=True)
    elif case == "make_vec_env":
        from dmrpc_gym import DmRpcEnv
        venv = DummyVecEnv([lambda: FlatSpaces(DmRpcEnv(address))] * N)
    else:
        from dmrpc_gym.worlds.catch import Catch
        venv = DummyVecEnv([lambda: FlatSpaces(Catch())] * N)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, venv.action_space.n, (steps + 100, N))
    venv.seed(0)
    venv.reset()
    for a in actions[:100]:
        venv.step(a)
    start = time.perf_counter()
    for a in actions[100:]:
        venv.step(a)
    rate = steps * N / (time.perf_counter() - start)
    venv.close()
    return rate


def _client(tree: str, case: str, address: str, steps: int) -> float:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure", case, address, str(steps)],
                         env=dict(os.environ, PYTHONPATH=tree), capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(f"{case} in {tree} failed: {out.stderr[-800:]}")
    return float(out.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="another checkout to measure (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500, help="vector steps per measure (of 8 env steps)")
    parser.add_argument("--measure", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        case, address, steps = args.measure
        print(f"{measure(case, address, int(steps)):.1f}")
        return
    trees = [TREE, *args.tree]
    servers = [serve_command("dmrpc_gym.worlds:Catch", tree=tree) for tree in trees]
    rates = {(tree, case): [] for tree in trees for case in CASES}
    try:
        for round_ in range(args.rounds):
            for case in CASES:
                for tree, (_, address) in zip(trees, servers):
                    rates[tree, case].append(_client(tree, case, address, args.steps))
            print(f"round {round_ + 1}: " + ", ".join(f"{os.path.basename(t) or t} {c} {v[-1]:.0f}"
                                                       for (t, c), v in rates.items()), file=sys.stderr, flush=True)
    finally:
        for process, _ in servers:
            process.terminate()
            process.wait(10)
    print(f"| tree | case | env steps/s (median of {args.rounds}) | vs local | vs this tree |")
    print("|---|---|---:|---:|---:|")
    for tree in trees:
        for case in CASES:
            values = rates[tree, case]
            local = statistics.median(v / w for v, w in zip(values, rates[tree, "local"]))
            first = statistics.median(v / w for v, w in zip(values, rates[TREE, case]))
            print(f"| {'this tree' if tree == TREE else tree} | {case} | {statistics.median(values):,.0f} | "
                  f"{local:.2f}x | {first:.2f}x |")


if __name__ == "__main__":
    main()
