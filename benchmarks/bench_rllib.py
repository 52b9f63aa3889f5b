"""RLlib sampling throughput (env steps/s): Catch over dm_env_rpc vs Catch run locally in the env runners.

One run (needs ``ray[rllib]``: ``pip install -e ".[rllib]"`` in a venv of its
own) builds a PPO algorithm (new API stack) per case, each with ``N`` env
runners of ``E`` Catch envs each, then times ``EnvRunner.sample`` on all runners at
once, case after case, round after round (A, B, C, A, B, C...), and reports
medians and the ratio to the local case (the median of per-round ratios). With
``E > 1`` the dm_env_rpc cases use RLlib's ``vector_entry_point`` mode (one
``DmRpcVectorEnv`` per runner, all its steps in flight at once) and the local
case RLlib's default ``sync`` mode. Cases:

- ``local``: the bundled gymnasium ``Catch`` in the runner, wrapped in ``FlatSpaces``;
- ``dm_env_rpc served``: ``dmrpc/Catch-v0`` with ``addresses`` of N ``dmrpc-gym serve
  dmrpc_gym.worlds:Catch`` processes (one server per runner, by the spread rule);
- ``dm_env_rpc embedded``: ``dmrpc/Catch-v0`` without addresses (each runner serves
  Catch in-process, so the server shares the runner's interpreter).

``--world heavy`` measures ``benchmarks/heavy_catch.py:HeavyCatch`` instead, Catch whose step
computes for ~1 ms as a simulator's would (local and served; there is no embedded case for it).

    python benchmarks/bench_rllib.py                  # N = 1 and 2, E = 1 and 8, 5 rounds
    python benchmarks/bench_rllib.py --rounds 2 --steps 500
    python benchmarks/bench_rllib.py --save           # also write the table to benchmarks/rllib.md
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

# Ray on loopback only (ray reads these at import): see tests/integrations/rllib/conftest.py.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "token")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import ray  # noqa: E402
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.tune.registry import register_env  # noqa: E402

from dmrpc_gym.integrations import rllib as dmrpc_rllib  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from servers import serve_command  # noqa: E402

LOCAL = "bench/LocalCatch-v0"


WORLDS = {"catch": "dmrpc_gym.worlds:Catch", "heavy": "benchmarks/heavy_catch.py:HeavyCatch"}


def local_catch(env_config: Any):
    """The world (``env_config["world"]``, Catch by default) in the runner's process, in the same flat view."""
    from dmrpc_gym.integrations.flat_spaces import FlatSpaces
    config = dict(env_config)
    if config.pop("world", "catch") == "heavy":
        from heavy_catch import HeavyCatch as World
    else:
        from dmrpc_gym.worlds.catch import Catch as World
    return FlatSpaces(World(**config))


def serve_catch(world: str = "catch") -> tuple[subprocess.Popen, str]:
    """A ``dmrpc-gym serve WORLD --port 0`` process of this checkout and its address."""
    return serve_command(WORLDS[world], tree=ROOT)


def build(env: str, env_config: dict, runners: int, cpus: float, envs: int = 1, mode: str = "sync"):
    config = (PPOConfig()
              .environment(env, env_config=env_config)
              .env_runners(num_env_runners=runners, num_envs_per_env_runner=envs, num_cpus_per_env_runner=cpus,
                           gym_env_vectorize_mode=mode)
              .rl_module(model_config={"fcnet_hiddens": [64, 64]}))
    return config.build_algo()


def sample_rate(algo, steps: int) -> float:
    """Env steps/s of every runner sampling ``steps`` steps at once."""
    start = time.perf_counter()
    counts = algo.env_runner_group.foreach_env_runner(
        lambda runner: sum(len(episode) for episode in runner.sample(num_timesteps=steps)),
        local_env_runner=False)
    return sum(counts) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 2], help="env runner counts (default: 1 2)")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8],
                        help="envs per runner (default: 1 8); with more than 1, the dm_env_rpc cases use "
                             "RLlib's vector_entry_point mode (one DmRpcVectorEnv per runner), local ones 'sync'")
    parser.add_argument("--steps", type=int, default=2000, help="steps each runner samples per measure")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of measures (medians are reported)")
    parser.add_argument("--save", action="store_true", help="write the table to rllib.md beside this script")
    parser.add_argument("--world", choices=sorted(WORLDS), default="catch",
                        help="catch (default), or heavy: Catch whose step computes ~1 ms")
    args = parser.parse_args(argv)

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "benchmarks")])}})
    dmrpc_rllib.register()
    register_env(LOCAL, local_catch)
    rows = []
    try:
        for n, envs in [(n, e) for e in args.envs for n in args.runners]:
            servers = [serve_catch(args.world) for _ in range(n)]
            cpus = round(1.8 / (3 * n), 2)   # Ray's CPUs are a budget (2 here): every case's runners must fit at once
            mode = "vector_entry_point" if envs > 1 else "sync"
            try:
                served = "dmrpc/Catch-v0" if args.world == "catch" else "dmrpc/Remote-v0"
                cases = {
                    "local": build(LOCAL, {"world": args.world}, n, cpus, envs),
                    "dm_env_rpc served": build(served, {"addresses": [a for _, a in servers]}, n, cpus,
                                               envs, mode),
                }
                if args.world == "catch":
                    cases["dm_env_rpc embedded"] = build("dmrpc/Catch-v0", {}, n, cpus, envs, mode)
                rates: dict[str, list[float]] = {name: [] for name in cases}
                for algo in cases.values():
                    sample_rate(algo, min(args.steps, 200))          # warm up: the first sample resets
                for round_ in range(args.rounds):
                    for name, algo in cases.items():
                        rates[name].append(sample_rate(algo, args.steps))
                    print(f"{n} runner(s) x {envs} env(s), round {round_ + 1}: "
                          + ", ".join(f"{name} {values[-1]:.0f}" for name, values in rates.items()),
                          file=sys.stderr, flush=True)
                for name, values in rates.items():
                    ratio = statistics.median(v / l for v, l in zip(values, rates["local"]))
                    rows.append((n, envs, name, statistics.median(values), min(values), max(values), ratio))
                for algo in cases.values():
                    algo.stop()
            finally:
                for process, _ in servers:
                    process.terminate()
                    process.wait(timeout=10)
    finally:
        ray.shutdown()

    lines = [f"World: {WORLDS[args.world]}. Machine: {os.cpu_count()} cpus, Python {platform.python_version()}, "
             f"ray {ray.__version__}; {datetime.date.today()}; {args.rounds} rounds of {args.steps} steps per runner. With more than "
             "one env per runner the dm_env_rpc cases run in RLlib's `vector_entry_point` mode (one "
             "`DmRpcVectorEnv` per runner), the local case in `sync` mode.",
             "",
             "| env runners | envs per runner | case | env steps/s (median) | min | max | vs local (median of round ratios) |",
             "|---:|---:|---|---:|---:|---:|---:|"]
    lines += [f"| {n} | {envs} | {name} | {median:.0f} | {low:.0f} | {high:.0f} | {ratio:.2f}x |"
              for n, envs, name, median, low, high, ratio in rows]
    print("\n" + "\n".join(lines))
    if args.save:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rllib.md")
        with open(path, "w") as f:
            f.write("# RLlib sampling over dm_env_rpc (`bench_rllib.py`)\n\n"
                    "Not a test: one run on one machine, cases measured side by side "
                    "(see the script's docstring for the cases).\n\n" + "\n".join(lines) + "\n")
        print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
