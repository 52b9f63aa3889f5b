"""dm_env both ways (issue 20), side by side in one run; writes benchmarks/dm_env.md with --save.

1. ``connect_dm_env`` against the official ``DmEnvAdaptor`` stepping the same small dm_env
   world (float32[4] observation, DiscreteArray(2) action, never ending) on one server.
2. What the wire adds per step (served minus local, each measured in the same round) for
   dm_control's cartpole-balance against gymnasium's CartPole-v1, both read through
   ``DmRpcEnv``: serving a dm_env should cost no more than serving a gymnasium env.
3. The control for 2: the same dm_control cartpole written as a plain gymnasium env
   (:class:`GymCartpole`, a flat float64[5] observation) and served as one. Against it, the
   dm_env path is compared with the gym path for the same physics, so what a ~90 us Python
   step costs when run in a server that sleeps between steps (its code runs on a cold core)
   is on both sides.
4. Why a long step costs more served: the local dm_control and CartPole-v1 steps timed back to
   back, and each after a 0.2 ms sleep (as a server sleeps in ``epoll`` between a client's steps).

Servers run as ``dmrpc-gym serve`` subprocesses. The measuring is ``bench_steps``'s: every
case for ~0.3 s per round, all cases in turn, 7 rounds; ratios are medians of per-round ratios.

    python benchmarks/bench_dm_env.py [--quick] [--save]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import dm_env
import gymnasium as gym
import numpy as np
from dm_env import specs

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_steps import Adaptor, Case, machine, measure, paired_ratio  # noqa: E402
from servers import serve_command as serve  # noqa: E402

os.environ.setdefault("MUJOCO_GL", "egl")


class SmallDm(dm_env.Environment):
    """The small world: a float32[4] observation, a DiscreteArray(2) action, never ending."""

    def reset(self):
        return dm_env.restart(np.ones(4, np.float32))

    def step(self, action):
        return dm_env.transition(1.0, np.full(4, float(action), np.float32))

    def observation_spec(self):
        return specs.Array((4,), np.float32, name="observation")

    def action_spec(self):
        return specs.DiscreteArray(2, name="action")


class GymCartpole(gym.Env):
    """dm_control's cartpole-balance as a plain gymnasium env: a flat float64[5] observation
    (position, velocity), a Box(-1, 1, (1,)) action, truncated where dm_control's time limit ends."""

    def __init__(self):
        from dm_control import suite
        self.dm = suite.load("cartpole", "balance", task_kwargs={"random": 0})
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (5,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float64)

    @staticmethod
    def _flat(step) -> np.ndarray:
        return np.concatenate([step.observation["position"], step.observation["velocity"]])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._flat(self.dm.reset()), {}

    def step(self, action):
        step = self.dm.step(action)
        return self._flat(step), float(step.reward), False, step.last(), {}


class ConnectDmEnv(Case):
    def open(self):
        import dmrpc_gym
        self.env = dmrpc_gym.connect_dm_env(self.address)
        self.env.reset()

    def run(self, k):
        step, action = self.env.step, np.int32(1)
        for _ in range(k):
            step(action)

    def close(self):
        self.env.close()


def _push(i: int) -> float:
    return 1.0 if i % 2 else -1.0


class Local(Case):
    """An env stepped in this process: ``address`` is ``dm_control``, ``gym`` or ``gym cartpole``."""

    def open(self):
        if self.address == "gym cartpole":
            self.env = GymCartpole()
            self.env.reset(seed=0)
        elif self.address == "dm_control":
            from dm_control import suite
            self.env = suite.load("cartpole", "balance", task_kwargs={"random": 0})
            self.env.reset()
        else:
            import gymnasium as gym
            self.env = gym.make("CartPole-v1")
            self.env.reset(seed=0)
        self.i = 0

    def run(self, k):
        env = self.env
        if self.address == "dm_control":
            for _ in range(k):
                self.i += 1
                if env.step(np.array([_push(self.i)])).last():
                    env.reset()
        else:
            cartpole = self.address == "gym cartpole"
            for _ in range(k):
                self.i += 1
                _, _, terminated, truncated, _ = env.step(np.array([_push(self.i)]) if cartpole else self.i % 2)
                if terminated or truncated:
                    env.reset()

    def close(self):
        self.env.close()


class Served(Case):
    """The same env served, read through ``DmRpcEnv``."""

    def open(self):
        from dmrpc_gym import DmRpcEnv
        self.env = DmRpcEnv(self.address)
        self.env.reset(seed=0)
        self.dm = self.name.startswith("dm_control")   # a Box action: dm_control's, or GymCartpole's
        self.i = 0

    def run(self, k):
        env = self.env
        for _ in range(k):
            self.i += 1
            action = np.array([_push(self.i)]) if self.dm else self.i % 2
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()

    def close(self):
        self.env.close()


def cold_steps(n: int) -> dict[str, float]:
    """Microseconds per local step (the step alone timed), back to back and each after a 0.2 ms sleep."""
    import select
    import socket
    from dm_control import suite
    dm = suite.load("cartpole", "balance", task_kwargs={"random": 0})
    cart = gym.make("CartPole-v1")
    idle, other = socket.socketpair()
    out = {}
    try:
        for pause in (0.0, 0.0002):
            dm.reset()
            cart.reset(seed=0)
            spent = {"dm_control cartpole": 0.0, "CartPole-v1": 0.0}
            for i in range(n):
                if pause:
                    select.select([idle], [], [], pause)
                start = time.perf_counter()
                if dm.step(np.array([_push(i)])).last():
                    dm.reset()
                spent["dm_control cartpole"] += time.perf_counter() - start
                if pause:
                    select.select([idle], [], [], pause)
                start = time.perf_counter()
                _, _, terminated, truncated, _ = cart.step(i % 2)
                spent["CartPole-v1"] += time.perf_counter() - start
                if terminated or truncated:
                    cart.reset()
            for name, seconds in spent.items():
                out[f"{name}, {'after a 0.2 ms sleep' if pause else 'back to back'}"] = seconds / n * 1e6
    finally:
        idle.close()
        other.close()
        cart.close()
    return out


