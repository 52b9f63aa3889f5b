"""Finding the Godot executable and running a game as a subprocess that is always cleaned up.

:func:`find_godot` resolves the ``godot=`` argument (a path, a command list, or the
default ``$DMRPC_GODOT``, else the first of ``godot3-server``, ``godot3``, ``godot`` on
PATH). :class:`GameProcess` starts the game in its own process group, keeps the last
lines of its output for error messages, and kills the whole group on :meth:`~GameProcess.stop`
and at interpreter exit, so no game outlives the Python process that started it.

>>> game = GameProcess([sys.executable, "-c", "print('hello from the game')"])
>>> game.process.wait(timeout=30)
0
>>> game.stop(); game.tail()
'hello from the game'
"""
from __future__ import annotations

import atexit
import collections
import os
import shlex
import shutil
import signal
import subprocess
import sys  # noqa: F401 - the examples use it
import threading
import weakref
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["DEFAULT_EXECUTABLES", "DRAWING_EXECUTABLES", "find_godot", "is_headless", "GameProcess", "stop_at_exit"]

#: Tried in order when neither ``godot=`` nor ``$DMRPC_GODOT`` names the executable.
DEFAULT_EXECUTABLES = ("godot3-server", "godot3", "godot")
#: Tried first when frames must be drawn (``render_mode="rgb_array"``): builds with a renderer.
DRAWING_EXECUTABLES = ("godot3", "godot")
#: How to install the engine, for error messages.
INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install godot3-server, or godot3 and xvfb to render)"


def is_headless(command: Sequence[str]) -> bool:
    """Whether ``command`` runs a headless (server) Godot build, which has no renderer."""
    return any("server" in Path(part).name or "headless" in Path(part).name for part in command)


def _which(name: str) -> str | None:
    found = shutil.which(name)
    return os.path.abspath(found) if found else None


def find_godot(godot: str | os.PathLike | Sequence[str] | None = None, *, drawing: bool = False) -> list[str]:
    """The command that runs Godot, as a list; ``FileNotFoundError`` naming what was tried.

    ``godot`` is a path or name (``"godot3"``), a command list (``["xvfb-run", "-a",
    "godot3"]``), or None for ``$DMRPC_GODOT`` (split like a shell line) or the first
    of :data:`DEFAULT_EXECUTABLES` on PATH. With ``drawing`` and no explicit choice, a
    build that can draw is preferred, run under ``xvfb-run -a`` when there is no
    ``$DISPLAY``.

    >>> find_godot([sys.executable, "-X", "dev"])[1:]
    ['-X', 'dev']
    >>> find_godot("/no/such/godot")
    Traceback (most recent call last):
    ...
    FileNotFoundError: Godot executable '/no/such/godot' (from godot=) not found: ...
    """
    if godot is None and os.environ.get("DMRPC_GODOT"):
        command, origin = shlex.split(os.environ["DMRPC_GODOT"]), "$DMRPC_GODOT"
    elif godot is None:
        order = DRAWING_EXECUTABLES + DEFAULT_EXECUTABLES if drawing else DEFAULT_EXECUTABLES
        for name in order:
            path = _which(name)
            if path is None:
                continue
            command = [path]
            if drawing and not is_headless(command) and not os.environ.get("DISPLAY") and _which("xvfb-run"):
                command = [_which("xvfb-run"), "-a", *command]
            return command
        raise FileNotFoundError(
            f"no Godot executable found: none of {', '.join(order)} is on PATH and $DMRPC_GODOT is not set; "
            f"pass godot=PATH, set $DMRPC_GODOT, or {INSTALL_HINT}")
    elif isinstance(godot, (str, os.PathLike)):
        command, origin = [os.fspath(godot)], "godot="
    else:
        command, origin = [os.fspath(part) for part in godot], "godot="
        if not command:
            raise ValueError("godot= is an empty command list; expected e.g. ['godot3-server']")
    path = _which(command[0])
    if path is None:
        raise FileNotFoundError(
            f"Godot executable {command[0]!r} (from {origin}) not found: not an executable file "
            f"or a name on PATH; {INSTALL_HINT}")
    return [path, *command[1:]]


