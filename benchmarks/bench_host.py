"""Vector envs on one host, side by side: gymnasium's, EnvPool and ``DmRpcVectorEnv`` (issue 40 item 4).

For each observation (CartPole-v1's 4 floats, Pendulum-v1's 3; a constant uint8 image of 28 KB,
1 MB and 16 MB, ``constant_world.ConstantImage``: trivial dynamics, the cost is the observation)
and each number of envs (1, 4, 8), the contenders are opened together and measured in turn, round after round
(each round led by the next contender), and the table gives the median of the rounds with their
spread (min-max):

- ``sync``: gymnasium's ``SyncVectorEnv`` of the local envs (this process);
- ``async``: gymnasium's ``AsyncVectorEnv(shared_memory=True)`` (a process per env);
- ``envpool``: ``envpool.make_gymnasium`` where EnvPool has the env (CartPole-v1, Pendulum-v1; not the images),
  ``num_threads`` = envs; its column says why when the package is missing;
- ``ours, 1 server``: ``DmRpcVectorEnv(shared_memory=False)`` against one ``Server`` process holding every world
  (every tensor in the messages, over loopback TCP: no move to the server's Unix socket either);
- ``ours, N servers``: the same against a server process per env;
- ``ours, shared memory``: ``DmRpcVectorEnv`` as it comes (shared memory on: one region for all envs, large
  observations written there by the server, one copy out of it; the connection moved to the server's Unix
  socket), one server;
- ``ours, copy=False``: the same with ``copy=False`` (the batch is a view of the region).

Every ``ours`` column polls before it sleeps, as it comes (``transport/busy_poll.py``; ``DMRPC_BUSY_POLL_US=0``
in the environment turns that off for the whole run).

With 16 MB observations a ``np.copyto`` of 16 MiB into a warm array is measured in the same rounds (the scale
of a copy); the report gives one env's step and a ``copy=False`` vector env's step per env against it.

Steps per second count every env's step (a vector step of N envs is N steps). CPU per step is the
user + system time of every process of the setup (this process: ``time.process_time``; the servers
or workers that contender started, with their children: ``/proc/PID/stat``, in clock ticks of 10 ms,
so a ``--quick`` run's CPU figures are meaningless), divided by the env steps.

    python benchmarks/bench_host.py --quick            # a smoke run (numbers meaningless)
    python benchmarks/bench_host.py --save             # 5 rounds; host.md's table and host.png
    python benchmarks/bench_host.py --only cartpole --envs 4

Wall-clock figures: take them on a quiet machine (the load average is printed with them).
"""
from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from typing import Any

import numpy as np

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(1, ROOT)

from sections import commit, write_section  # noqa: E402  (benchmarks/ is a folder of scripts)

MD = os.path.join(HERE, "host.md")
PNG = os.path.join(HERE, "host.png")
#: The observations: a name for the tables, and a gymnasium env id or the constant image's shape.
OBSERVATIONS: dict[str, str | tuple[int, ...]] = {
    "CartPole-v1": "CartPole-v1", "Pendulum-v1": "Pendulum-v1", "28 KB": (84, 84, 4), "1 MB": (512, 512, 4),
    "16 MB": (2048, 2048, 4)}
ENVS = (1, 4, 8)
CONTENDERS = ("sync", "async", "envpool", "ours, 1 server", "ours, N servers", "ours, shared memory",
              "ours, copy=False")
#: EnvPool's ids for the observations it has.
ENVPOOL_IDS = {"CartPole-v1": "CartPole-v1", "Pendulum-v1": "Pendulum-v1"}
TICK = os.sysconf("SC_CLK_TCK")


# -- the envs ---------------------------------------------------------------------------------------
def factory(shape: str | tuple[int, ...]) -> Any:
    """What makes one env of ``shape``: a gymnasium env id as it is; ``"constant"``, 4 floats that never end
    (``constant_world.Constant``, for ``profile_host.py``); or the constant image of that shape."""
    if shape == "constant":
        from constant_world import Constant
        return Constant
    if isinstance(shape, str):
        return shape
    from constant_world import ConstantImage
    return functools.partial(ConstantImage, shape)


def make_local(shape: str | tuple[int, ...]) -> Any:
    """One local env of ``shape`` (:func:`factory`), made as a user makes it."""
    import gymnasium as gym
    made = factory(shape)
    return gym.make(made) if isinstance(made, str) else made()


def serve(shape: str | tuple[int, ...]) -> None:
    """The server role: serve the env of ``shape`` (:func:`factory`), print ``ADDRESS``, serve until stdin closes."""
    from dmrpc_gym.server import Server
    server = Server(factory(shape), kind="gym").start()
    print("ADDRESS", server.address, flush=True)
    sys.stdin.read()
    server.stop(0)


