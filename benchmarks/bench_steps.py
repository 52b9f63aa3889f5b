"""Steps per second: the official DmEnvAdaptor, DmRpcEnv, DmRpcVectorEnv and friends, side by side.

One run starts the trivial servers of ``servers.py`` in subprocesses (one
written with the official package, one with ours), then measures every case
in turn, round after round (A, B, C, A, B, C...), and reports medians: these
machines are noisy, so only numbers taken side by side are compared.

    python benchmarks/bench_steps.py            # the full run (about two minutes)
    python benchmarks/bench_steps.py --quick    # a smoke run (a few seconds of measuring)
    python benchmarks/bench_steps.py --save     # also rewrite README.md and steps_vs_n.png here

Cases (each on both servers unless said otherwise):

- ``adaptor``: the official ``DmEnvAdaptor.step`` (grpcio's sync client).
- ``single``: ``DmRpcEnv.step``.
- ``vector N``: ``gym.make_vec("dmrpc/Remote-v0", num_envs=N, vectorization_mode="vector_entry_point")``.
- ``turns 8``: eight ``DmRpcEnv`` stepped one after the other.
- ``sync 8`` / ``async 8``: gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv`` over ``DmRpcEnv`` (our server).
- ``raw aio``: a ``grpc.aio`` write/read loop of pre-serialized requests, the Python ceiling.
- throughput: 84x84x3 uint8 and 1e6-element float32 observations, ``adaptor`` vs ``single``.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")   # grpc core's INFO lines (GOAWAY on close) are noise here
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import servers  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)

OBS_SMALL = ((4,), "float32")
OBS_IMAGE = ((84, 84, 3), "uint8")
OBS_BIG = ((1_000_000,), "float32")
VECTOR_NS = (1, 4, 8, 16)


# -- cases: open(), run(k) (k calls), close(); `per_call` env steps per call ---------
class Case:
    """One thing to time. ``run(k)`` makes ``k`` calls of ``per_call`` env steps each."""

    per_call = 1

    def __init__(self, name: str, server: str, address: str, obs_bytes: int = 0):
        self.name, self.server, self.address, self.obs_bytes = name, server, address, obs_bytes

    @property
    def label(self) -> str:
        return f"{self.name} @{self.server}"

    def open(self) -> None: ...
    def run(self, k: int) -> None: ...
    def close(self) -> None: ...


class Adaptor(Case):
    """The official client: ``dm_env_rpc.v1.dm_env_adaptor.DmEnvAdaptor``."""

    def open(self):
        from dm_env_rpc.v1 import connection, dm_env_adaptor
        self.conn = connection.create_secure_channel_and_connect(self.address)
        self.env, self.world = dm_env_adaptor.create_and_join_world(self.conn, {}, {})
        self.env.reset()
        self.action = {"action": np.int32(1)}

    def run(self, k):
        step, action = self.env.step, self.action
        for _ in range(k):
            step(action)

    def close(self):
        from dm_env_rpc.v1 import dm_env_rpc_pb2
        self.env.close()
        self.conn.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=self.world))
        self.conn.close()


class Single(Case):
    """``DmRpcEnv.step``."""

    def open(self):
        from dmrpc_gym.client.env import DmRpcEnv
        self.env = DmRpcEnv(self.address)
        self.env.reset()

    def run(self, k):
        step = self.env.step
        for _ in range(k):
            step(1)

    def close(self):
        self.env.close()


class Turns(Case):
    """``n`` single ``DmRpcEnv`` stepped one after the other."""

    def __init__(self, name, server, address, n: int):
        super().__init__(name, server, address)
        self.per_call = n

    def open(self):
        from dmrpc_gym.client.env import DmRpcEnv
        self.envs = [DmRpcEnv(self.address) for _ in range(self.per_call)]
        for env in self.envs:
            env.reset()

    def run(self, k):
        steps = [env.step for env in self.envs]
        for _ in range(k):
            for step in steps:
                step(1)

    def close(self):
        for env in self.envs:
            env.close()


class Vector(Case):
    """``gym.make_vec`` in one of its modes over ``dmrpc/Remote-v0``."""

    def __init__(self, name, server, address, n: int, mode: str):
        super().__init__(name, server, address)
        self.per_call, self.mode = n, mode

    def open(self):
        import gymnasium as gym
        import dmrpc_gym  # noqa: F401  (registers dmrpc/Remote-v0)
        extra = {"vector_kwargs": {"context": "spawn"}} if self.mode == "async" else {}
        self.envs = gym.make_vec("dmrpc/Remote-v0", num_envs=self.per_call, vectorization_mode=self.mode,
                                 address=self.address, **extra)
        self.envs.reset(seed=0)
        self.actions = np.ones(self.per_call, dtype=np.int64)

    def run(self, k):
        step, actions = self.envs.step, self.actions
        for _ in range(k):
            step(actions)

    def close(self):
        self.envs.close()


class RawAio(Case):
    """A ``grpc.aio`` stream: write a pre-serialized StepRequest, read the raw answer; repeat."""

    loop: asyncio.AbstractEventLoop | None = None   # one for all: grpc.aio's poller binds to the first

    def open(self):
        if RawAio.loop is None:
            RawAio.loop = asyncio.new_event_loop()
        self.loop = RawAio.loop
        self.loop.run_until_complete(self._open())

    async def _open(self):
        import grpc

        from dmrpc_gym.protocol import tensors
        from dmrpc_gym.protocol.wire import METHOD_PATH, pb
        self.channel = grpc.aio.insecure_channel(self.address)
        self.call = self.channel.stream_stream(METHOD_PATH, request_serializer=None,
                                               response_deserializer=None)()

        async def send(**payload):
            await self.call.write(pb.EnvironmentRequest(**payload).SerializeToString())
            return pb.EnvironmentResponse.FromString(await self.call.read())

        world = (await send(create_world=pb.CreateWorldRequest())).create_world.world_name
        specs = (await send(join_world=pb.JoinWorldRequest(world_name=world))).join_world.specs
        (uid, spec), = specs.actions.items()
        step = pb.StepRequest(requested_observations=sorted(
            u for u, s in specs.observations.items() if s.name in ("observation", "reward")))
        tensors.pack_into(step.actions[uid], np.array(1, tensors.np_dtype(spec.dtype)))
        self.request = pb.EnvironmentRequest(step=step).SerializeToString()

    async def _run(self, k):
        write, read, request = self.call.write, self.call.read, self.request
        for _ in range(k):
            await write(request)
            await read()

    def run(self, k):
        self.loop.run_until_complete(self._run(k))

    def close(self):
        self.loop.run_until_complete(self.channel.close())     # ends the call too

    @classmethod
    def shutdown(cls) -> None:
        """Close the shared loop once every RawAio case is closed."""
        if cls.loop is None:
            return

        async def drain():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        cls.loop.run_until_complete(drain())
        cls.loop.close()
        cls.loop = None


# -- measuring ------------------------------------------------------------------------
def calibrate(case: Case, seconds: float) -> int:
    """Calls of ``case.run`` that last about ``seconds`` (after a warm-up)."""
    case.run(3)
    k, elapsed = 1, 0.0
    while elapsed < seconds / 4:
        k *= 2
        start = time.perf_counter()
        case.run(k)
        elapsed = time.perf_counter() - start
    return max(1, int(k * seconds / elapsed))


def measure(cases: list[Case], rounds: int, seconds: float, log: Callable[[str], None]) -> dict[str, list[float]]:
    """Env steps per second of every case, ``rounds`` samples each, taken in turn."""
    calls = {}
    for case in cases:
        calls[case.label] = calibrate(case, seconds)
    samples: dict[str, list[float]] = {case.label: [] for case in cases}
    for r in range(rounds):
        for case in cases:
            k = calls[case.label]
            start = time.perf_counter()
            case.run(k)
            samples[case.label].append(k * case.per_call / (time.perf_counter() - start))
        log(f"  round {r + 1}/{rounds} done")
    return samples


def paired_ratio(samples: dict[str, list[float]], a: str, b: str) -> float:
    """Median over rounds of ``a / b`` measured in the same round."""
    return statistics.median(x / y for x, y in zip(samples[a], samples[b]))


# -- machine ----------------------------------------------------------------------------
def machine() -> dict[str, str]:
    import grpc
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": str(os.cpu_count()), "cpu": model, "python": platform.python_version(),
            "grpcio": grpc.__version__, "date": datetime.date.today().isoformat()}


# -- the run ------------------------------------------------------------------------------
def build_cases(addr: dict[str, str], quick: bool) -> list[Case]:
    cases: list[Case] = []
    for server in ("official", "ours"):
        a = addr[server, OBS_SMALL]
        cases += [Adaptor("adaptor", server, a), Single("single", server, a), RawAio("raw aio", server, a)]
        cases += [Vector(f"vector {n}", server, a, n, "vector_entry_point") for n in VECTOR_NS]
        cases += [Turns("turns 8", server, a, 8)]
    a = addr["ours", OBS_SMALL]
    cases += [Vector("sync 8", "ours", a, 8, "sync"), Vector("async 8", "ours", a, 8, "async")]
    for server in ("official", "ours"):
        for obs, tag in ((OBS_IMAGE, "84x84x3 u8"), (OBS_BIG, "1e6 f32")):
            nbytes = int(np.prod(obs[0])) * np.dtype(obs[1]).itemsize
            cases += [Adaptor(f"adaptor {tag}", server, addr[server, obs], nbytes),
                      Single(f"single {tag}", server, addr[server, obs], nbytes)]
    return cases


def run(quick: bool = False, rounds: int | None = None, seconds: float | None = None,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Start the servers, measure every case, stop the servers: the results."""
    rounds = rounds or (2 if quick else 7)
    seconds = seconds or (0.04 if quick else 0.3)
    procs, addr = [], {}
    try:
        for server in ("official", "ours"):
            for obs in (OBS_SMALL, OBS_IMAGE, OBS_BIG):
                proc, address = servers.spawn(server, obs[0], obs[1])
                procs.append(proc)
                addr[server, obs] = address
        cases = build_cases(addr, quick)
        opened = []
        try:
            for case in cases:
                case.open()
                opened.append(case)
            log(f"measuring {len(cases)} cases, {rounds} rounds of ~{seconds} s each")
            samples = measure(cases, rounds, seconds, log)
        finally:
            for case in reversed(opened):
                try:
                    case.close()
                except Exception as err:  # report, keep closing
                    log(f"  closing {case.label}: {err!r}")
            RawAio.shutdown()
    finally:
        for proc in procs:
            proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(10)
            except Exception:
                proc.kill()
    bytes_of = {case.label: case.obs_bytes for case in cases}
    return {"samples": samples, "bytes": bytes_of, "machine": machine(), "rounds": rounds, "seconds": seconds}


