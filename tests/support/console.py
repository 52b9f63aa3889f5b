"""The ``dmrpc-gym`` console script run as it is installed, in real subprocesses (shared by the CLI tests
and the docs' code blocks).

The console script calls ``dmrpc_gym.app.cli:main`` with ``sys.path`` holding the
script's directory, not the current one; :func:`console` reproduces exactly that
(``python -c`` with an importable tree on PYTHONPATH), without reinstalling the package.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import dmrpc_gym

__all__ = ["TREE", "console", "console_env", "start_console", "Served"]

TREE = str(Path(dmrpc_gym.__file__).resolve().parent.parent)

# What a console script does: import the entry point and call it; sys.path[0] is the
# script's own directory (here: none, -c puts '' first, which we remove).
_SCRIPT = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
           "sys.argv = ['dmrpc-gym', *sys.argv[1:]]; "
           "from dmrpc_gym.app.cli import main; sys.exit(main())")

def console_env() -> dict:
    env = dict(os.environ, PYTHONPATH=TREE, MPLBACKEND="Agg")
    env.pop("PYTHONSAFEPATH", None)
    return env


def console(*args: str, cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``dmrpc-gym ARGS`` to completion, as the console script, in ``cwd``."""
    return subprocess.run([sys.executable, "-c", _SCRIPT, *args], cwd=cwd, env=console_env(), capture_output=True,
                          text=True, timeout=timeout)


def start_console(*args: str, cwd) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _SCRIPT, *args], cwd=cwd, env=console_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Served:
    """``dmrpc-gym serve TARGET --port 0`` in a subprocess; its printed lines are read."""

    def __init__(self, target: str, cwd, *extra: str):
        self.process = start_console("serve", target, "--port", "0", *extra, cwd=cwd)
        first = self.process.stdout.readline()
        if not first.startswith("serving "):
            self.stop()
            raise AssertionError(f"serve printed {first!r}; stderr: {self.process.stderr.read()}")
        self.address = first.split(" on ")[1].strip()
        self.connect_line = self.process.stdout.readline().strip()

    def stop(self) -> str:
        """Ctrl-C the server; its stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            _, err = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return err
