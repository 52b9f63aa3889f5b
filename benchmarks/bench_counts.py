"""Work per small step that machine noise cannot move: Python calls and CPU instructions, client and server.

Wall-clock ratios on a 2-vCPU VM whose idle cores halt swing by 15 %; these counts repeat run to run:

- **Python calls per step**: a profile hook counts the ``call`` events (Python functions entered) of
  ``--steps`` small steps after a warm-up, on one side at a time: the client in this process against a
  server in a subprocess, then the server in this process (every thread of it) against a client in a
  subprocess;
- **instructions per step** (``--callgrind``, Debian's ``valgrind``): the side runs under
  ``valgrind --tool=callgrind``, and its counted steps are a dump of their own (``--dump-before``
  a C function only the script calls, ``sys.call_tracing``, on each side of the steps): start-up,
  imports, the warm-up and closing are left out, however much they vary. Both sides run quiet, so
  that nothing driven by the clock moves the count: the client without its idle watcher (a thread
  that wakes as time passes), the server with ``workers=0`` (every step inline on the event loop;
  with workers, a step as slow as callgrind makes it goes to a thread).

The small step is ``bench_transport.py``'s: a constant env, a 4-float observation, a Discrete action,
``DmRpcEnv.step`` on one connection. ``--tree PATH`` (repeatable) measures other checkouts too, each with
its own client and server::

    python benchmarks/bench_counts.py --tree /tmp/old                  # calls per step, this tree and /tmp/old
    python benchmarks/bench_counts.py --callgrind --steps 1000         # and instructions (minutes)

Busy polling (``transport/busy_poll.py``) is off in every role (``DMRPC_BUSY_POLL_US=0``): how many polls
a wait takes depends on the clock; the counts are the work of a step.

``--world CartPole-v1`` (or ``Pendulum-v1``, ``"28 KB"``: ``bench_host.py``'s envs and actions) and
``--vector N`` (a ``DmRpcVectorEnv`` of N sub-envs on one server: the figures are then per vector step)
count the same way what ``bench_host.py`` times (issue 40, item 3). The server steps every env inline there
(``workers=0``), so that no timing-driven choice moves the count; the gymnasium envs are seeded, and their
episodes end at the same steps every run::

    python benchmarks/bench_counts.py --world CartPole-v1 --vector 4 --steps 1000 --callgrind
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

    def __init__(self, route: bool = False):
        self.on, self.calls, self.c_calls, self._lock = False, 0, 0, threading.Lock()
        #: with ``route``: Python calls by the file of the function called, in the order first entered
        self.files: dict[str, int] | None = {} if route else None

    def __call__(self, frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        if self.on and event in ("call", "c_call"):
            with self._lock:
                if event == "call":
                    self.calls += 1
                    if self.files is not None:
                        name = _where(frame.f_code.co_filename)
                        self.files[name] = self.files.get(name, 0) + 1
                else:
                    self.c_calls += 1

    def said(self) -> str:
        if self.files is not None:      # one word: file=calls,file=calls,...
            return f"{self.calls} {self.c_calls} " + ",".join(f"{k}={v}" for k, v in self.files.items())
        return f"{self.calls} {self.c_calls}"


def _where(filename: str) -> str:
    """A file's name from the package down (``dmrpc_gym/transport/flow.py``), or the standard library's
    module (``asyncio/selector_events.py``), so that trees in other folders read alike."""
    parts = filename.replace(os.sep, "/").split("/")
    for top in ("dmrpc_gym", "benchmarks"):
        if top in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(top) - 1:])
    return "/".join(parts[-2:])


def _env(address: str, vector: int = 0):
    from dmrpc_gym import DmRpcEnv, DmRpcVectorEnv   # public names: a baseline checkout may lay modules out otherwise
    env = DmRpcVectorEnv(vector, address) if vector else DmRpcEnv(address)
    env.reset(seed=0)
    return env


def _world(name: str):
    """What the server serves: ``constant`` (the small world), else ``bench_host.py``'s env of that name."""
    if name == "constant":
        from constant_world import Constant
        return Constant
    import bench_host
    return bench_host.factory(bench_host.OBSERVATIONS.get(name, name))


