"""The copies of a large tensor on each end, counted: from the env's array to the user's array (issue 40).

Client and server run in subprocesses with ``copy_counter.c`` preloaded (built here with the C
compiler ``cc``): every ``memcpy`` / ``memmove`` of at least ``--min`` bytes is counted with
its size, and every byte through ``send``/``recv`` (one copy by the kernel each: user memory
to the socket's buffer, or back). A copy is the tensor's bytes once: 16 MiB copied in 64
pieces of 256 KiB is one copy. Counts, not times: the machine's load cannot move them.

    python benchmarks/copies.py                  # the table (benchmarks/host.md, "Copies")
    python benchmarks/copies.py --trace          # and where each counted copy comes from (stderr)

``--trace`` is for finding the places: in a run of client and server it was seen to print fewer
lines than the copies counted (not looked into); the counts in the table are the figures.

Cases: ``observation``: ``DmRpcEnv.step`` against a server whose observation is ``--mib``
MiB of uint8 (``--dtype``; a Discrete action), over TCP (``shared_memory=False``); ``action``: the same
with a uint8 action of that size (a 4-float observation); ``vector N``: the observation case through a
``DmRpcVectorEnv`` of N envs (which stacks its sub-envs' observations into one batch array; copies per env
step); ``shm CASE``: the case with shared memory (as the clients come: on), ``shm vector N copy=False``:
views of the region; ``regions``: the building block alone (``transport.shm_regions``: the observation
written into a region by the env's process and taken out as an array the user owns by the other, a byte
each way over a Unix socket to say when; no gRPC). ``memcpy``: ``np.copyto`` of the same size into a warm
array, counted the same way (the scale: 1).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from roles import Role

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
SOURCE = os.path.join(HERE, "copy_counter.c")


def build(folder: str) -> str:
    """``copy_counter.c`` built into ``folder``: the library's path (``SystemExit`` without ``cc``)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("copies.py needs a C compiler (cc or gcc) to build copy_counter.c")
    out = os.path.join(folder, "copy_counter.so")
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", out, SOURCE, "-ldl"], check=True)
    return out


def trace(on: bool) -> None:
    """Say where each counted copy comes from (stderr) from now on, or no more (with ``COPY_COUNTER_TRACE=1``)."""
    ctypes.CDLL(None).copy_counter_trace(int(on))


def counters() -> tuple[int, int, int, int]:
    """This process's ``(copies, bytes copied, bytes sent, bytes received)`` so far (the library preloaded)."""
    out = (ctypes.c_long * 4)()
    ctypes.CDLL(None).copy_counter_read(out)
    return tuple(out)


