"""What ``render_mode="rgb_array"`` costs per step when ``render()`` is never called (issue 29).

Through our client on our server (``dmrpc-gym serve TARGET --port 0``, a subprocess each),
``gym.make("dmrpc/Remote-v0", address=..., render_mode=...)`` steps the same env with no
render_mode and with ``render_mode="rgb_array"``, side by side in one run: gymnasium's
CartPole-v1 and dm_control's cartpole-balance (its gymnasium view). Asking for frames should
cost nothing until ``render()`` asks for one: the goal is a per-step cost ratio <= 1.05.
SB3's ``make_vec_env`` asks for ``rgb_array`` by default, so this is what its training pays.

The measuring is ``bench_steps``'s: every case for ~0.4 s per round, all cases in turn, 15
rounds, the order of the cases reversed every other round (a case's place in a round moved a
dm_control ratio by a few percent); a ratio is the median of per-round ratios (these machines are
noisy: a dm_control run's per-round ratios spread over about +-10%; the table gives the spread).

    python benchmarks/bench_render_cost.py [--quick] [--save]   # --save: its section of fidelity.md
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))         # the checkout's dmrpc_gym (as the served one)
from bench_dm_env import serve  # noqa: E402
from bench_steps import Case, calibrate, machine, paired_ratio  # noqa: E402
from fidelity_table import commit, write_section  # noqa: E402

os.environ.setdefault("MUJOCO_GL", "egl")
ENVS = {"CartPole-v1": "CartPole-v1", "dm_control cartpole-balance": "dm_control/cartpole-balance"}
MODES = (None, "rgb_array")


class Remote(Case):
    """``gym.make("dmrpc/Remote-v0", address, render_mode=server)``, stepped with no ``render()``
    (``server`` is the render mode, ``name`` the env); a new episode after each end."""

    def open(self):
        import gymnasium as gym
        import dmrpc_gym  # noqa: F401  (registers dmrpc/Remote-v0)
        self.env = gym.make("dmrpc/Remote-v0", address=self.address,
                            render_mode=None if self.server == "none" else self.server)
        self.env.reset(seed=0)
        box = self.name.startswith("dm_control")
        self.actions = [np.array([1.0 if i % 2 else -1.0]) if box else i % 2 for i in range(2)]
        self.i = 0

    def run(self, k):
        env, actions = self.env, self.actions
        for _ in range(k):
            self.i += 1
            _, _, terminated, truncated, _ = env.step(actions[self.i % 2])
            if terminated or truncated:
                env.reset()

    def close(self):
        self.env.close()


def measure(cases: list[Case], rounds: int, seconds: float) -> dict[str, list[float]]:
    """``bench_steps.measure``, with the order of the cases reversed every other round."""
    calls = {case.label: calibrate(case, seconds) for case in cases}
    samples: dict[str, list[float]] = {case.label: [] for case in cases}
    for r in range(rounds):
        for case in (cases if r % 2 == 0 else cases[::-1]):
            start = time.perf_counter()
            case.run(calls[case.label])
            samples[case.label].append(calls[case.label] / (time.perf_counter() - start))
        print(f"  round {r + 1}/{rounds} done")
    return samples


def run(quick: bool) -> dict:
    rounds, seconds = (2, 0.05) if quick else (15, 0.4)
    procs = {name: serve(target) for name, target in ENVS.items()}
    try:
        cases = [Remote(name, mode or "none", procs[name][1]) for name in ENVS for mode in MODES]
        for case in cases:
            case.open()
        try:
            samples = measure(cases, rounds, seconds)
        finally:
            for case in cases:
                case.close()
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(10)
    ratios = {name: paired_ratio(samples, f"{name} @none", f"{name} @rgb_array") for name in ENVS}
    spread = {name: [x / y for x, y in zip(samples[f"{name} @none"], samples[f"{name} @rgb_array"])] for name in ENVS}
    return {"samples": samples, "ratios": ratios, "spread": spread, "rounds": rounds, "seconds": seconds, "machine": machine()}


def report(results: dict) -> str:
    m = results["machine"]
    lines = [f"`python benchmarks/bench_render_cost.py --save`: commit {commit()}; {m['nproc']} cpus "
             f"({m['cpu']}), Python {m['python']}; {m['date']}. One run, cases in turn (in reverse every other "
             f"round), {results['rounds']} rounds of ~{results['seconds']} s; a ratio is the median of per-round "
             f"ratios.", "",
             "| env, client render_mode | steps/s (median) | min | max |", "|---|---:|---:|---:|"]
    for label, values in results["samples"].items():
        name, mode = label.rsplit(" @", 1)
        lines.append(f"| {name}, {mode} | {statistics.median(values):.0f} | {min(values):.0f} | {max(values):.0f} |")
    lines += ["", "| env | per-step cost, rgb_array / none (goal <= 1.05) | per-round ratios, min - max |",
              "|---|---:|---:|"]
    lines += [f"| {name} | **{ratio:.2f}x** | {min(results['spread'][name]):.2f} - {max(results['spread'][name]):.2f} |"
              for name, ratio in results["ratios"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (numbers meaningless)")
    parser.add_argument("--save", action="store_true", help="write its section of benchmarks/fidelity.md")
    args = parser.parse_args(argv)
    results = run(args.quick)
    text = report(results)
    print(text)
    if args.save:
        write_section("render-cost", text)
    return results


if __name__ == "__main__":
    main()
