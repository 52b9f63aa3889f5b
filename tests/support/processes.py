"""Server processes that tests kill and start again, on a port chosen free (no dm_env_rpc import:
the RLlib tests' environment has none)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def memfds(label: str = "") -> list[str]:
    """This process's descriptors and mappings of memfds whose names begin with ``label`` (once the garbage is
    collected: a view of a region keeps its mapping, and the descriptor the mapping holds, until the view goes)."""
    import gc

    gc.collect()
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"/memfd:{label}"):
            found.append(target)
    with open("/proc/self/maps") as f:
        found += [line.strip() for line in f if f"/memfd:{label}" in line]
    return found


def as_nobody() -> dict:
    """``subprocess`` keywords that run a child as the user ``nobody``, and its Python: ``{"args0": python,
    "user": ..., "group": ..., ...}`` (tests of a process of another user); skips the test where that is
    impossible (not root, no such user, no ``/usr/bin/python3``: the test's own interpreter may lie in a folder
    only root can enter)."""
    import pwd

    import pytest

    if os.geteuid() != 0:
        pytest.skip("dropping a child to another user needs root")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this machine has no user 'nobody'")
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        pytest.skip(f"no {python} for the child that drops to 'nobody'")
    return {"python": python, "user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": [], "cwd": "/",
            "env": {"PATH": "/usr/bin:/bin"}}


def free_port() -> int:
    """A loopback port nothing listens on now (the OS's choice for port 0, released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServedProcess:
    """``dmrpc-gym serve TARGET`` on ``port`` as a subprocess, which a test may kill and start
    again (``processes`` holds every one started); ``close()`` ends them all. ``args`` are more
    ``serve`` arguments; ``address`` is where the last one started listens (as its ``serving ...
    on ADDRESS`` line says, so port 0 works)."""

    def __init__(self, port: int, target: str = "dmrpc_gym.worlds.catch:Catch", args: tuple[str, ...] = ()):
        self.port, self.target, self.args = port, target, tuple(args)
        self.address = ""
        self.processes: list[subprocess.Popen] = []
        self.start()

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        process = subprocess.Popen([sys.executable, "-m", "dmrpc_gym", "serve", self.target,
                                    "--port", str(self.port), *self.args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        self.processes.append(process)
        said = []       # a library may print before the serving line (pygame's banner; stderr is merged here)
        for line in process.stdout:
            said.append(line)
            if line.startswith("serving "):
                break
        else:
            raise AssertionError(f"serve ended before its serving line: {''.join(said)}")
        self.address = line.rsplit(" on ", 1)[-1].strip()

    def kill(self) -> None:
        self.processes[-1].send_signal(signal.SIGKILL)
        self.processes[-1].wait(10)

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)
            process.stdout.close()


class Proxy:
    """A TCP relay to ``target`` on a loopback port of its own; ``cut()`` drops every connection
    through it (a network failure: the server stays up), and later connections are relayed again."""

    def __init__(self, target: str):
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            self._pairs.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        for pair in self._pairs:
            for sock in pair:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
        self._pairs.clear()

    def close(self) -> None:
        self._listener.close()
        self.cut()
