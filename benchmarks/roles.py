"""A benchmark script playing one of its roles in a subprocess: asked a line, it answers a line.

``bench_transport.py`` and ``copies.py`` run their server and client this way, each in a process
of its own with the environment it needs (another checkout first on ``PYTHONPATH``, a preloaded
counter); the first line the role prints says it is ready (and, for a server, where it listens).
"""
from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["Role"]


class Role:
    """``script`` run as ``python script *args`` with ``env``; :attr:`first` is its first line."""

    def __init__(self, script: str, env: dict, *args: str):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(script), *args], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.first = self.proc.stdout.readline().strip()
        if not self.first:
            raise RuntimeError(f"{script} {' '.join(args)} did not start")

    def ask(self, line: str) -> str:
        """Send ``line``; the role's one-line answer."""
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        """End the role (its stdin closed; killed if it does not end within 20 s)."""
        try:
            self.proc.stdin.close()
            self.proc.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