# -- CPU time of processes --------------------------------------------------------------------------
def children(pid: int) -> list[int]:
    """``pid``'s children (every thread's), from ``/proc``."""
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return found


def family(pids: list[int]) -> list[int]:
    """``pids`` and all their descendants."""
    out, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.append(pid)
            todo += children(pid)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system seconds of process ``pid`` (all its threads) so far, in clock ticks (10 ms: measure
    for a second or more); 0 for a process gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK       # utime, stime (fields 14 and 15 of stat)


# -- contenders -------------------------------------------------------------------------------------
def actions(observation: str, n: int, integers: Any) -> np.ndarray:
    """The actions every contender steps ``n`` envs with (fixed: drawing them is not what is timed): Pendulum's
    torque 0, else alternate Discrete(2) actions (env ``i`` always ``i % 2``)."""
    if observation == "Pendulum-v1":
        return np.zeros((n, 1), np.float32)
    return np.arange(n, dtype=integers) % 2


class Contender:
    """One way to step ``n`` envs of an observation: ``open``, ``run(k)`` (k vector steps), ``close``;
    ``pids``: its processes besides this one (CPU is counted for them and this process)."""

    def __init__(self, name: str, observation: str, n: int):
        self.name, self.observation, self.n = name, observation, n
        self.shape = OBSERVATIONS.get(observation, observation)
        self.pids: list[int] = []
        self.unavailable: str | None = None       # why it has no figures (it is not run)

    def open(self) -> None:
        self.envs = self.make()
        self.envs.reset(seed=0)
        self.actions = actions(self.observation, self.n, np.int64)

    def make(self) -> Any:
        raise NotImplementedError

    def run(self, k: int) -> None:
        step, actions = self.envs.step, self.actions
        for _ in range(k):
            step(actions)

    def close(self) -> None:
        envs = getattr(self, "envs", None)
        if envs is not None:
            envs.close()


class Sync(Contender):
    def make(self):
        import gymnasium as gym
        return gym.vector.SyncVectorEnv([functools.partial(make_local, self.shape)] * self.n)


class Async(Contender):
    def make(self):
        import gymnasium as gym
        envs = gym.vector.AsyncVectorEnv([functools.partial(make_local, self.shape)] * self.n, shared_memory=True)
        self.pids = [p.pid for p in envs.processes]
        return envs


class EnvPool(Contender):
    def __init__(self, name, observation, n):
        super().__init__(name, observation, n)
        try:
            import envpool  # noqa: F401
        except ImportError as err:
            self.unavailable = f"envpool is not installed ({err})"
        else:
            if observation not in ENVPOOL_IDS:
                self.unavailable = "EnvPool has no such env"

    def make(self):
        import envpool
        warnings.filterwarnings("ignore", message=".*precision lowered by casting")   # EnvPool's own spaces
        return envpool.make_gymnasium(ENVPOOL_IDS[self.observation], num_envs=self.n, batch_size=self.n,
                                      num_threads=self.n, seed=0)

    def open(self):
        self.envs = self.make()
        self.envs.reset()
        self.actions = actions(self.observation, self.n, np.int32)


class Ours(Contender):
    """``DmRpcVectorEnv`` against ``servers`` server processes (1, or one per env), with ``options``."""

    def __init__(self, name, observation, n, servers: int, **options: Any):
        super().__init__(name, observation, n)
        self.servers, self.options = servers, options
        self.procs: list[subprocess.Popen] = []

    def make(self):
        from dmrpc_gym import DmRpcVectorEnv
        addresses = []
        for _ in range(self.servers):
            args = [sys.executable, os.path.abspath(__file__), "serve", "--observation", self.observation]
            proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                    env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                        filter(None, [ROOT, HERE, os.environ.get("PYTHONPATH", "")]))})
            self.procs.append(proc)
            line = proc.stdout.readline().split()
            if not line or line[0] != "ADDRESS":
                raise RuntimeError(f"the benchmark server for {self.observation} did not start")
            addresses.append(line[1])
        self.pids = family([p.pid for p in self.procs])
        return DmRpcVectorEnv(self.n, addresses=addresses, **self.options)

    def close(self):
        try:
            super().close()
        finally:
            for proc in self.procs:
                proc.stdin.close()
            for proc in self.procs:
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()


def contenders(observation: str, n: int) -> list[Contender]:
    return [Sync("sync", observation, n), Async("async", observation, n), EnvPool("envpool", observation, n),
            Ours("ours, 1 server", observation, n, 1, shared_memory=False),
            Ours("ours, N servers", observation, n, n, shared_memory=False),
            Ours("ours, shared memory", observation, n, 1), Ours("ours, copy=False", observation, n, 1, copy=False)]


