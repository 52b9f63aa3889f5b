"""``dmrpc-gym serve``: the server its arguments describe, and the Python line that connects to it.

The arguments are declared in :mod:`dmrpc_gym.app.cli` (``add_serve``); this module starts what
they describe and serves until interrupted.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["serve_target", "start_server", "connect_line", "serve_until_stopped"]


def serve_target(target: str) -> Any:
    """``target`` made importable as ``python -m`` would import it, from the console script too.

    A bundled world's name (``catch``, ``tag``) is its ``module:factory``; ``godot-rl:PATH`` (a Godot
    RL Agents game: a project folder or an exported game) is its factory,
    :class:`~dmrpc_gym.integrations.godot_rl.GodotRLWorlds`.
    ``path/to/file.py:name`` puts the file's directory first on ``sys.path`` and
    becomes ``file:name``; otherwise the current directory goes on ``sys.path``
    (``python -m`` puts it there, a console script does not), so ``myenv:Corridor``
    next to ``myenv.py`` is found either way.
    """
    from dmrpc_gym.worlds import SERVE_TARGETS
    if target in SERVE_TARGETS:             # `serve catch`, as `inspect catch` names it
        return SERVE_TARGETS[target]
    _bundled_typo(target, SERVE_TARGETS)
    if target.startswith("godot-rl:"):     # imported only for such a target: it loads pettingzoo
        from dmrpc_gym.integrations.godot_rl import PREFIX, GodotRLWorlds
        path = target[len(PREFIX):]
        if not path:
            raise ValueError(f"{target!r} names no game: expected godot-rl:PATH, PATH a Godot project folder "
                             "or an exported game")
        try:
            return GodotRLWorlds(path)
        except FileNotFoundError as exc:
            raise ValueError(str(exc)) from None
    module, sep, name = target.rpartition(":") if ".py:" in target else target.partition(":")
    if sep and module.endswith(".py"):
        path = Path(module)
        if not path.is_file():
            raise ValueError(f"no file {module!r} (from {target!r}; the current directory is {os.getcwd()})")
        folder = str(path.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        return f"{path.stem}:{name}"
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return target


def _bundled_typo(target: str, bundled: Any) -> None:
    """Refuse a plain name that is close to a bundled world's and is no gymnasium env id.

    >>> _bundled_typo("catchh", {"catch": None, "tag": None})
    Traceback (most recent call last):
    ...
    ValueError: unknown target 'catchh': no gymnasium env id, no bundled world; did you mean the bundled world 'catch'?
    """
    import difflib

    import gymnasium as gym
    close = difflib.get_close_matches(target, list(bundled), n=1, cutoff=0.75)
    if close and not any(c in target for c in ":/.") and target not in gym.registry:
        raise ValueError(f"unknown target {target!r}: no gymnasium env id, no bundled world; "
                         f"did you mean the bundled world {close[0]!r}?")


def start_server(args: argparse.Namespace):
    """The started :class:`~dmrpc_gym.server.Server` that ``dmrpc-gym serve`` runs for ``args``.

    Raises ``ValueError`` / ``TypeError`` for a target that cannot be served,
    ``OSError`` when the address is busy.
    """
    from dmrpc_gym.server import ConnectionLimits, Server
    from dmrpc_gym.transport import TOKEN_ENV

    render: bool | str = {"rgb_array": True, "none": False}.get(args.render, args.render)
    if render != "human":
        # The server renders offscreen (rgb_array frames; a client's "human" window is its own): SDL's
        # dummy video driver, so that pygame envs open no display, and SDL does not print
        # "error: XDG_RUNTIME_DIR is invalid or not set" at each render on a machine with no session.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if path is not None and not Path(path).is_file():
            raise ValueError(f"{flag} {path!r}: no such file (the current directory is {os.getcwd()})")
    options: dict[str, Any] = {"token": args.token or os.environ.get(TOKEN_ENV) or None}
    if args.tls_cert is not None:
        options["tls"] = (args.tls_cert, args.tls_key)
    if args.max_message_size is not None:
        options["max_message_size"] = args.max_message_size
    address = f"unix:{args.unix}" if args.unix else f"{args.host}:{args.port}"
    for flag, value in (("--keepalive-min-time", args.keepalive_min_time), ("--max-ping-strikes", args.max_ping_strikes)):
        if not value > 0:
            raise ValueError(f"{flag} {value:g}: expected a number above 0")
    return Server(serve_target(args.target), kind=args.kind, address=address,
                  render=render, timeout=args.timeout, workers=args.workers,
                  processes=args.processes, inline_below=args.inline_below, max_worlds=args.max_worlds,
                  max_worlds_per_connection=args.max_worlds_per_connection, orphan_lifetime=args.orphan_lifetime,
                  limits=ConnectionLimits(max_connections=args.max_connections,
                                          min_ping_interval=args.keepalive_min_time,
                                          max_ping_strikes=args.max_ping_strikes),
                  health_without_token=args.health_without_token, metrics_port=args.metrics_port,
                  metrics_host=args.metrics_host, shared_memory=args.shared_memory,
                  max_shared_memory=args.max_shared_memory, **options).start()


def connect_line(server: Any, *, token: str | None = None, tls_ca: str | None = None) -> str:
    """A ready-to-paste Python line that connects to what ``server`` serves.

    A multi-agent world is named with its agents (one env is built to learn
    them); if that env cannot be built without settings, the line leaves them out.
    ``token``: the server's token, shown as given (``--token``) or, when it came
    from ``DMRPC_GYM_TOKEN``, read from there. ``tls_ca``: the certificate the
    client verifies the server with (``tls=``).
    """
    host, _, port = server.address.rpartition(":")
    address = server.address if server.address.startswith("unix:") else (
        f"{'localhost' if host in ('0.0.0.0', '::', '[::]') else host}:{port}")
    kind, agents = server.factory.kind, None
    if kind != "gym":
        try:
            with contextlib.redirect_stdout(sys.stderr):   # what the env prints is no line of ours
                env, kind = server.factory.make({})
        except Exception:  # noqa: BLE001 - the line is a courtesy; serving goes on
            env = None
        if env is not None:
            agents = list(getattr(env, "possible_agents", []) or []) or None
            try:
                env.close()
            except Exception:  # noqa: BLE001
                pass
    from dmrpc_gym.transport import TOKEN_ENV
    imports, extra = "", ""
    quote = json.dumps           # one quoting style on the line: double quotes, as Python reads them
    if tls_ca is not None:
        extra += f", tls={quote(str(Path(tls_ca).resolve()))}"
    if token is not None:
        if token == os.environ.get(TOKEN_ENV):
            imports, extra = "import os; ", extra + f", token=os.environ[{quote(TOKEN_ENV)}]"
        else:
            extra += f", token={quote(token)}"
    if kind in ("pettingzoo", "aec"):
        agents_arg = f", agents={quote(agents)}" if agents else ""
        reader = "aec_env" if kind == "aec" else "parallel_env"      # turn by turn, or in rounds
        return f'{imports}import dmrpc_gym; env = dmrpc_gym.{reader}("{address}"{agents_arg}{extra})'
    return (f'{imports}import gymnasium as gym, dmrpc_gym; '
            f'env = gym.make("dmrpc/Remote-v0", address="{address}"{extra})')


def serve_until_stopped(args: argparse.Namespace) -> int:
    """Serve as ``args`` say until stopped (then 0); ``ValueError``, ``TypeError``, ``OSError``
    or ``ImportError`` when the target cannot be served.

    SIGTERM drains (:meth:`~dmrpc_gym.server.Server.drain`): no new worlds, running episodes
    have ``--grace`` seconds, then the server stops. A second SIGTERM, or SIGINT (Ctrl-C),
    stops it at once: open streams end UNAVAILABLE "server shutting down".
    """
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be within 0..65535, got {args.port}")
    if not args.grace >= 0:
        raise ValueError(f"--grace must be a number of seconds >= 0, got {args.grace}")
    server = start_server(args)
    signals = Signals()
    from dmrpc_gym.transport import TOKEN_ENV
    # The line may build (and close) an env to learn the agents: before the address is printed, so that
    # no client's world is being built beside it (two pygame envs made and closed at once can crash).
    line = connect_line(server, token=args.token or os.environ.get(TOKEN_ENV) or None, tls_ca=args.tls_cert)
    print(f"serving {server.factory.name} on {server.address}", flush=True)
    print(f"connect from Python: {line}", flush=True)
    if server.metrics_address is not None:
        print(f"metrics on http://{server.metrics_address}/metrics", flush=True)
    drainer = None
    try:
        while not server.wait(0):
            asked = signals.wait(0.5)
            if asked == "now":
                break
            if asked == "drain":
                said = (f"draining: no new worlds; running episodes have {args.grace:g} s "
                        "(SIGTERM again or Ctrl-C stops at once)")
                drainer = threading.Thread(target=server.drain, args=(args.grace, lambda: print(said, flush=True)),
                                           name="dmrpc-gym drain")
                drainer.start()
    finally:
        server.stop()
        if drainer is not None:
            drainer.join()
    return 0                   # Ctrl-C and SIGTERM are a server's normal end: stopped, status 0


class Signals:
    """What the signals sent to ``serve`` ask: the first SIGTERM ``"drain"``, a second SIGTERM or
    a SIGINT ``"now"`` (installed only in the main thread, where Python runs signal handlers).

    >>> signals = Signals(install=False)
    >>> signals.received(signal.SIGTERM); signals.wait(0), signals.wait(0)
    ('drain', None)
    >>> signals.received(signal.SIGTERM); signals.wait(0)
    'now'
    """

    def __init__(self, install: bool = True):
        self._asked: list[str] = []
        self._terms = 0
        self._event = threading.Event()
        if install and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda number, frame: self.received(number))

    def received(self, number: int) -> None:
        """Signal ``number`` came (a signal handler's work: note it, nothing more)."""
        if number == signal.SIGTERM:
            self._terms += 1
        self._asked.append("drain" if number == signal.SIGTERM and self._terms == 1 else "now")
        self._event.set()

    def wait(self, timeout: float) -> str | None:
        """The oldest request not yet taken, waiting up to ``timeout`` seconds for one; None: none came."""
        if not self._asked:
            self._event.wait(timeout)
        self._event.clear()
        return self._asked.pop(0) if self._asked else None