class Env:
    """``observation_bytes`` of ``dtype`` (4 floats if 0) and a uint8 action of ``action_bytes`` (Discrete(2) if 0)."""

    def __init__(self, observation_bytes: int = 0, action_bytes: int = 0, dtype: str = "uint8"):
        import gymnasium as gym
        if observation_bytes:
            dtype = np.dtype(dtype)
            self.observation_space = gym.spaces.Box(0, 255, (observation_bytes // dtype.itemsize,), dtype)
            self.obs = (np.arange(observation_bytes // dtype.itemsize) % 251).astype(dtype)
        else:
            self.observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
            self.obs = np.zeros(4, np.float32)
        self.action_space = gym.spaces.Box(0, 255, (action_bytes,), np.uint8) if action_bytes else gym.spaces.Discrete(2)
        self.metadata, self.render_mode, self.spec, self.np_random = {}, None, None, None

    def reset(self, *, seed=None, options=None):
        return self.obs, {}

    def step(self, action):
        return self.obs, 1.0, False, False, {}

    def close(self):
        pass


# -- roles -----------------------------------------------------------------------------------------
def answer_counters() -> None:
    """Each stdin line answers this process's counters (``trace`` / ``quiet`` turn tracing on / off first)."""
    for line in sys.stdin:
        if line.strip() in ("trace", "quiet"):
            trace(line.strip() == "trace")
        print(*counters(), flush=True)


def step_on_command(step) -> None:
    """Each stdin line ``N`` calls ``step`` ``N`` times, keeping what it returns, and answers the counters' change."""
    kept = []                      # the user keeps every observation: a view overwritten later would show
    print("READY", flush=True)
    for line in sys.stdin:
        trace(True)
        before = counters()
        for _ in range(int(line)):
            kept.append(step())
        after = counters()
        trace(False)
        print(*(b - a for a, b in zip(before, after)), flush=True)
        kept.clear()


def serve(observation_bytes: int, action_bytes: int, dtype: str) -> None:
    """Serve :class:`Env`; print its address; answer the counters (:func:`answer_counters`)."""
    import functools

    import gymnasium as gym

    from dmrpc_gym.server import Server

    class Served(Env, gym.Env):
        pass

    server = Server(functools.partial(Served, observation_bytes, action_bytes, dtype), kind="gym").start()
    print("ADDRESS", server.address, flush=True)
    answer_counters()
    server.stop(0)


def client(address: str, action_bytes: int, vector: int, shared_memory: bool = False, copy: bool = True) -> None:
    """Step the env on command (:func:`step_on_command`)."""
    if vector:
        from dmrpc_gym import DmRpcVectorEnv
        env = DmRpcVectorEnv(vector, address, shared_memory=shared_memory, copy=copy)
        action = np.ones(vector, np.int64)
    else:
        from dmrpc_gym import DmRpcEnv
        env = DmRpcEnv(address, shared_memory=shared_memory)
        action = np.full(action_bytes, 7, np.uint8) if action_bytes else 1
    env.reset()
    step_on_command(lambda: env.step(action)[0])
    env.close()


def region_serve(observation_bytes: int, dtype: str) -> None:
    """The env's end through a region (``transport.shm_regions``, not yet wired into the connections): each
    byte from the peer writes :class:`Env`'s observation into the region and answers a byte."""
    import threading

    from dmrpc_gym.transport.shm_regions import Region, check_peer, listen, send_region
    listener, name = listen()
    obs = Env(observation_bytes, 0, dtype).obs

    def serve_peer():
        conn, _ = listener.accept()
        check_peer(conn)
        region = Region.create(obs.nbytes)
        send_region(conn, region)
        while conn.recv(1):
            region.write(0, obs)
            conn.sendall(b"d")

    threading.Thread(target=serve_peer, daemon=True).start()
    print("ADDRESS", name, flush=True)
    answer_counters()


def region_client(address: str, observation_bytes: int, dtype: str) -> None:
    """The user's end through a region: each step asks for the observation and takes it as an array it owns."""
    from dmrpc_gym.transport.shm_regions import connect, receive_region
    conn = connect(address)
    region = receive_region(conn)
    dtype = np.dtype(dtype)
    shape = (observation_bytes // dtype.itemsize,)

    def step():
        conn.sendall(b"n")
        conn.recv(1)
        return region.array(0, dtype, shape)          # a copy the user owns (copy=True)

    step_on_command(step)


def reference(nbytes: int) -> tuple[int, ...]:
    """The counters' change for one ``np.copyto`` of ``nbytes`` into a warm array (this process)."""
    source, target = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
    np.copyto(target, source)
    before = counters()
    np.copyto(target, source)
    return tuple(b - a for a, b in zip(before, counters()))


# -- driver ----------------------------------------------------------------------------------------
def role(library: str, environ: dict, *args: str) -> Role:
    """A role of this script in a subprocess, the counter preloaded."""
    env = {**os.environ, **environ, "LD_PRELOAD": library, "GRPC_VERBOSITY": "ERROR",
           "PYTHONPATH": os.pathsep.join(filter(None, [TREE, os.environ.get("PYTHONPATH", "")]))}
    return Role(__file__, env, *args)


def numbers(line: str) -> list[int]:
    return [int(x) for x in line.split()]


def count(library: str, environ: dict, nbytes: int, case: str, steps: int, dtype: str = "uint8") -> dict[str, float]:
    """Per step of ``case``: the tensor's copies (bytes copied / ``nbytes``) and kernel crossings on each end."""
    shm, case = case.startswith("shm "), case.removeprefix("shm ")
    observation, action = (nbytes, 0) if case != "action" else (0, nbytes)
    regions = case.startswith("region")
    server = role(library, environ, "region-serve" if regions else "serve", "--observation-bytes", str(observation),
                  "--action-bytes", str(action), "--dtype", dtype)
    try:
        args = ["region-client" if regions else "client", "--address", server.first.split()[1], "--action-bytes", str(action),
                "--observation-bytes", str(observation), "--dtype", dtype]
        if case.startswith("vector"):
            args += ["--vector", case.split()[1]] + (["--copy", "0"] if "copy=False" in case else [])
        if shm:
            args += ["--shared-memory", "1"]
        client_role = role(library, environ, *args)
        try:
            client_role.ask("3")                       # warm: the steady path learns, buffers grow
            served_before = numbers(server.ask("trace"))
            changed = numbers(client_role.ask(str(steps)))
            served = [b - a for a, b in zip(served_before, numbers(server.ask("quiet")))]
        finally:
            client_role.close()
    finally:
        server.close()
    per = steps * nbytes * (int(case.split()[1]) if case.startswith("vector") else 1)
    return {"client copies": changed[1] / per, "client memcpy calls": changed[0] / steps,
            "client kernel": (changed[2] + changed[3]) / per,
            "server copies": served[1] / per, "server memcpy calls": served[0] / steps,
            "server kernel": (served[2] + served[3]) / per}


def table(rows: dict[str, dict[str, float]], scale: float) -> str:
    lines = ["| case | client: user-space copies | client: kernel copies | server: user-space copies | "
             "server: kernel copies | total |", "|---|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        total = r["client copies"] + r["client kernel"] + r["server copies"] + r["server kernel"]
        lines.append(f"| {name} | {r['client copies']:.2f} ({r['client memcpy calls']:.0f} calls) | "
                     f"{r['client kernel']:.2f} | {r['server copies']:.2f} ({r['server memcpy calls']:.0f} calls) | "
                     f"{r['server kernel']:.2f} | {total:.2f} |")
    lines.append(f"\n`np.copyto` of the same size, counted the same way: {scale:.2f} copies.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", nargs="?", default="driver",
                        choices=["driver", "serve", "client", "region-serve", "region-client"])
    parser.add_argument("--mib", type=int, default=16, help="the tensor's size in MiB (default 16)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--min", type=int, default=4096, help="count copies of at least this many bytes")
    parser.add_argument("--trace", action="store_true", help="say where each counted copy comes from (stderr)")
    parser.add_argument("--cases", default="observation,action,vector 1,shm observation,shm action,shm vector 1,"
                                           "shm vector 4,shm vector 4 copy=False")
    parser.add_argument("--dtype", default="uint8", help="the observation's dtype (the action's is uint8)")
    parser.add_argument("--observation-bytes", type=int, default=0)
    parser.add_argument("--action-bytes", type=int, default=0)
    parser.add_argument("--address")
    parser.add_argument("--vector", type=int, default=0)
    parser.add_argument("--shared-memory", type=int, default=0)
    parser.add_argument("--copy", type=int, default=1)
    args = parser.parse_args(argv)
    if args.role == "serve":
        return serve(args.observation_bytes, args.action_bytes, args.dtype)
    if args.role == "client":
        return client(args.address, args.action_bytes, args.vector, bool(args.shared_memory), bool(args.copy))
    if args.role == "region-serve":
        return region_serve(args.observation_bytes, args.dtype)
    if args.role == "region-client":
        return region_client(args.address, args.observation_bytes, args.dtype)
    nbytes = args.mib << 20
    with tempfile.TemporaryDirectory() as folder:
        library = build(folder)
        environ = {"COPY_COUNTER_MIN": str(args.min), "COPY_COUNTER_TRACE": "1" if args.trace else "0"}
        rows = {f"{case} {args.mib} MiB" + (f" {args.dtype}" if case != "action" and args.dtype != "uint8" else ""):
                count(library, environ, nbytes, case, args.steps, args.dtype) for case in args.cases.split(",")}
        probe = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import copies; "
                                "print(*copies.reference(int(sys.argv[2])))", HERE, str(nbytes)],
                               env={**os.environ, **environ, "LD_PRELOAD": library, "COPY_COUNTER_TRACE": "0"},
                               capture_output=True, text=True, check=True)
        scale = int(probe.stdout.split()[1]) / nbytes
    print(f"copies of at least {args.min} bytes, per step, in units of the tensor ({args.mib} MiB); "
          f"{args.steps} steps after 3 of warm-up\n")
    print(table(rows, scale))


if __name__ == "__main__":
    main()
