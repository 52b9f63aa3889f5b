"""Transport costs side by side: small steps (this tree vs a baseline checkout, TLS vs plain,
the keepalive watcher on vs off) and 16 MiB observations / actions (ours vs the official client).

Every server and client runs in its own subprocess; the clients take turns, round after
round, and the medians are compared (the machines are noisy: only numbers taken in one
run are compared)::

    python benchmarks/bench_transport.py --base /path/to/old/checkout   # vs that tree too (repeatable)
    python benchmarks/bench_transport.py --quick                        # a smoke run

Cases: ``small``: ``DmRpcEnv.step`` with a 4-float observation and a Discrete action;
``vector N``: the same world stepped by a ``DmRpcVectorEnv`` of N envs (``--envs``, default 8;
steps/s and CPU are per env step), on one shared connection (this tree's default) or a connection
each, and a baseline's (its client and server), and its client against this tree's server;
``small + info + seeds``: the same world returning a 3-key ``info`` each step, and a seeded
``reset`` every 100 steps (this tree carries the info and sends the seed; a baseline drops both);
``obs 16 MiB``: a 16 MiB uint8 observation each step; ``action 16 MiB``: a 16 MiB uint8
action each step. ``ours`` is ``DmRpcEnv``; ``official`` is dm-env-rpc's ``DmEnvAdaptor``
over a grpcio channel with its message limits lifted. All servers are ours.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from roles import Role

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
MIB16 = 16 << 20


# -- subprocess roles ------------------------------------------------------------------------------
def serve(obs_bytes: int, action_bytes: int, tls: str | None, info: bool = False, unix: str | None = None) -> None:
    """Serve a constant env: uint8 observation of ``obs_bytes`` (4 floats if 0), uint8 action of
    ``action_bytes`` (Discrete(2) if 0), with a small ``info`` each step if ``info``, on TCP
    (and on the Unix socket ``unix`` too); print ``ADDRESS`` and its addresses, serve until stdin closes."""
    import gymnasium as gym

    from dmrpc_gym.server import Server

    class Constant(gym.Env):
        def __init__(self):
            if obs_bytes:
                self.observation_space = gym.spaces.Box(0, 255, (obs_bytes,), np.uint8)
                self.obs = (np.arange(obs_bytes) % 251).astype(np.uint8)
            else:
                self.observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
                self.obs = np.zeros(4, np.float32)
            self.action_space = (gym.spaces.Box(0, 255, (action_bytes,), np.uint8) if action_bytes
                                 else gym.spaces.Discrete(2))

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return self.obs, {}

        def step(self, action):
            self.t += 1
            return self.obs, 1.0, False, False, ({"t": self.t, "lives": 3, "x": 0.5} if info else {})

    options = {}
    if tls:
        options["tls"] = tuple(tls.split(","))
    if unix:
        options["address"] = ["127.0.0.1:0", f"unix:{unix}"]
    server = Server(Constant, kind="gym", **options).start()
    print("ADDRESS", *getattr(server, "addresses", [server.address]), flush=True)   # a baseline tree has one
    for _ in sys.stdin:                      # each line: report the CPU seconds used so far
        print(time.process_time(), flush=True)
    server.stop(0)


def client(impl: str, address: str, tls: str | None, action_bytes: int, watcher: bool, envs: int,
           reset_every: int = 0, separate: bool = False) -> None:
    """Step an env on command: each stdin line ``SECONDS`` answers ``STEPS ELAPSED CPU`` (env steps);
    ``reset_every``: a seeded reset every that many steps (counted as a step); ``separate``: a
    vector env's sub-envs each on a connection of its own."""
    action = np.full(action_bytes, 7, np.uint8) if action_bytes else np.int64(1)
    if envs:
        import gymnasium as gym

        import dmrpc_gym  # noqa: F401 - registers dmrpc/Remote-v0

        env = gym.make_vec("dmrpc/Remote-v0", num_envs=envs, vectorization_mode="vector_entry_point",
                           address=address, **({"share_connections": False} if separate else {}))
        env.reset()
        step, arg = env.step, np.ones(envs, np.int64)
    elif impl == "official":
        import grpc
        from dm_env_rpc.v1 import connection, dm_env_adaptor

        limits = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        channel = grpc.insecure_channel(address, options=limits)
        conn = connection.Connection(channel)
        env, _ = dm_env_adaptor.create_and_join_world(conn, {}, {})
        env.reset()
        step, arg = env.step, {"action": action if action_bytes else np.int32(1)}
    else:
        from dmrpc_gym import DmRpcEnv  # the public name: a baseline checkout may lay modules out differently

        env = DmRpcEnv(address, **({"tls": tls} if tls else {}))
        env.reset()
        if not watcher:
            env.connection._transport._stream.connection._watcher.stop()
        step, arg = env.step, action
        if reset_every:
            count = [0]

            def step(action, _step=env.step):
                count[0] += 1
                return env.reset(seed=count[0]) if count[0] % reset_every == 0 else _step(action)
    step(arg)
    print("READY", flush=True)
    for line in sys.stdin:
        seconds = float(line)
        n, start, cpu = 0, time.perf_counter(), time.process_time()
        while n < 3 or time.perf_counter() - start < seconds:
            step(arg)
            n += 1
        print(n * max(envs, 1), time.perf_counter() - start, time.process_time() - cpu, flush=True)
    env.close()