def _action(world: str, vector: int):
    import numpy as np
    if world == "constant":
        return np.full(vector, 1, np.int64) if vector else np.int64(1)
    import bench_host
    actions = bench_host.actions(world, max(vector, 1), np.int64)
    return actions if vector else actions[0]


def _still(env) -> None:
    """Stop the client's idle watcher (a thread whose wake-ups follow the clock, so that callgrind would
    count more of them the slower it runs): the counted steps are then the only work. Any layout: the
    watcher on the transport, on its stream (7d5ace9) or on its stream's connection (the transport package)."""
    if hasattr(env, "envs"):                 # a vector env: each sub-env's
        for sub in env.envs:
            _still(sub)
        return
    transport = env.connection._transport
    stream = getattr(transport, "_stream", None)
    holders = [transport, stream, getattr(stream, "connection", None)]
    conn = next(holder for holder in holders if hasattr(holder, "_watcher"))
    if conn._watcher is not None:
        conn._watcher.stop()
        for thread in threading.enumerate():
            if thread.name == "dmrpc-keepalive":
                thread.join(5)


def _mark() -> None:
    """A boundary for callgrind: under ``--dump-before=sys_call_tracing`` each ``sys.call_tracing(_mark, ())``
    dumps what was counted since the last one, so a side's counted steps are a dump of their own."""


def client_role(address: str, steps: int, count: bool, quiet: bool = False, mark: bool = False,
                world: str = "constant", vector: int = 0, route: bool = False) -> None:
    """Step ``WARMUP`` times, say ``WARM`` and wait for a stdin line, step ``steps`` times and say ``CALLS``
    (with ``count``, the Python calls of those steps; else 0), then close at the next line or end of stdin.
    ``quiet``: no idle watcher (:func:`_still`); ``mark``: the steps between two :func:`_mark` calls;
    ``world``, ``vector``: see the module's docstring; ``route``: the calls by file too (:class:`Counter`)."""
    env, action = _env(address, vector), _action(world, vector)
    if quiet:
        _still(env)
    for _ in range(WARMUP):
        env.step(action)
    print("WARM", flush=True)
    sys.stdin.readline()
    counter = Counter(route)
    if mark:
        sys.call_tracing(_mark, ())
    if count:
        sys.setprofile(counter)
        counter.on = True
    for _ in range(steps):
        env.step(action)
    counter.on = False
    sys.setprofile(None)
    if mark:
        sys.call_tracing(_mark, ())
    print("CALLS", counter.said(), flush=True)
    sys.stdin.readline()
    env.close()


def server_role(count: bool, metrics: bool = False, inline: bool = False, mark: bool = False,
                world: str = "constant", route: bool = False) -> None:
    """Serve bench_transport's small world; with ``count``, count every server thread's Python calls
    between the ``ON`` and ``OFF`` lines of stdin (each answered ``OK``, ``OFF`` with the count);
    ``metrics``: with Prometheus metrics on; ``inline``: ``workers=0``, every step on the event loop,
    so that no timing-driven choice (inline or on a thread) moves the count (``bench_metrics.py``, and
    the callgrind runs: a step slower than 2 ms, as under callgrind, would go to a thread); ``mark``: a
    :func:`_mark` at ``ON`` and at ``OFF`` (callgrind's dumps then hold the steps between them alone);
    ``world``: what it serves (:func:`_world`); ``route``: the calls by file too (:class:`Counter`)."""
    from dmrpc_gym.server import Server

    counter = Counter(route)
    if count:
        threading.setprofile(counter)            # the server's threads start after this
    options = {**({"metrics_port": 0} if metrics else {}), **({"workers": 0} if inline else {})}
    server = Server(_world(world), kind="gym", **options).start()
    print("ADDRESS", server.address, flush=True)
    for line in sys.stdin:
        if mark and line.strip() in ("ON", "OFF"):
            sys.call_tracing(_mark, ())
        counter.on = line.strip() == "ON"
        if line.strip() == "OFF":
            print("CALLS", counter.said(), flush=True)
            counter.calls = counter.c_calls = 0
            counter.files = {} if route else None
        else:
            print("OK", flush=True)
    server.stop(0)


