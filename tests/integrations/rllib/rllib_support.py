"""Helpers of the RLlib tests: ray or a skip, `dmrpc-gym serve` subprocesses, a server's worlds."""
from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

#: The checkout these tests belong to (put on the path of every process they start).
ROOT = Path(__file__).resolve().parents[3]


def require_ray() -> Any:
    """The ``ray`` module; without it the calling test module is skipped, or fails under DMRPC_REQUIRE_RAY=1."""
    if os.environ.get("DMRPC_REQUIRE_RAY") == "1":
        import ray     # CI's RLlib stage: a missing ray is a failure, not a skip
        return ray
    return pytest.importorskip("ray", reason='Ray RLlib is not installed (pip install -e ".[rllib]"; '
                                             ".ci/run runs these tests in .venv-rllib)")


def child_env() -> dict[str, str]:
    """The environment of a child process that must import this checkout's ``dmrpc_gym``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


@contextlib.contextmanager
def served(target: str, timeout: float = 60.0) -> Iterator[str]:
    """``python -m dmrpc_gym serve TARGET --port 0`` as a subprocess: yields the address it prints."""
    process = subprocess.Popen([sys.executable, "-m", "dmrpc_gym", "serve", target, "--port", "0"],
                               cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    lines: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout] and None, daemon=True).start()
    try:
        seen = []
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"`dmrpc-gym serve {target}` printed no address in {timeout}s: {seen}")
            seen.append(line)
            found = re.search(r"serving .* on (\S+:\d+)", line)
            if found:
                break
            if process.poll() is not None:
                raise AssertionError(f"`dmrpc-gym serve {target}` exited: {''.join(seen)}")
        yield found.group(1)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def server_worlds(address: str) -> set[str]:
    """The names of the worlds on the server at ``address``, read from its ``worlds`` property.

    The reading client creates a world of its own (to have a connection), which is left out.
    """
    import dmrpc_gym

    env = dmrpc_gym.DmRpcEnv(address, world_settings={})
    try:
        names = {str(name) for name in env.unwrapped.properties["worlds"].reshape(-1)}
        return names - {env.unwrapped.world_name}
    finally:
        env.close()