# -- measuring --------------------------------------------------------------------------------------
class Memcpy(Contender):
    """``np.copyto`` of the observation's bytes into a warm array: the scale of a copy (one "step")."""

    def open(self):
        nbytes = int(np.prod(self.shape))
        self.source, self.target = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
        np.copyto(self.target, self.source)

    def run(self, k):
        for _ in range(k):
            np.copyto(self.target, self.source)

    def close(self):
        pass


def calibrate(c: Contender, seconds: float) -> int:
    """Vector steps of ``c`` that last about ``seconds`` (after a warm-up)."""
    c.run(2)
    k, elapsed = 1, 0.0
    while elapsed < seconds / 4:
        start = time.perf_counter()
        c.run(k)
        elapsed = time.perf_counter() - start
        if elapsed < seconds / 4:
            k *= 2
    return max(1, int(k * seconds / max(elapsed, 1e-9)))


def measure(cs: list[Contender], rounds: int, seconds: float) -> dict[str, list[tuple[float, float]]]:
    """Per contender: ``(env steps/s, CPU us per env step)`` of each round, the contenders taking turns."""
    live = [c for c in cs if c.unavailable is None]
    calls = {c.name: calibrate(c, seconds) for c in live}
    samples: dict[str, list[tuple[float, float]]] = {c.name: [] for c in live}
    for r in range(rounds):
        for c in live[r % len(live):] + live[:r % len(live)]:
            cpu = time.process_time() + sum(map(cpu_seconds, c.pids))    # this process: to the ns
            start = time.perf_counter()
            c.run(calls[c.name])
            wall = time.perf_counter() - start
            used = time.process_time() + sum(map(cpu_seconds, c.pids)) - cpu
            steps = calls[c.name] * c.n
            samples[c.name].append((steps / wall, used / steps * 1e6))
    return samples


def run(observations: list[str], ns: list[int], rounds: int, seconds: float, log=print) -> dict[str, Any]:
    results: dict[tuple[str, int, str], Any] = {}
    load = [os.getloadavg()[0]]
    for observation in observations:
        for n in ns:
            cs = contenders(observation, n)
            if observation == "16 MB":
                cs.append(Memcpy("np.copyto", observation, 1))
            opened = []
            try:
                for c in cs:
                    if c.unavailable is None:
                        try:
                            c.open()
                            opened.append(c)
                        except Exception as err:        # say why, measure the others
                            c.unavailable = f"failed to open: {type(err).__name__}: {err}"
                            c.close()
                samples = measure(cs, rounds, seconds)
            finally:
                for c in opened:
                    c.close()
            for c in cs:
                results[observation, n, c.name] = c.unavailable if c.unavailable else samples[c.name]
            log(f"  {observation}, {n} envs: done")
            load.append(os.getloadavg()[0])
    return {"results": results, "observations": observations, "ns": ns, "rounds": rounds, "seconds": seconds,
            "load": load, "machine": machine()}


