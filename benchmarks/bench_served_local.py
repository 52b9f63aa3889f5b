"""Served / local steps per second, one env of each family, side by side in one run (issue 29).

Each env is built as the fidelity suite builds it (``tests/support/fidelity_support.py``): locally as a
user builds it, and served by ``dmrpc-gym serve TARGET --port 0`` (a subprocess) and read back
through the public API (``gym.make("dmrpc/Remote-v0")``, ``dmrpc_gym.parallel_env``,
``dmrpc_gym.aec_env``, ``dmrpc_gym.connect_dm_env``), with its default episode length. A step is
one ``step()`` call (every live agent's action for a parallel env, one move for a turn-based
game); a new episode starts after each end. Actions are drawn once from the seeded action space
(turn-based games: each move under its action mask, on both sides).

The measuring is ``bench_render_cost``'s: every case for ~0.3 s per round, all cases in turn (in
reverse every other round), 5 rounds; served / local is the median of per-round ratios.

    python benchmarks/bench_served_local.py [--quick] [--save]   # --save: its section of fidelity.md
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(1, ROOT)                             # the checkout's dmrpc_gym (as the served one)
sys.path.insert(2, os.path.join(ROOT, "tests", "support"))   # the fidelity suite's builders and players
from bench_render_cost import measure  # noqa: E402  (bench_steps' measure, the order reversed every other round)
from bench_steps import Case as Timed, machine, paired_ratio  # noqa: E402
from fidelity_support import PLAYERS, Case, Served, close, local_env, remote_env  # noqa: E402
from fidelity_table import commit, write_section  # noqa: E402

#: One env of each family, with the settings the fidelity suite gives it (seeds), not its short episodes.
FAMILIES = [
    Case("classic_control", "CartPole-v1", "CartPole-v1", "gym"),
    Case("toy_text", "FrozenLake-v1", "FrozenLake-v1", "gym"),
    Case("mujoco", "Hopper-v5", "Hopper-v5", "gym"),
    Case("box2d", "LunarLander-v3", "LunarLander-v3", "gym"),
    Case("butterfly", "pistonball_v6", "pettingzoo.butterfly.pistonball_v6", "parallel"),
    Case("sisl", "pursuit_v5", "pettingzoo.sisl.pursuit_v5", "parallel"),
    Case("mpe2", "simple_spread_v3", "mpe2.simple_spread_v3", "parallel"),
    Case("classic", "tictactoe_v3", "pettingzoo.classic.tictactoe_v3:env", "aec"),
    Case("dm_control", "cartpole-balance", "dm_control/cartpole-balance", "dm_env", {"random": 7}),
    Case("bsuite", "catch/0", "bsuite/catch/0", "dm_env", {"seed": 7}),
]
SEED = 5


class Stepped(Timed):
    """One side of a family's env: ``server`` is ``local`` or ``served``, ``address`` the server's."""

    def __init__(self, case: Case, side: str, address: str):
        super().__init__(case.name, side, address)
        self.case = case

    def open(self):
        self.player = PLAYERS[self.case.kind]
        self.env = local_env(self.case) if self.server == "local" else remote_env(self.case, self.address)
        self.player.reset(self.env, SEED)
        source = self.env if self.server == "local" else local_env(self.case)   # the local action spaces
        sample = self.player.sampler(source)
        if source is not self.env:
            close(source)
        if self.case.kind == "aec":
            self.actions = None
            self.sample = sample
        else:                                       # drawn once: sampling is not what is timed
            live = _AllAgents(self.env)
            self.actions = [sample(live) for _ in range(64)]
        self.i = 0

    def _action(self):
        if self.actions is None:
            return self.sample(self.env)
        action = self.actions[self.i % len(self.actions)]
        if self.case.kind == "parallel":
            return {agent: action[agent] for agent in self.env.agents}
        return action

    def run(self, k):
        env, player = self.env, self.player
        for _ in range(k):
            self.i += 1
            if player.step(env, self._action())[1]:
                player.reset(env, None)

    def close(self):
        close(self.env)


class _AllAgents:
    """An env stand-in whose live agents are all possible agents (to draw every agent's action)."""

    def __init__(self, env):
        self.agents = list(getattr(env, "possible_agents", []))


def run(quick: bool, only: list[str] | None = None) -> dict:
    rounds, seconds = (2, 0.05) if quick else (5, 0.3)
    families = [c for c in FAMILIES if not only or c.family in only or c.name in only]
    servers = {c.id: Served(c.target) for c in families}
    try:
        cases = [Stepped(c, side, servers[c.id].address) for c in families for side in ("local", "served")]
        for case in cases:
            case.open()
        try:
            samples = measure(cases, rounds, seconds)
        finally:
            for case in cases:
                case.close()
    finally:
        for served in servers.values():
            served.close()
    ratios = {c.name: paired_ratio(samples, f"{c.name} @served", f"{c.name} @local") for c in families}
    return {"families": families, "samples": samples, "ratios": ratios, "rounds": rounds, "seconds": seconds,
            "machine": machine()}


def report(results: dict) -> str:
    m = results["machine"]
    s = results["samples"]
    lines = [f"`python benchmarks/bench_served_local.py --save`: commit {commit()}; {m['nproc']} cpus "
             f"({m['cpu']}), Python {m['python']}; {m['date']}. One run, cases in turn, {results['rounds']} "
             f"rounds of ~{results['seconds']} s; served / local is the median of per-round ratios.", "",
             "| family | env | local steps/s | served steps/s | served / local |", "|---|---|---:|---:|---:|"]
    for c in results["families"]:
        local, served = statistics.median(s[f"{c.name} @local"]), statistics.median(s[f"{c.name} @served"])
        lines.append(f"| {c.family} | `{c.name}` | {local:.0f} | {served:.0f} | {results['ratios'][c.name]:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (numbers meaningless)")
    parser.add_argument("--save", action="store_true", help="write its section of benchmarks/fidelity.md")
    parser.add_argument("only", nargs="*", help="families or env names to measure (default: all)")
    args = parser.parse_args(argv)
    results = run(args.quick, args.only)
    text = report(results)
    print(text)
    if args.save:
        write_section("served-local", text)
    return results


if __name__ == "__main__":
    main()