class _Live:
    """What must be stopped at interpreter exit: envs (closed first) and game processes."""

    items: "weakref.WeakSet" = weakref.WeakSet()
    registered = False

    @classmethod
    def add(cls, item: object) -> None:
        if not cls.registered:
            atexit.register(cls.stop_all)
            cls.registered = True
        cls.items.add(item)

    @classmethod
    def stop_all(cls) -> None:
        for item in sorted(list(cls.items), key=lambda item: isinstance(item, GameProcess)):
            try:
                item.close_at_exit()
            except Exception:  # noqa: BLE001 - stop the others anyway
                pass


def stop_at_exit(item: object) -> None:
    """Call ``item.close_at_exit()`` at interpreter exit if ``item`` is still alive then (held weakly)."""
    _Live.add(item)


def exchange_failure(game: "GameProcess | None", exc: Exception, doing: str, who: str,
                     stop: Callable[[], None]) -> tuple[Exception, str]:
    """After an exchange with ``game`` failed with ``exc``: let a game whose connection broke end (1 s at
    most, so that its output says how), ``stop()`` it, and return the error to raise (``f"{who}{doing}:
    {exc}; "`` and how the game ended, with its last output lines) and what later calls say.

    >>> error, later = exchange_failure(None, TimeoutError("no answer"), "step", "Godot game ", lambda: None)
    >>> error, later
    (TimeoutError('Godot game step: no answer; no game'), 'step failed earlier (TimeoutError); the game was stopped')
    """
    if isinstance(exc, ConnectionError) and game is not None:
        try:
            game.process.wait(timeout=1.0)          # let a dying game say how it ended
        except Exception:  # noqa: BLE001
            pass
    stop()
    detail = game.describe() if game is not None else "no game"
    return (type(exc)(f"{who}{doing}: {exc}; {detail}"),
            f"{doing} failed earlier ({type(exc).__name__}); the game was stopped")


class GameProcess:
    """A game subprocess in its own process group, with the tail of its output kept.

    Args:
        command: the full command line.
        cwd: the working directory (default: this process's).
        keep: how many output lines to keep for error messages.

    ``process`` is the ``subprocess.Popen``. The output (stdout and stderr merged) is
    read by a daemon thread so the game never blocks on a full pipe.
    """

    def __init__(self, command: Sequence[str], *, cwd: str | os.PathLike | None = None, keep: int = 40) -> None:
        self.command = list(command)
        self._lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            self.command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True)
        self._reader = threading.Thread(target=self._read, name=f"godot-output-{self.process.pid}", daemon=True)
        self._reader.start()
        stop_at_exit(self)

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        with stream:
            for raw in stream:
                line = raw.decode("utf-8", "replace").rstrip()
                if line.strip():
                    with self._lock:
                        self._lines.append(line)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        """Whether the game has not exited yet."""
        return self.process.poll() is None

    def tail(self, lines: int = 15) -> str:
        """The last ``lines`` non-empty lines the game printed (waits briefly for output of a finished game)."""
        if not self.alive:
            self._reader.join(timeout=1.0)
        with self._lock:
            return "\n".join(list(self._lines)[-lines:])

    def describe(self) -> str:
        """How the game ended (or that it runs), and its last output lines, for error messages."""
        code = self.process.poll()
        if code is None:
            state = f"the game (pid {self.pid}) is still running"
        elif code < 0:
            state = f"the game (pid {self.pid}) was killed by signal {signal.Signals(-code).name}"
        else:
            state = f"the game (pid {self.pid}) exited with code {code}"
        tail = self.tail()
        return f"{state}; its last output lines:\n{tail}" if tail else f"{state}; it printed nothing"

    def stop(self, grace: float = 2.0) -> None:
        """Wait up to ``grace`` seconds for the game to exit, then kill its process group; always returns."""
        if self.alive and grace > 0:
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, sig)      # the group: also the game's own children
                if sig == signal.SIGTERM:
                    os.killpg(self.process.pid, signal.SIGCONT)   # a stopped game must see the SIGTERM
            except (ProcessLookupError, PermissionError):
                break                                 # nothing left in the group
            try:
                self.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
        _Live.items.discard(self)

    def close_at_exit(self) -> None:
        self.stop(grace=0.0)