def run(quick: bool) -> dict:
    rounds, seconds = (2, 0.05) if quick else (7, 0.3)
    procs = {}
    try:
        for target in ("bench_dm_env:SmallDm", "dm_control/cartpole-balance", "CartPole-v1"):
            procs[target] = serve(target)
        procs["loop"] = serve("dm_control/cartpole-balance", "--workers", "0")
        procs["control"] = serve("bench_dm_env:GymCartpole")
        small, cartpole_dm, cartpole_gym, cartpole_loop, control = (procs[t][1] for t in procs)
        cases = [Adaptor("DmEnvAdaptor", "small dm_env", small),
                 ConnectDmEnv("connect_dm_env", "small dm_env", small),
                 Local("dm_control cartpole local", "-", "dm_control"),
                 Served("dm_control cartpole served", "ours", cartpole_dm),
                 Served("dm_control cartpole served", "ours --workers 0", cartpole_loop),
                 Local("gym CartPole local", "-", "gym"),
                 Served("gym CartPole served", "ours", cartpole_gym),
                 Local("dm_control cartpole as a gym env local", "-", "gym cartpole"),
                 Served("dm_control cartpole as a gym env served", "ours", control)]
        for case in cases:
            case.open()
        try:
            samples = measure(cases, rounds, seconds, print)
        finally:
            for case in cases:
                case.close()
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(10)
    wire_dm = [1 / s - 1 / l for s, l in zip(samples["dm_control cartpole served @ours"],
                                               samples["dm_control cartpole local @-"])]
    wire_gym = [1 / s - 1 / l for s, l in zip(samples["gym CartPole served @ours"], samples["gym CartPole local @-"])]
    wire_loop = [1 / s - 1 / l for s, l in zip(samples["dm_control cartpole served @ours --workers 0"],
                                                 samples["dm_control cartpole local @-"])]
    wire_control = [1 / s - 1 / l for s, l in zip(samples["dm_control cartpole as a gym env served @ours"],
                                                    samples["dm_control cartpole as a gym env local @-"])]
    return {"cold": cold_steps(200 if quick else 3000),
            "wire_loop_us": statistics.median(wire_loop) * 1e6, "samples": samples, "rounds": rounds, "seconds": seconds, "machine": machine(),
            "speedup": paired_ratio(samples, "connect_dm_env @small dm_env", "DmEnvAdaptor @small dm_env"),
            "wire_dm_us": statistics.median(wire_dm) * 1e6, "wire_gym_us": statistics.median(wire_gym) * 1e6,
            "wire_ratio": statistics.median(d / g for d, g in zip(wire_dm, wire_gym)),
            "wire_control_us": statistics.median(wire_control) * 1e6,
            "control_ratio": statistics.median(d / g for d, g in zip(wire_dm, wire_control))}


def report(results: dict) -> str:
    m = results["machine"]
    lines = ["# dm_env both ways", "",
             "`python benchmarks/bench_dm_env.py --save` (one run, cases in turn, "
             f"{results['rounds']} rounds of ~{results['seconds']} s; ratios are medians of per-round ratios).", "",
             f"Machine: {m['nproc']} cpus ({m['cpu']}), Python {m['python']}, grpcio {m['grpcio']}; {m['date']}.", "",
             "| case | steps/s (median) | min | max |", "|---|---:|---:|---:|"]
    for label, values in results["samples"].items():
        lines.append(f"| {label} | {statistics.median(values):.0f} | {min(values):.0f} | {max(values):.0f} |")
    lines += ["", "## Ratios", "",
              f"- `connect_dm_env` / official `DmEnvAdaptor`, same server, small dm_env world: "
              f"**{results['speedup']:.2f}x** (goal: >= 2x)",
              f"- time the wire adds per step (served - local): dm_control cartpole "
              f"{results['wire_dm_us']:.0f} us, gymnasium CartPole-v1 {results['wire_gym_us']:.0f} us; "
              f"ratio **{results['wire_ratio']:.2f}** (goal: <= 1.2)",
              f"- the same for dm_control cartpole served with `--workers 0` (every env call on the "
              f"server's event loop, no hand-off to a worker thread): {results['wire_loop_us']:.0f} us",
              f"- the control: the same physics as a plain gymnasium env, served as one: "
              f"{results['wire_control_us']:.0f} us; dm_env path / gym path for the same physics "
              f"**{results['control_ratio']:.2f}**", "",
              "## A local step, hot and cold", "", "| step | us |", "|---|---:|"]
    lines += [f"| {name} | {us:.1f} |" for name, us in results["cold"].items()]
    lines += [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (numbers meaningless)")
    parser.add_argument("--save", action="store_true", help="write benchmarks/dm_env.md")
    args = parser.parse_args(argv)
    results = run(args.quick)
    text = report(results)
    print(text)
    if args.save:
        with open(os.path.join(HERE, "dm_env.md"), "w") as f:
            f.write(text)
    return results


if __name__ == "__main__":
    main()