# -- the driver --------------------------------------------------------------------------------------------
#: ``--world`` and ``--vector`` as given (every role is spawned with them).
OPTIONS: list[str] = []


def _spawn(tree: str, *role: str, valgrind: str | None = None) -> subprocess.Popen:
    """``role`` of this script in ``tree``; ``valgrind``: a callgrind output file to run under callgrind
    ("": not under it, but quiet as a counted side is, see the roles)."""
    # a fixed hash seed: string hashing (dicts, sets) costs the same in every run; no busy polling (how long a
    # side polls for the other depends on the clock: the counts are the work of a step, not its waiting)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, HERE]), PYTHONHASHSEED="0", DMRPC_BUSY_POLL_US="0")
    command = [sys.executable, os.path.abspath(__file__), *role, *OPTIONS]
    if valgrind is not None:               # (a callgrind run: each side quiet, see the roles)
        command += ["--inline"] if role[0] == "serve" else ["--quiet"]
    if valgrind:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={valgrind}",
                   "--dump-before=sys_call_tracing", *command, "--mark"]
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


def _collected(proc: subprocess.Popen, out: str) -> int:
    """The instructions callgrind counted between the two marks of ``proc`` (once it ended): its second dump,
    ``out.2`` (``out.1`` holds the start-up and the warm-up, ``out`` what came after the second mark)."""
    err = proc.stderr.read()
    proc.wait(60)
    try:
        with open(f"{out}.2") as dump:
            found = re.search(r"^totals:\s*(\d+)", dump.read(), re.M)
    except OSError:
        found = None
    if not found:
        raise RuntimeError(f"no callgrind dump between the marks in {out}.2: {(err or '')[-500:]}")
    return int(found.group(1))


def _ask_steps(client: subprocess.Popen, before=None) -> str:
    """Let a client that is warm step (``before()`` first), then let it close: what its ``CALLS`` line said."""
    _line(client, "WARM")
    if before is not None:
        before()
    said = _ask(client, "GO", "CALLS")
    client.stdin.close()
    return said


def _steps(client: subprocess.Popen, before=None) -> tuple[int, int]:
    """:func:`_ask_steps`, as ``(Python calls, C calls)``."""
    return _counts(_ask_steps(client, before))


def _counts(said: str) -> tuple[int, int]:
    python, c = said.split()[:2]
    return int(python), int(c)


ROUTES: dict[str, list[dict[str, int]]] = {}    # tree -> [client's calls by file, server's], with --route


def _files(said: str) -> dict[str, int]:
    words = said.split()
    return dict((k, int(v)) for k, v in (item.split("=") for item in words[2].split(","))) if len(words) > 2 else {}


def calls(tree: str, steps: int, metrics: bool = False, inline: bool = False,
          route: bool = False) -> tuple[float, float, float, float]:
    """Calls per small step of ``tree``: Python functions and C functions, client then server; counted on
    one side at a time, over the ``steps`` only (a warm-up, connecting and closing are left out);
    ``metrics``, ``inline``: the server's options (:func:`server_role`); ``route``: the calls by file
    too, kept in :data:`ROUTES`."""
    flag = ("--metrics",) * metrics + ("--inline",) * (inline or bool(OPTIONS)) + ("--route",) * route
    server = _spawn(tree, "serve", *flag)
    try:
        client = _spawn(tree, "client", _line(server, "ADDRESS"), str(steps), "--count", *("--route",) * route)
        said = _ask_steps(client)
        client_calls = _counts(said)
        client.wait(60)
    finally:
        server.stdin.close()
        server.wait(60)
    server = _spawn(tree, "serve", "--count", *flag)
    try:
        client = _spawn(tree, "client", _line(server, "ADDRESS"), str(steps))
        _steps(client, lambda: _ask(server, "ON", "OK"))
        server_said = _ask(server, "OFF", "CALLS")              # (the client's answers are all in: it said CALLS)
        server_calls = _counts(server_said)
        client.wait(60)
    finally:
        server.stdin.close()
        server.wait(60)
    if route:
        ROUTES[tree] = [_files(said), _files(server_said)]
    return (client_calls[0] / steps, client_calls[1] / steps, server_calls[0] / steps, server_calls[1] / steps)