def ratios(samples: dict[str, list[float]]) -> list[tuple[str, str, str]]:
    """The ratios the issue asks for: ``(what, a, b)``; each is median(a/b) over rounds."""
    out = []
    for server in ("official", "ours"):
        out.append((f"single env / DmEnvAdaptor ({server} server)", f"single @{server}", f"adaptor @{server}"))
    for server in ("official", "ours"):
        out.append((f"make_vec(8) / eight singles in turn ({server} server)", f"vector 8 @{server}",
                    f"turns 8 @{server}"))
    out.append(("make_vec(8) / AsyncVectorEnv(8) (ours)", "vector 8 @ours", "async 8 @ours"))
    out.append(("make_vec(8) / SyncVectorEnv(8) (ours)", "vector 8 @ours", "sync 8 @ours"))
    for server in ("official", "ours"):
        out.append((f"single env / raw aio ceiling ({server} server)", f"single @{server}", f"raw aio @{server}"))
    for server in ("official", "ours"):
        for tag in ("84x84x3 u8", "1e6 f32"):
            out.append((f"single / adaptor, {tag} obs ({server} server)", f"single {tag} @{server}",
                        f"adaptor {tag} @{server}"))
    return [r for r in out if r[1] in samples and r[2] in samples]


def report(results: dict[str, Any]) -> str:
    """The results as text tables (steps/s, throughput, ratios)."""
    samples, nbytes = results["samples"], results["bytes"]
    m = results["machine"]
    lines = [f"machine: {m['nproc']} cpus, {m['cpu']}, Python {m['python']}, grpcio {m['grpcio']}, {m['date']}",
             f"{results['rounds']} interleaved rounds; medians (min-max)", "",
             f"{'case':<32}{'steps/s':>10}{'min':>10}{'max':>10}{'MB/s':>10}"]
    for label, xs in samples.items():
        med = statistics.median(xs)
        mbs = f"{med * nbytes[label] / 1e6:10.1f}" if nbytes[label] else ""
        lines.append(f"{label:<32}{med:10.0f}{min(xs):10.0f}{max(xs):10.0f}{mbs}")
    lines += ["", f"{'ratio (median of per-round ratios)':<64}{'x':>8}"]
    for what, a, b in ratios(samples):
        lines.append(f"{what:<64}{paired_ratio(samples, a, b):8.2f}")
    return "\n".join(lines)