def machine() -> dict[str, str]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    versions = {}
    for name in ("gymnasium", "numpy", "envpool"):
        try:
            versions[name] = __import__(name).__version__
        except Exception:                                # noqa: BLE001 - reported as missing
            versions[name] = "missing"
    return {"nproc": str(os.cpu_count()), "cpu": model, "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), **versions}


# -- reporting --------------------------------------------------------------------------------------
def cell(found: Any, column: int) -> str:
    if isinstance(found, str):
        return found
    xs = [s[column] for s in found]
    fmt = "{:,.0f}" if column == 0 else "{:,.1f}"
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def ratio(results: dict, observation: str, n: int, a: str, b: str) -> str:
    """median over rounds of a's steps/s / b's in the same round."""
    x, y = results.get((observation, n, a)), results.get((observation, n, b))
    if not isinstance(x, list) or not isinstance(y, list):
        return ""
    return f"{statistics.median(p[0] / q[0] for p, q in zip(x, y)):.2f}x"


def report(r: dict[str, Any]) -> str:
    res, m = r["results"], r["machine"]
    load = ", ".join(f"{x:.2f}" for x in r["load"])
    lines = [f"`python benchmarks/bench_host.py {' '.join(sys.argv[1:])}`: commit {commit()}; {m['nproc']} cpus "
             f"({m['cpu']}), Python {m['python']}, gymnasium {m['gymnasium']}, numpy {m['numpy']}, envpool "
             f"{m['envpool']}; {m['date']}. {r['rounds']} rounds of ~{r['seconds']} s per contender, the "
             f"contenders of a row taking turns; median (min-max). 1-minute load average before and after each "
             f"row: {load}.", ""]
    head = "| observation | envs | " + " | ".join(CONTENDERS) + " | ours (1 server) / async | shared memory / async |"
    for title, column, unit in (("Env steps per second (all envs together)", 0, "steps/s"),
                                ("CPU per env step, us (user + system of every process of the setup)", 1, "us")):
        lines += [f"**{title}**", "", head, "|---|---:|" + "---:|" * (len(CONTENDERS) + 2)]
        for observation in r["observations"]:
            for n in r["ns"]:
                row = [cell(res[observation, n, c], column) for c in CONTENDERS]
                rel = ratio(res, observation, n, "ours, 1 server", "async") if column == 0 else ""
                shm = ratio(res, observation, n, "ours, shared memory", "async") if column == 0 else ""
                lines.append(f"| {observation} | {n} | " + " | ".join(row) + f" | {rel} | {shm} |")
        lines.append("")
    for n in r["ns"]:
        copy = res.get(("16 MB", n, "np.copyto"))
        for name, asked in (("ours, 1 server", ""), ("ours, shared memory", " (issue 40: <= 2.5x for one env)"),
                            ("ours, copy=False", " (issue 40: <= 1.5x)")):
            ours = res.get(("16 MB", n, name))
            if isinstance(copy, list) and isinstance(ours, list):
                times = statistics.median(c[0] / o[0] for c, o in zip(copy, ours))
                lines.append(f"- {n} env{'s' if n > 1 else ''}, `{name}`: an env step of 16 MB (16 MiB) takes "
                             f"{times:.2f}x a 16 MiB `np.copyto` into a warm array{asked}, median of per-round ratios "
                             f"({statistics.median(c[0] for c in copy):,.0f} copies/s).")
    lines.append("")
    return "\n".join(lines)


def load_note(load: list[float]) -> str:
    """What the load averages say: the first is the others' alone; the later ones count this run's processes too."""
    cpus = os.cpu_count() or 1
    if load[0] > 0.5 * cpus:
        return (f"\nThe machine was busy before the run (a 1-minute load average of {load[0]:.2f} on {cpus} cpus): "
                "other processes shared the cores, so the wall-clock figures are noisy.\n")
    return (f"\nThe load average before the run was {load[0]:.2f} on {cpus} cpus; the later ones count this run's "
            "own processes too, so they do not tell whether others joined in.\n")


def plot(r: dict[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    res = r["results"]
    fig, axes = plt.subplots(1, len(r["observations"]), figsize=(4 * len(r["observations"]), 3.8), squeeze=False)
    for ax, observation in zip(axes[0], r["observations"]):
        for i, name in enumerate(CONTENDERS):        # a colour per contender, the same in every panel
            points = [(n, statistics.median(s[0] for s in res[observation, n, name])) for n in r["ns"]
                      if isinstance(res.get((observation, n, name)), list)]
            if points:
                ax.plot(*zip(*points), "o-", label=name, color=f"C{i}")
        ax.set_title(observation)
        ax.set_xlabel("envs")
        ax.set_xticks(list(r["ns"]))
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("env steps / s")
    axes[0][0].legend(fontsize=7)
    m = r["machine"]
    fig.suptitle(f"Vector envs on one host, {m['nproc']} cpus ({m['date']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", nargs="?", default="driver", choices=["driver", "serve"])
    parser.add_argument("--observation", default="CartPole-v1", help="(serve role) which env")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds of 0.05 s")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="per contender per round")
    parser.add_argument("--only", action="append", help="observations (cartpole, pendulum, 28, 1, 16; repeatable)")
    parser.add_argument("--envs", type=int, action="append", help="numbers of envs (repeatable; default 1 4 8)")
    parser.add_argument("--save", action="store_true", help="write host.md's throughput section and host.png")
    parser.add_argument("--section", default="throughput",
                        help="with --save: host.md's section to write (another name keeps the full table; no plot)")
    args = parser.parse_args(argv)
    if args.role == "serve":        # an observation's name, a gymnasium id, or a shape such as 1024 or 84x84x4
        shape = OBSERVATIONS.get(args.observation, args.observation)
        if isinstance(shape, str) and shape[:1].isdigit():
            shape = tuple(int(d) for d in shape.split("x"))
        return serve(shape)
    observations = [o for o in OBSERVATIONS if not args.only or any(o.lower().startswith(x.lower()) for x in args.only)]
    rounds, seconds = (2, 0.05) if args.quick else (args.rounds, args.seconds)
    results = run(observations, args.envs or list(ENVS), rounds, seconds,
                  log=lambda s: print(s, file=sys.stderr, flush=True))
    text = report(results)
    if args.quick:
        text = "**A smoke run (`--quick`): its numbers show that the script works, nothing more.**\n\n" + text
    text += load_note(results["load"])
    print(text)
    if args.save:
        if args.section == "throughput":
            write_section(MD, "throughput", text + "\n![steps/s against envs](host.png)\n", "Same host")
            plot(results, PNG)
        else:
            write_section(MD, args.section, text, "Same host")
    return results


if __name__ == "__main__":
    main()
