"""A Godot RL Agents game served, driven directly, and through godot-rl's own GodotEnv: steps/s side by side.

    python benchmarks/bench_godot_rl.py [--runs 5] [--steps 400] [--godot-rl-python PATH] [--tree PATH] [--save]

The bundled two-agent Walkers game under the headless engine (``godot3-server``), a fixed action
(move 0.5, walk), at ``action_repeat`` 8 and 1; then the same game spending 250 us of CPU on each
physics frame (``--frame_cost_usec=250``, :mod:`godot_rl_heavy`), standing for a larger game's physics:
Walkers' own frames cost next to nothing, so there the fixed cost of a served step shows at its largest.

    served      dmrpc_gym.parallel_env against ``dmrpc-gym serve godot-rl:WALKERS`` (a subprocess)
    direct      dmrpc_gym.integrations.godot_rl.GodotRLParallelEnv, the same game in this process
    godot-rl    godot_rl.core.godot_env.GodotEnv (``godot-rl`` 0.8.2), run by the interpreter of a venv
                that has it (``--godot-rl-python``, default ``$DMRPC_GODOT_RL_PYTHON``; left out
                without one): it pins gymnasium 1.0 and numpy < 2, which dmrpc_gym cannot share
    served by   with ``--tree PATH``: the same client against the server of another checkout (a base
    PATH        tree, ``git worktree add``), in the same runs: a before and after side by side

Each run steps every case ``--steps`` times (a new episode when no agent is left; godot-rl's
side steps every agent always, as it does) in turn, ``--runs`` runs, reversing the order every
other run; while a case runs, the other cases' games are stopped (SIGSTOP: an idle game polls its socket
every 50 us, which on 2 cores slowed the measured case); the table gives each case's median steps/s and the medians of per-run ratios to
direct. These machines are shared and noisy: read the ratios, not the absolute numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import dmrpc_gym  # noqa: E402
from dmrpc_gym.integrations.godot_rl import WALKERS_PROJECT, GodotRLParallelEnv, GodotRLWarning  # noqa: E402
from dmrpc_gym.integrations.godot.launch import find_godot  # noqa: E402
from bench_steps import machine  # noqa: E402
from servers import serve_command  # noqa: E402
from godot_rl_heavy import EXTRA_ARGS, FRAME_COST_USEC  # noqa: E402

REFERENCE = HERE.parent / "tests" / "support" / "godot_rl_reference.py"
ACTION = {"move": np.array([0.5], np.float32), "run": 0}


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (the games a server, or this process, started)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listed:
                found += [int(child) for child in listed.read().split()]
        except OSError:
            pass
    return found


def only_running(games: dict[str, int], name: str | None) -> None:
    """Let the game of case ``name`` run and stop (SIGSTOP) the others' (None: let all run): an idle game
    polls its socket every 50 us, and on 2 cores the idle games of the other cases slowed the measured one."""
    for case, pid in games.items():
        try:
            os.kill(pid, signal.SIGCONT if name is None or case == name else signal.SIGSTOP)
        except ProcessLookupError:
            pass


def steps_per_second(env, steps: int) -> float:
    """``steps`` steps of the fixed action (a new episode whenever no agent is left): steps/s."""
    env.reset()
    started = time.perf_counter()
    for _ in range(steps):
        if not env.agents:
            env.reset()
        env.step({agent: ACTION for agent in env.agents})
    return steps / (time.perf_counter() - started)


def godot_rl_steps_per_second(python: str, launcher: Path, action_repeat: int, steps: int,
                              extra: list[str]) -> float:
    request = {"game": str(launcher), "seed": 0, "action_repeat": action_repeat, "time_steps": steps,
               "game_args": extra}
    done = subprocess.run([python, str(REFERENCE)], input=json.dumps(request), capture_output=True, text=True,
                          timeout=600)
    answers = [line for line in done.stdout.splitlines() if line.startswith("ANSWER ")]
    if done.returncode != 0 or not answers:
        raise RuntimeError(f"godot-rl's side failed:\n{done.stderr[-2000:]}")
    return json.loads(answers[-1][len("ANSWER "):])["steps_per_second"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--godot-rl-python", default=os.environ.get("DMRPC_GODOT_RL_PYTHON"))
    parser.add_argument("--tree", help="also serve from this checkout (its server, this client)")
    parser.add_argument("--save", action="store_true", help="write benchmarks/godot_rl.md")
    args = parser.parse_args()
    warnings.simplefilter("ignore", GodotRLWarning)
    launcher = Path(tempfile.mkdtemp(prefix="bench-godot-rl-")) / "walkers.x86_64"
    launcher.write_text(f'#!/bin/sh\nexec {" ".join(find_godot())} --path "{WALKERS_PROJECT}" --fixed-fps 60 "$@"\n')
    launcher.chmod(0o755)
    lines = [f"# Godot RL Agents: served, direct and godot-rl's GodotEnv (Walkers, 2 agents)", "",
             f"`python benchmarks/bench_godot_rl.py --runs {args.runs} --steps {args.steps}`; machine: "
             + ", ".join(f"{k} {v}" for k, v in machine().items()) + ". Median steps/s of "
             f"{args.runs} runs and medians of per-run ratios to direct; load average at the start "
             f"{os.getloadavg()[0]:.1f} (a shared, noisy machine when above the core count).", "",
             "| game | action_repeat | served | direct | godot-rl GodotEnv | served / direct | godot-rl / direct |"
             + (f" served by {args.tree} | its served / direct |" if args.tree else ""),
             "|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.tree else "")]
    for title, target, extra in (("Walkers", f"godot-rl:{WALKERS_PROJECT}", []),
                                 (f"Walkers, {FRAME_COST_USEC} us a physics frame", "godot_rl_heavy:WORLDS",
                                  EXTRA_ARGS)):
        servers = [serve_command(target)] + ([serve_command(target, tree=args.tree)] if args.tree else [])
        try:
            lines += table(title, servers, extra, launcher, args)
        finally:
            for server, _ in servers:
                server.kill()
                server.wait()
    text = "\n".join(lines) + "\n"
    print(text)
    if args.save:
        (HERE / "godot_rl.md").write_text(text)


def table(title: str, servers: list[tuple[subprocess.Popen, str]], extra: list[str], launcher: Path,
          args: argparse.Namespace) -> list[str]:
    """The rows for one game: action_repeat 8 and 1 (``servers``: this tree's, then ``--tree``'s)."""
    lines = [f"| {title} | | | | | | |" + (" | |" if args.tree else "")]
    for repeat in (8, 1):
        settings = {"seed": 0, "action_repeat": repeat}
        envs, games = {}, {}
        for name, (server, address) in zip(("served", "tree"), servers):
            before = set(children(server.pid))
            envs[name] = dmrpc_gym.parallel_env(address, world_settings=settings)
            games[name] = max(set(children(server.pid)) - before)     # the game its world started
        envs["direct"] = GodotRLParallelEnv(WALKERS_PROJECT, seed=0, action_repeat=repeat, extra_args=extra)
        games["direct"] = envs["direct"].game.process.pid
        cases = {name: (lambda env=env, name=name: only_running(games, name) or steps_per_second(env, args.steps))
                 for name, env in envs.items()}
        if args.godot_rl_python:
            cases["godot-rl"] = lambda: only_running(games, "godot-rl") or godot_rl_steps_per_second(
                args.godot_rl_python, launcher, repeat, args.steps, extra)
        rates: dict[str, list[float]] = {name: [] for name in cases}
        try:
            for run in range(args.runs):
                for name in (list(cases) if run % 2 == 0 else list(reversed(cases))):
                    rates[name].append(cases[name]())
        finally:
            only_running(games, None)
            for env in envs.values():
                env.close()
        ratio = {name: statistics.median(a / b for a, b in zip(rates[name], rates["direct"])) for name in rates}
        median = {name: statistics.median(values) for name, values in rates.items()}
        row = (f"| | {repeat} | {median['served']:.0f} | {median['direct']:.0f} | "
               f"{median['godot-rl']:.0f} | " if "godot-rl" in median else
               f"| | {repeat} | {median['served']:.0f} | {median['direct']:.0f} | (no godot-rl) | ")
        row += f"{ratio['served']:.2f}x | " + (f"{ratio['godot-rl']:.2f}x |" if "godot-rl" in ratio else "- |")
        if args.tree:
            row += f" {median['tree']:.0f} | {ratio['tree']:.2f}x |"
        lines.append(row)
        print(row, flush=True)
    return lines


if __name__ == "__main__":
    main()
