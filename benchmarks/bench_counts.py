"""Work per small step that machine noise cannot move: Python calls and CPU instructions, client and server.

Wall-clock ratios on a 2-vCPU VM whose idle cores halt swing by 15 %; these counts repeat run to run:

- **Python calls per step**: a profile hook counts the ``call`` events (Python functions entered) of
  ``--steps`` small steps after a warm-up, on one side at a time: the client in this process against a
  server in a subprocess, then the server in this process (every thread of it) against a client in a
  subprocess;
- **instructions per step** (``--callgrind``, Debian's ``valgrind``): the side runs under
  ``valgrind --tool=callgrind`` twice, for ``--steps`` and for twice as many; the difference of the
  two totals, divided by the difference of the steps, leaves out start-up and imports.

The small step is ``bench_transport.py``'s: a constant env, a 4-float observation, a Discrete action,
``DmRpcEnv.step`` on one connection. ``--tree PATH`` (repeatable) measures other checkouts too, each with
its own client and server::

    python benchmarks/bench_counts.py --tree /tmp/old                  # calls per step, this tree and /tmp/old
    python benchmarks/bench_counts.py --callgrind --steps 300          # and instructions (minutes)
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
WARMUP = 200


# -- roles (each runs in the tree it measures) --------------------------------------------------------
class Counter:
    """A profile hook counting, while ``on``, Python function calls and calls of C functions from Python."""

    def __init__(self):
        self.on, self.calls, self.c_calls, self._lock = False, 0, 0, threading.Lock()

    def __call__(self, frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        if self.on and event in ("call", "c_call"):
            with self._lock:
                if event == "call":
                    self.calls += 1
                else:
                    self.c_calls += 1

    def said(self) -> str:
        return f"{self.calls} {self.c_calls}"


def _env(address: str):
    from dmrpc_gym import DmRpcEnv   # the public name: a baseline checkout may lay modules out differently
    env = DmRpcEnv(address)
    env.reset()
    return env


def client_role(address: str, steps: int, count: bool) -> None:
    """Step ``WARMUP`` times, say ``WARM`` and wait for a stdin line, step ``steps`` times and say ``CALLS``
    (with ``count``, the Python calls of those steps; else 0), then close at the next line or end of stdin."""
    import numpy as np
    env, action = _env(address), np.int64(1)
    for _ in range(WARMUP):
        env.step(action)
    print("WARM", flush=True)
    sys.stdin.readline()
    counter = Counter()
    if count:
        sys.setprofile(counter)
        counter.on = True
    for _ in range(steps):
        env.step(action)
    counter.on = False
    sys.setprofile(None)
    print("CALLS", counter.said(), flush=True)
    sys.stdin.readline()
    env.close()


def server_role(count: bool, metrics: bool = False, inline: bool = False) -> None:
    """Serve bench_transport's small world; with ``count``, count every server thread's Python calls
    between the ``ON`` and ``OFF`` lines of stdin (each answered ``OK``, ``OFF`` with the count);
    ``metrics``: with Prometheus metrics on; ``inline``: ``workers=0``, every step on the event loop,
    so that no timing-driven choice (inline or on a thread) moves the count (``bench_metrics.py``)."""
    import gymnasium as gym
    import numpy as np

    from dmrpc_gym.server import Server

    class Constant(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
        action_space = gym.spaces.Discrete(2)
        obs = np.zeros(4, np.float32)

        def reset(self, *, seed=None, options=None):
            return self.obs, {}

        def step(self, action):
            return self.obs, 1.0, False, False, {}

    counter = Counter()
    if count:
        threading.setprofile(counter)            # the server's threads start after this
    options = {**({"metrics_port": 0} if metrics else {}), **({"workers": 0} if inline else {})}
    server = Server(Constant, kind="gym", **options).start()
    print("ADDRESS", server.address, flush=True)
    for line in sys.stdin:
        counter.on = line.strip() == "ON"
        if line.strip() == "OFF":
            print("CALLS", counter.said(), flush=True)
            counter.calls = counter.c_calls = 0
        else:
            print("OK", flush=True)
    server.stop(0)


# -- the driver --------------------------------------------------------------------------------------------
def _spawn(tree: str, *role: str, valgrind: str | None = None) -> subprocess.Popen:
    # a fixed hash seed: string hashing (dicts, sets) costs the same in every run
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, HERE]), PYTHONHASHSEED="0")
    command = [sys.executable, os.path.abspath(__file__), *role]
    if valgrind:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={valgrind}", *command]
    return subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE if valgrind else None, text=True)


def _line(proc: subprocess.Popen, word: str) -> str:
    for line in proc.stdout:
        if line.split()[:1] == [word]:
            return line[len(word):].strip()
    raise RuntimeError(f"the {word} line never came (exit {proc.wait()})")


def _ask(proc: subprocess.Popen, line: str, word: str) -> str:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return _line(proc, word)


def _collected(proc: subprocess.Popen) -> int:
    """The ``Collected`` total that callgrind writes to stderr when ``proc`` ends."""
    err = proc.stderr.read()
    proc.wait(60)
    found = re.search(r"Collected\s*:\s*(\d+)", err or "")
    if not found:
        raise RuntimeError(f"no callgrind total in: {(err or '')[-500:]}")
    return int(found.group(1))


def _steps(client: subprocess.Popen, before=None) -> tuple[int, int]:
    """Let a client that is warm step (``before()`` first), then let it close: its ``CALLS``."""
    _line(client, "WARM")
    if before is not None:
        before()
    found = _counts(_ask(client, "GO", "CALLS"))
    client.stdin.close()
    return found


def _counts(said: str) -> tuple[int, int]:
    python, c = said.split()
    return int(python), int(c)


def calls(tree: str, steps: int, metrics: bool = False, inline: bool = False) -> tuple[float, float, float, float]:
    """Calls per small step of ``tree``: Python functions and C functions, client then server; counted on
    one side at a time, over the ``steps`` only (a warm-up, connecting and closing are left out);
    ``metrics``, ``inline``: the server's options (:func:`server_role`)."""
    flag = ("--metrics",) * metrics + ("--inline",) * inline
    server = _spawn(tree, "serve", *flag)
    try:
        client = _spawn(tree, "client", _line(server, "ADDRESS"), str(steps), "--count")
        client_calls = _steps(client)
        client.wait(60)
    finally:
        server.stdin.close()
        server.wait(60)
    server = _spawn(tree, "serve", "--count", *flag)
    try:
        client = _spawn(tree, "client", _line(server, "ADDRESS"), str(steps))
        _steps(client, lambda: _ask(server, "ON", "OK"))
        server_calls = _counts(_ask(server, "OFF", "CALLS"))    # (the client's answers are all in: it said CALLS)
        client.wait(60)
    finally:
        server.stdin.close()
        server.wait(60)
    return (client_calls[0] / steps, client_calls[1] / steps, server_calls[0] / steps, server_calls[1] / steps)