# -- the driver ----------------------------------------------------------------------------------------
def role(tree: str, *args: str) -> Role:
    """A role of this script in a subprocess, with ``tree`` first on its ``PYTHONPATH``."""
    return Role(__file__, {**os.environ, "PYTHONPATH": tree, "GRPC_VERBOSITY": "ERROR"}, *args)


def _label(tree: str) -> str:
    """A baseline checkout's name in the tables: its commit, else its folder."""
    found = subprocess.run(["git", "-C", tree, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() or os.path.basename(os.path.abspath(tree))


def certificate(folder: str) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (``openssl`` command)."""
    if shutil.which("openssl") is None:
        raise SystemExit("the TLS case needs the openssl command")
    cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def measure(cases: dict[str, tuple[Role, Role]], rounds: int, seconds: float) -> dict[str, tuple[float, ...]]:
    """Per case (client, server): median steps/s, client and server CPU us per step, taking turns."""
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
    names = list(cases)
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:   # each case leads a round in turn
            proc, server = cases[name]
            before = float(server.ask("cpu"))
            steps, elapsed, cpu = proc.ask(str(seconds)).split()
            served = float(server.ask("cpu")) - before
            n = int(steps)
            samples[name].append((n / float(elapsed), float(cpu) / n * 1e6, served / n * 1e6))
    return {name: tuple(statistics.median(column) for column in zip(*rows)) for name, rows in samples.items()}


def table(title: str, rates: dict[str, tuple[float, ...]], pairs: list[tuple[str, str, str]]) -> None:
    print(f"\n{title}\n")
    print("| case | steps/s (wall) | client CPU us/step | server CPU us/step |\n|---|---:|---:|---:|")
    for name, (rate, client_cpu, server_cpu) in rates.items():
        print(f"| {name} | {rate:,.1f} | {client_cpu:,.0f} | {server_cpu:,.0f} |")
    if pairs:
        print("\n| ratio | steps/s | client+server CPU per step |\n|---|---:|---:|")
        for label, a, b in pairs:
            cost_a, cost_b = rates[a][1] + rates[a][2], rates[b][1] + rates[b][2]
            print(f"| {label} | {rates[a][0] / rates[b][0]:.2f}x | {cost_a / cost_b:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", nargs="?", default="driver", choices=["driver", "serve", "client"])
    parser.add_argument("--base", action="append", default=[],
                        help="a checkout of a baseline (repeatable; its client and server measured too)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-small", action="store_true")
    parser.add_argument("--no-official", action="store_true", help="16 MiB cases: leave out the official client")
    parser.add_argument("--envs", type=int, default=8, help="envs of the vector case (0: no vector case)")
    # roles
    parser.add_argument("--obs-bytes", type=int, default=0)
    parser.add_argument("--action-bytes", type=int, default=0)
    parser.add_argument("--tls")
    parser.add_argument("--impl", default="ours")
    parser.add_argument("--address")
    parser.add_argument("--no-watcher", action="store_true")
    parser.add_argument("--vector", type=int, default=0, help="(client role) step a vector env of this many")
    parser.add_argument("--info", action="store_true", help="(serve role) a 3-key info every step")
    parser.add_argument("--unix", help="(serve role) listen on this Unix socket too")
    parser.add_argument("--reset-every", type=int, default=0, help="(client role) a seeded reset every N steps")
    parser.add_argument("--separate", action="store_true", help="(client role) --vector on a connection per env")
    args = parser.parse_args()
    if args.role == "serve":
        return serve(args.obs_bytes, args.action_bytes, args.tls, args.info, args.unix)
    if args.role == "client":
        return client(args.impl, args.address, args.tls, args.action_bytes, not args.no_watcher, args.vector,
                      args.reset_every, args.separate)

    rounds = args.rounds or (2 if args.quick else 7)
    seconds = args.seconds or (0.2 if args.quick else 0.5)
    procs: list[Role] = []

    def start(tree: str, *args: str) -> Role:
        procs.append(role(tree, *args))
        return procs[-1]

    def address(proc: Role) -> str:
        return proc.first.split()[1]

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {rounds} rounds x {seconds} s per case")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if not args.skip_small:
                cert, key = certificate(tmp)
                plain = start(TREE, "serve", "--unix", os.path.join(tmp, "plain.sock"))
                secure = start(TREE, "serve", "--tls", f"{cert},{key}")
                vector = f"vector {args.envs}"
                cases = {"small, this tree": (start(TREE, "client", "--address", address(plain)), plain),
                         "small, this tree, TLS":
                             (start(TREE, "client", "--address", address(secure), "--tls", cert), secure),
                         "small, this tree, no keepalive watcher":
                             (start(TREE, "client", "--address", address(plain), "--no-watcher"), plain),
                         "small, this tree, unix:":
                             (start(TREE, "client", "--address", plain.first.split()[2]), plain)}
                pairs = [("TLS / plain", "small, this tree, TLS", "small, this tree"),
                         ("unix: / TCP loopback (one server)", "small, this tree, unix:", "small, this tree"),
                         ("watcher on / off", "small, this tree", "small, this tree, no keepalive watcher")]
                if args.envs:
                    cases[f"{vector}, this tree"] = (start(TREE, "client", "--address", address(plain),
                                                           "--vector", str(args.envs)), plain)
                    cases[f"{vector}, this tree, a connection each"] = (
                        start(TREE, "client", "--address", address(plain), "--vector", str(args.envs), "--separate"),
                        plain)
                    pairs.append((f"{vector}: one connection / a connection each", f"{vector}, this tree",
                                  f"{vector}, this tree, a connection each"))
                chatty = ["--reset-every", "100"]
                if args.base:
                    ours_info = start(TREE, "serve", "--info")
                    cases["small + info + seeds, this tree"] = (
                        start(TREE, "client", "--address", address(ours_info), *chatty), ours_info)
                for tree in args.base:
                    label = _label(tree)
                    base = start(tree, "serve")
                    cases[f"small, {label}"] = (start(tree, "client", "--address", address(base)), base)
                    pairs.insert(0, (f"this tree / {label}", "small, this tree", f"small, {label}"))
                    base_info = start(tree, "serve", "--info")
                    cases[f"small + info + seeds, {label}"] = (
                        start(tree, "client", "--address", address(base_info), *chatty), base_info)
                    pairs.insert(1, (f"info + seeds: this tree / {label}", "small + info + seeds, this tree",
                                     f"small + info + seeds, {label}"))
                    if args.envs:      # its client and its server, and its client against this tree's server
                        cases[f"{vector}, {label}"] = (start(tree, "client", "--address", address(base),
                                                             "--vector", str(args.envs)), base)
                        pairs.insert(1, (f"{vector}: this tree / {label}", f"{vector}, this tree", f"{vector}, {label}"))
                        cases[f"{vector}, {label} client"] = (start(tree, "client", "--address", address(plain),
                                                                    "--vector", str(args.envs)), plain)
                        pairs.insert(2, (f"{vector}: this tree / {label} client (one server)",
                                         f"{vector}, this tree", f"{vector}, {label} client"))
                table("(c) small steps (DmRpcEnv, our server)", measure(cases, rounds, seconds), pairs)
            if not args.skip_large:
                obs = start(TREE, "serve", "--obs-bytes", str(MIB16))
                act = start(TREE, "serve", "--action-bytes", str(MIB16))
                big = ["--action-bytes", str(MIB16)]
                cases = {"obs 16 MiB, ours": (start(TREE, "client", "--address", address(obs)), obs),
                         "action 16 MiB, ours": (start(TREE, "client", "--address", address(act), *big), act)}
                pairs = []
                if not args.no_official:
                    cases["obs 16 MiB, official"] = (
                        start(TREE, "client", "--address", address(obs), "--impl", "official"), obs)
                    cases["action 16 MiB, official"] = (
                        start(TREE, "client", "--address", address(act), "--impl", "official", *big), act)
                    pairs = [("obs: ours / official", "obs 16 MiB, ours", "obs 16 MiB, official"),
                             ("action: ours / official", "action 16 MiB, ours", "action 16 MiB, official")]
                for tree in args.base:
                    label = _label(tree)
                    base_obs = start(tree, "serve", "--obs-bytes", str(MIB16))
                    base_act = start(tree, "serve", "--action-bytes", str(MIB16))
                    cases[f"obs 16 MiB, {label}"] = (start(tree, "client", "--address", address(base_obs)), base_obs)
                    cases[f"action 16 MiB, {label}"] = (
                        start(tree, "client", "--address", address(base_act), *big), base_act)
                    pairs += [(f"obs: this tree / {label}", "obs 16 MiB, ours", f"obs 16 MiB, {label}"),
                              (f"action: this tree / {label}", "action 16 MiB, ours", f"action 16 MiB, {label}")]
                table("(b) 16 MiB payloads (our server; official = DmEnvAdaptor over grpcio, limits lifted)",
                      measure(cases, max(2, rounds // 2), seconds * 2), pairs)
    finally:
        for proc in reversed(procs):
            proc.close()


if __name__ == "__main__":
    main()