def codec_report(quick: bool) -> str:
    """The tensor codec table of ``bench_codec.py`` (another benchmark of this folder)."""
    try:
        from bench_codec import codec_table, format_table
    except ImportError as err:   # the hook: bench_codec.py provides codec_table() and format_table()
        return f"(codec table unavailable: {err})"
    rows = codec_table(repeats=2 if quick else 7)
    return format_table(rows)


# -- README and plot ------------------------------------------------------------------------
def plot(results: dict[str, Any], path: str) -> None:
    """steps/s against N for DmRpcVectorEnv on each server, with the single-env references."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    samples = results["samples"]
    med = {k: statistics.median(v) for k, v in samples.items()}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for server, color in (("official", "tab:blue"), ("ours", "tab:orange")):
        ns = [n for n in VECTOR_NS if f"vector {n} @{server}" in med]
        ax.plot(ns, [med[f"vector {n} @{server}"] for n in ns], "o-", color=color,
                label=f"DmRpcVectorEnv ({server} server)")
        for name, style in (("adaptor", ":"), ("single", "--")):
            if f"{name} @{server}" in med:
                ax.axhline(med[f"{name} @{server}"], linestyle=style, color=color, alpha=0.7,
                           label=f"{'DmEnvAdaptor' if name == 'adaptor' else 'DmRpcEnv'} ({server} server)")
    for name, marker in (("turns 8", "s"), ("sync 8", "^"), ("async 8", "v")):
        label = f"{name} @ours"
        if label in med:
            ax.plot([8], [med[label]], marker, color="tab:gray", label=f"{name} (ours server)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(VECTOR_NS), [str(n) for n in VECTOR_NS])
    ax.set_xlabel("N (sub-envs)")
    ax.set_ylabel("env steps / s")
    m = results["machine"]
    ax.set_title(f"Trivial server, loopback, {m['nproc']} cpus ({m['date']})")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


MEMORY_SECTION = "## Resident memory"


def kept_section(path: str, heading: str) -> str:
    """The section of the current README starting at ``heading`` (written by another script), or ''."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    at = text.find(heading)
    return "\n" + text[at:] if at >= 0 else ""