def instructions(tree: str, steps: int, folder: str) -> tuple[float, float]:
    """CPU instructions per small step ``(client, server)`` of ``tree``, from callgrind: each side runs under
    it for ``steps`` and ``2 * steps`` steps; the difference leaves out start-up, imports and the warm-up."""
    totals: dict[str, dict[int, int]] = {"client": {}, "server": {}}
    for n in (steps, 2 * steps):
        server = _spawn(tree, "serve")
        try:
            client = _spawn(tree, "client", _line(server, "ADDRESS"), str(n),
                            valgrind=os.path.join(folder, f"client-{n}.out"))
            _steps(client)
            totals["client"][n] = _collected(client)
        finally:
            server.stdin.close()
            server.wait(60)
        server = _spawn(tree, "serve", valgrind=os.path.join(folder, f"server-{n}.out"))
        client = _spawn(tree, "client", _line(server, "ADDRESS"), str(n))
        _steps(client)
        client.wait(120)
        server.stdin.close()
        totals["server"][n] = _collected(server)
    return tuple((t[2 * steps] - t[steps]) / steps for t in (totals["client"], totals["server"]))  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("role", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--metrics", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", action="append", default=[], help="another checkout to measure (repeatable)")
    parser.add_argument("--steps", type=int, default=2000, help="steps counted (callgrind: and twice as many)")
    parser.add_argument("--callgrind", action="store_true", help="also count instructions (needs valgrind)")
    args = parser.parse_args()
    if args.role[:1] == ["client"]:
        return client_role(args.role[1], int(args.role[2]), args.count)
    if args.role[:1] == ["serve"]:
        return server_role(args.count, args.metrics, args.inline)
    if args.callgrind and not shutil.which("valgrind"):
        parser.error("--callgrind needs valgrind (apt-get install valgrind)")
    trees = [TREE, *args.tree]
    print("| tree | client: Python calls / step | C calls | server: Python calls / step | C calls |"
          + (" instructions / step, client | server |" if args.callgrind else ""))
    print("|---|---:|---:|---:|---:|" + ("---:|---:|" if args.callgrind else ""))
    import tempfile
    for tree in trees:
        row = [f"{c:.1f}" for c in calls(tree, args.steps)]
        if args.callgrind:
            with tempfile.TemporaryDirectory() as folder:
                row += [f"{i:,.0f}" for i in instructions(tree, args.steps, folder)]
        print(f"| {'this tree' if tree == TREE else tree} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
