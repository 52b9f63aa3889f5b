"""GodotEnv against a bare websockets loop, and 8 games stepped at once against 8 in turn.

    python benchmarks/bench_godot.py [--rounds N] [--seconds S]

Both comparisons drive the bundled Catch scene under the headless engine
(``godot3-server``), random Discrete actions, resetting when an episode ends:

    bare loop       json.dumps, send, recv, json.loads on the game's websockets connection
    GodotEnv        dmrpc_gym.integrations.godot.GodotEnv (checks, casting, timeouts), same game
    in turn x8      8 GodotEnvs, each stepped and awaited before the next
    vector x8       the same 8 games as one GodotVectorEnv: all sent, then all awaited

Each round runs the bare loop and GodotEnv for ``--seconds`` each, alternating whole
episodes on the same game, then the two 8-game cases for ``--seconds`` each (in reverse
order every other round); ``--rounds`` rounds. The table gives median steps/s and the
ratios are medians of per-round ratios (these machines are noisy: other processes
compete for the same cores).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dmrpc_gym.integrations.godot import GodotVectorEnv, find_godot, make_godot_catch  # noqa: E402


class BareLoop:
    """The minimum a Python side can do: JSON text over a websockets connection, nothing else.

    It drives the very game (and websocket) of a :class:`GodotEnv`, so the two compare the
    Python sides alone: two game processes differ by more (core placement) than the sides do.
    """

    def __init__(self, env) -> None:
        self._conn = env._channel._connection      # websockets' sync ServerConnection

    def ask(self, message: dict) -> dict:
        self._conn.send(json.dumps(message))
        return json.loads(self._conn.recv())


def episode_bare(loop: BareLoop, actions: np.ndarray) -> int:
    """One episode (reset, then steps until done) with the bare loop; the number of steps."""
    loop.ask({"cmd": "reset"})
    for steps, action in enumerate(actions, 1):
        if loop.ask({"cmd": "step", "action": [int(action)]})["done"]:
            break
    return steps


def episode_env(env, actions: np.ndarray) -> int:
    """One episode with GodotEnv; the number of steps."""
    env.reset()
    for steps, action in enumerate(actions, 1):
        _, _, terminated, truncated, _ = env.step(int(action))
        if terminated or truncated:
            break
    return steps


def run_single_pair(loop: BareLoop, env, seconds: float, rng: np.random.Generator) -> tuple[float, float]:
    """Whole episodes of the bare loop and of GodotEnv, alternating, on the same game: steps/s of each.

    Alternating episode by episode puts both sides under the same (noisy) load.
    """
    elapsed, steps, flip = [0.0, 0.0], [0, 0], False
    start = time.perf_counter()
    while time.perf_counter() - start < 2 * seconds:
        for side in ((0, 1) if flip else (1, 0)):
            actions = rng.integers(3, size=100)
            began = time.perf_counter()
            steps[side] += episode_bare(loop, actions) if side == 0 else episode_env(env, actions)
            elapsed[side] += time.perf_counter() - began
        flip = not flip
    return steps[0] / elapsed[0], steps[1] / elapsed[1]


def run_in_turn(envs, seconds: float, rng: np.random.Generator) -> float:
    for env in envs:
        env.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for env in envs:
            _, _, terminated, truncated, _ = env.step(int(rng.integers(3)))
            steps += 1
            if terminated or truncated:
                env.reset()
    return steps / (time.perf_counter() - start)


def run_vector(vector: GodotVectorEnv, seconds: float, rng: np.random.Generator) -> float:
    vector.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        vector.step(rng.integers(3, size=vector.num_envs))
        steps += vector.num_envs
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=0.15)
    parser.add_argument("--games", type=int, default=8)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    env = make_godot_catch(godot=find_godot("godot3-server"))
    bare = BareLoop(env)
    vector = GodotVectorEnv(args.games, make_env=make_godot_catch, godot=find_godot("godot3-server"))
    names = ["bare loop", "GodotEnv", f"in turn x{args.games}", f"vector x{args.games}"]
    results: dict[str, list[float]] = {name: [] for name in names}
    try:
        for round_ in range(args.rounds):
            bare_rate, env_rate = run_single_pair(bare, env, args.seconds, rng)
            results[names[0]].append(bare_rate)
            results[names[1]].append(env_rate)
            pair = [(names[2], lambda: run_in_turn(vector.envs, args.seconds, rng)),
                    (names[3], lambda: run_vector(vector, args.seconds, rng))]
            for name, case in (pair if round_ % 2 == 0 else pair[::-1]):   # neither always runs first
                results[name].append(case())
    finally:
        env.close()
        vector.close()
    load = os.getloadavg()[0]
    print(f"Machine: {os.cpu_count()} cpus, Python {platform.python_version()}, "
          f"{subprocess.run(find_godot('godot3-server') + ['--version'], capture_output=True, text=True).stdout.strip()}, "
          f"load average {load:.1f} at the end; {args.rounds} rounds of {args.seconds:g} s per case\n")
    print("| case | steps/s (median) | min | max |\n|---|---:|---:|---:|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values):.0f} | {min(values):.0f} | {max(values):.0f} |")
    print("\n| ratio (median of per-round ratios) | value | target |\n|---|---:|---:|")
    for (a, b), target in (((names[1], names[0]), 0.8), ((names[3], names[2]), 2.0)):
        ratio = statistics.median(x / y for x, y in zip(results[a], results[b]))
        print(f"| {a} / {b} | {ratio:.2f} | >= {target} |")


if __name__ == "__main__":
    main()