def instructions(tree: str, steps: int, folder: str) -> tuple[float, float]:
    """CPU instructions per small step ``(client, server)`` of ``tree``, from callgrind: each side runs under
    it, quiet (see the roles), and the ``steps`` counted steps are one dump of their own (:func:`_mark`):
    start-up, imports, the warm-up and closing are left out, whatever they cost from run to run."""
    out = os.path.join(folder, "client.out")
    server = _spawn(tree, "serve", valgrind="")
    try:
        client = _spawn(tree, "client", _line(server, "ADDRESS"), str(steps), valgrind=out)
        _steps(client)
        client_total = _collected(client, out)
    finally:
        server.stdin.close()
        server.wait(60)
    out = os.path.join(folder, "server.out")
    server = _spawn(tree, "serve", valgrind=out)
    client = _spawn(tree, "client", _line(server, "ADDRESS"), str(steps), valgrind="")
    _line(client, "WARM")
    _ask(server, "ON", "OK")
    _ask(client, "GO", "CALLS")
    _ask(server, "OFF", "CALLS")               # before the client closes: its LeaveWorld is not counted
    client.stdin.close()
    client.wait(120)
    server.stdin.close()
    return client_total / steps, _collected(server, out) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("role", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mark", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--metrics", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", action="append", default=[], help="another checkout to measure (repeatable)")
    parser.add_argument("--steps", type=int, default=2000, help="steps counted")
    parser.add_argument("--callgrind", action="store_true", help="also count instructions (needs valgrind)")
    parser.add_argument("--skip-this", action="store_true", help="measure only the --tree checkouts")
    parser.add_argument("--route", action="store_true",
                        help="also the files a step's Python calls enter, in the order first entered, with calls per step")
    parser.add_argument("--world", default="constant",
                        help="constant (default), or one of bench_host.py's observations "
                             "(CartPole-v1, Pendulum-v1, '28 KB', ...)")
    parser.add_argument("--vector", type=int, default=0, help="a DmRpcVectorEnv of this many sub-envs (0: DmRpcEnv)")
    args = parser.parse_args()
    if args.role[:1] == ["client"]:
        return client_role(args.role[1], int(args.role[2]), args.count, args.quiet, args.mark, args.world, args.vector,
                           args.route)
    if args.role[:1] == ["serve"]:
        return server_role(args.count, args.metrics, args.inline, args.mark, args.world, args.route)
    if args.world != "constant" or args.vector:
        OPTIONS.extend(["--world", args.world, "--vector", str(args.vector)])
    if args.callgrind and not shutil.which("valgrind"):
        parser.error("--callgrind needs valgrind (apt-get install valgrind)")
    trees = [*([] if args.skip_this else [TREE]), *args.tree]
    print("| tree | client: Python calls / step | C calls | server: Python calls / step | C calls |"
          + (" instructions / step, client | server |" if args.callgrind else ""))
    print("|---|---:|---:|---:|---:|" + ("---:|---:|" if args.callgrind else ""))
    import tempfile
    for tree in trees:
        row = [f"{c:.1f}" for c in calls(tree, args.steps, route=args.route)]
        if args.callgrind:
            with tempfile.TemporaryDirectory() as folder:
                row += [f"{i:,.0f}" for i in instructions(tree, args.steps, folder)]
        print(f"| {'this tree' if tree == TREE else tree} | " + " | ".join(row) + " |", flush=True)
    for tree, sides in ROUTES.items():
        for side, files in zip(("client", "server"), sides):
            print(f"\n{'this tree' if tree == TREE else tree}, {side}: the files a step enters, in the order first "
                  f"entered (Python calls per step)")
            print(" -> ".join(f"{name} ({n / args.steps:.1f})" for name, n in files.items()))


if __name__ == "__main__":
    main()