def write_readme(results: dict[str, Any], text: str, codec: str, path: str) -> None:
    m = results["machine"]
    samples = results["samples"]
    rows = ["| case | steps/s (median) | min | max | MB/s |", "|---|---:|---:|---:|---:|"]
    for label, xs in samples.items():
        med = statistics.median(xs)
        nb = results["bytes"][label]
        rows.append(f"| {label} | {med:.0f} | {min(xs):.0f} | {max(xs):.0f} | "
                    f"{f'{med * nb / 1e6:.1f}' if nb else ''} |")
    ratio_rows = ["| ratio (median of per-round ratios) | x |", "|---|---:|"]
    for what, a, b in ratios(samples):
        ratio_rows.append(f"| {what} | {paired_ratio(samples, a, b):.2f} |")
    doc = f"""# Benchmarks

Not tests: numbers from one machine, taken side by side in one run, since
these machines are noisy. Regenerate everything here with

```bash
python benchmarks/bench_steps.py --save     # steps/s, ratios, codec table; rewrites this file and the plot
python benchmarks/memory.py --save          # resident memory over 1e5 steps (its section below)
python benchmarks/bench_codec.py            # the tensor codec alone
python benchmarks/bench_transport.py        # 16 MiB payloads vs the official client, TLS, keepalive (transport.md); info and seeds (info.md)
python benchmarks/bench_concurrency.py      # slow worlds stepped concurrently, process workers (concurrency.md)
python benchmarks/bench_dm_env.py --save   # connect_dm_env vs DmEnvAdaptor; wire cost of dm_control vs gymnasium (dm_env.md)
python benchmarks/fidelity_table.py --write  # the differential fidelity suite's table of envs (fidelity.md)
python benchmarks/bench_render_cost.py --save  # render_mode='rgb_array' without render() vs none (fidelity.md)
python benchmarks/bench_served_local.py --save # served / local steps/s, one env of each family (fidelity.md)
python benchmarks/bench_metrics.py --tree /path/to/old/checkout  # Prometheus metrics on / off per step (metrics.md)
python benchmarks/bench_counts.py --tree /path/to/old/checkout   # Python calls (and --callgrind: instructions) per small step (counts.md)
python benchmarks/bench_sb3.py --tree /path/to/old/checkout      # SB3 vector envs over dm_env_rpc, checkouts side by side (sb3.md)
python benchmarks/bench_host.py --save    # vector envs on one host: gymnasium sync/async, EnvPool, ours; steps/s and CPU (host.md, host.png)
python benchmarks/copies.py               # the copies of a 16 MiB tensor on each end, counted (host.md)
python benchmarks/profile_host.py          # where a vector step of 4 CartPoles goes: CPU split, profiles, sends (host.md)
```

`servers.py` holds the trivial servers (started in subprocesses): an
observation `observation` (Box float32 [4] unless said), a `reward`, an
action `action` (Discrete(2)); never terminating. `official` is written with
the official `dm-env-rpc` package and grpcio's sync server (answers kept
serialized); `ours` is `dmrpc_gym.server.Server` serving `TrivialEnv`.
Each case is measured for ~{results['seconds']} s per round, all cases in
turn, {results['rounds']} rounds; the table gives medians and ratios are
medians of per-round ratios.

## Last results

Machine: {m['nproc']} cpus ({m['cpu']}), Python {m['python']}, grpcio {m['grpcio']}; {m['date']}.

{chr(10).join(rows)}

{chr(10).join(ratio_rows)}

![steps/s against N](steps_vs_n.png)

Cases: `adaptor` = official `DmEnvAdaptor.step`; `single` = `DmRpcEnv.step`;
`vector N` = `gym.make_vec("dmrpc/Remote-v0", num_envs=N,
vectorization_mode="vector_entry_point")` (all N steps in flight at once);
`turns 8` = eight `DmRpcEnv` stepped one after another; `sync 8` / `async 8`
= gymnasium's `SyncVectorEnv` / `AsyncVectorEnv` (spawned workers) over
`DmRpcEnv`; `raw aio` = a `grpc.aio` write/read loop of pre-serialized
requests (what grpcio's Python layer allows at best); the `84x84x3 u8` and
`1e6 f32` rows step servers whose observation is that big.

## Tensor codec (from `bench_codec.py`)

```
{codec}
```

"""
    memory = kept_section(path, MEMORY_SECTION)      # read before the file is rewritten
    with open(path, "w") as f:
        f.write(doc + memory)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 7, quick 2)")
    parser.add_argument("--seconds", type=float, help="seconds per case per round (default 0.3)")
    parser.add_argument("--save", action="store_true", help="rewrite README.md and steps_vs_n.png here")
    parser.add_argument("--no-codec", action="store_true", help="skip the codec table")
    args = parser.parse_args(argv)
    results = run(args.quick, args.rounds, args.seconds, log=lambda s: print(s, file=sys.stderr, flush=True))
    text = report(results)
    print(text)
    codec = "" if args.no_codec else codec_report(args.quick)
    if codec:
        print("\ntensor codec (bench_codec.py):")
        print(codec)
    if args.save:
        plot(results, os.path.join(HERE, "steps_vs_n.png"))
        write_readme(results, text, codec, os.path.join(HERE, "README.md"))
        print(f"\nwrote {os.path.join(HERE, 'README.md')} and steps_vs_n.png")
    return results


if __name__ == "__main__":
    main()
