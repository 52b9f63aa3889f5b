"""Envs in worker processes: for pure-Python envs that hold the GIL, so that worlds use more than one core.

With ``Server(..., processes=N)`` every env (a gym agent's, a PettingZoo
world's) is built and stepped in one of ``N`` worker processes, started with
the ``spawn`` context (no fork of a threaded server). The server holds a
:class:`RemoteEnv` per env: it has what the worlds use (spaces, ``render_mode``,
``possible_agents`` / ``agents``, ``reset``, ``step``, ``render``, ``close``)
and forwards the calls over a pipe; the server's worker threads wait on those
pipes without the GIL. A new env goes to the process holding the fewest envs;
the calls of the envs of one process run one at a time.

The factory must reach the workers: an env id, ``"module:factory"``, or a
callable that pickles by reference (a module-level class or function, or a
``functools.partial`` of one; not a lambda or a local function). Env ids
registered at runtime are handed to the workers with their ``EnvSpec``.
``info`` dicts come back in the form they cross the wire in
(:mod:`dmrpc_gym.protocol.info`), so what cannot reach the client is marked
in the worker, not lost in the pipe.

>>> from dmrpc_gym.server.envs.factories import Factory
>>> host = ProcessHost(Factory("dmrpc_gym.worlds.catch:Catch"), 1).start()
>>> env, kind = host.make({"rows": 5})
>>> kind, env.observation_space.shape, env.reset(seed=0)[0].shape
('gym', (5, 10), (5, 10))
>>> import os
>>> env.pid != os.getpid()
True
>>> host.close()
"""
from __future__ import annotations

import itertools
import logging
import multiprocessing
import pickle
import signal
import threading
from typing import Any, Mapping

import gymnasium as gym

from dmrpc_gym.protocol.info import pack_info, unpack_info
from dmrpc_gym.server.serving import status
from dmrpc_gym.server.envs.factories import Factory, close_quietly

__all__ = ["ProcessHost", "RemoteEnv", "RemoteFactory"]

log = logging.getLogger("dmrpc_gym.server")

_STOP_WAIT = 2.0
_START_WAIT = 120.0   # a loaded machine may take long to start Python and import gymnasium


# -- the worker process ------------------------------------------------------------------

def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it pickles, else a RuntimeError saying what it was."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - anything unpicklable is described instead
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _describe(env: Any, kind: str) -> dict[str, Any]:
    """What the server reads of a new env, once."""
    info: dict[str, Any] = {"kind": kind, "render_mode": getattr(env, "render_mode", None),
                            "metadata": dict(getattr(env, "metadata", None) or {})}
    if kind == "gym":
        info["spaces"] = (env.observation_space, env.action_space)
    else:
        possible = list(getattr(env, "possible_agents", []) or [])
        info["possible_agents"] = possible
        info["agents"] = list(getattr(env, "agents", []) or [])
        info["spaces"] = {a: (env.observation_space(a), env.action_space(a)) for a in possible}
    return info


def _agents(env: Any, kind: str) -> list | None:
    return None if kind == "gym" else list(env.agents)


def _answer(factory: Factory, envs: dict, op: str, key: int, args: tuple) -> Any:
    if op == "make":
        env, kind = factory.make(args[0])
        if kind in ("dm_env", "aec"):   # a dm_env's discount and specs, a turn-based game's turns,
            close_quietly(env)          # do not cross to the server process (yet)
            what = "dm_env envs" if kind == "dm_env" else "turn-based PettingZoo AEC games"
            raise status.failed_precondition(
                f"{factory.name} makes {what}, which are served in the server's own process "
                f"only: serve it without processes= (--processes)")
        envs[key] = (env, kind)
        return _describe(env, kind)
    if op == "close":
        env, _ = envs.pop(key, (None, None))
        if env is not None:
            close_quietly(env)
        return None
    env, kind = envs[key]
    if op == "reset":
        obs, info = env.reset(seed=args[0], options=args[1])
        return obs, pack_info(info), _agents(env, kind)
    if op == "step":
        *result, info = env.step(args[0])
        return (*result, pack_info(info), _agents(env, kind))
    if op == "render":
        return env.render()
    raise ValueError(f"unknown request {op!r}")


def _serve(conn: Any, target: Any, kind: str | None, render: Any, spec: Any) -> None:
    """A worker process: say ready (or why not), then build envs and answer calls until told to exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the server's to handle: it stops us
    envs: dict[int, tuple[Any, str]] = {}
    try:
        if spec is not None and spec.id not in gym.registry:
            gym.registry[spec.id] = spec
        factory: Factory | None = Factory(target, kind=kind, render=render)
        failure: BaseException | None = None
    except Exception as exc:  # noqa: BLE001 - every request gets this answer
        factory, failure = None, exc
    conn.send(None if failure is None else _portable(failure))
    try:
        while True:
            try:
                op, key, args = conn.recv()
            except (EOFError, OSError):
                return
            if op == "exit":
                return
            try:
                if failure is not None:
                    raise failure
                reply = (True, _answer(factory, envs, op, key, args))  # type: ignore[arg-type]
            except BaseException as exc:  # noqa: BLE001 - the server reports it
                reply = (False, _portable(exc))
            try:
                conn.send(reply)
            except Exception as exc:  # noqa: BLE001 - e.g. an observation that does not pickle
                conn.send((False, RuntimeError(f"the answer to {op} could not be sent: {exc}")))
    finally:
        for env, _ in envs.values():
            close_quietly(env)


# -- the server's side ----------------------------------------------------------------------

class _Worker:
    """One worker process and the pipe to it (one request at a time)."""

    def __init__(self, context: Any, args: tuple, index: int):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, *args), daemon=True,
                                       name=f"dmrpc-gym-env-{index}")
        self.process.start()
        child.close()
        self.lock = threading.Lock()
        self.envs = 0                          # envs living in this process (changed by add_envs)
        self._count_lock = threading.Lock()

    def add_envs(self, n: int) -> None:
        """Count ``n`` more (or fewer) envs here; called from several worker threads."""
        with self._count_lock:
            self.envs += n

    def ready(self, name: str) -> None:
        """Wait for the process to have loaded the factory; ``ValueError`` saying why it could not."""
        try:
            if not self.conn.poll(_START_WAIT):
                raise ValueError(f"an env worker process did not start within {_START_WAIT:g} s")
            failure = self.conn.recv()
        except (EOFError, OSError):
            raise ValueError(f"an env worker process exited while loading {name} "
                             f"(exit code {self.process.exitcode}); is it importable there?") from None
        if failure is not None:
            raise ValueError(f"an env worker process cannot load {name}: {failure}")

    def request(self, op: str, key: int, *args: Any) -> Any:
        with self.lock:
            try:
                self.conn.send((op, key, args))
                ok, value = self.conn.recv()
            except (EOFError, OSError) as exc:
                code = self.process.exitcode
                raise RuntimeError(f"the env worker process {self.process.pid} is gone "
                                   f"(exit code {code}): {type(exc).__name__}") from None
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        if self.lock.acquire(timeout=_STOP_WAIT / 4):
            try:
                self.conn.send(("exit", 0, ()))
            except (OSError, ValueError):
                pass
            finally:
                self.lock.release()
            self.process.join(_STOP_WAIT)
        if self.process.is_alive():
            self.process.terminate()   # stuck in an env call
            self.process.join(_STOP_WAIT)
        if self.process.is_alive():
            self.process.kill()
        self.conn.close()


class RemoteEnv:
    """The server's handle on an env in a worker process: what the worlds read and call of an env.

    A gym env's ``observation_space`` / ``action_space`` are attributes; a
    PettingZoo env's are methods of the agent, as on the envs themselves.
    """

    def __init__(self, worker: _Worker, key: int, info: Mapping[str, Any]):
        self._worker, self._key = worker, key
        self.kind: str = info["kind"]
        self.render_mode = info["render_mode"]
        self.metadata = info["metadata"]
        self.pid = worker.process.pid
        self._closed = False
        if self.kind == "gym":
            self.observation_space, self.action_space = info["spaces"]
        else:
            spaces = info["spaces"]
            self.possible_agents = list(info["possible_agents"])
            self.agents = list(info["agents"])
            self.observation_space = lambda agent: spaces[agent][0]
            self.action_space = lambda agent: spaces[agent][1]

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, info, agents = self._worker.request("reset", self._key, seed, options)
        if agents is not None:
            self.agents = agents
        return obs, unpack_info(info)

    def step(self, action: Any) -> tuple:
        obs, reward, terminated, truncated, info, agents = self._worker.request("step", self._key, action)
        if agents is not None:
            self.agents = agents
        return obs, reward, terminated, truncated, unpack_info(info)

    def render(self) -> Any:
        return self._worker.request("render", self._key)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._worker.add_envs(-1)
            self._worker.request("close", self._key)

    def __repr__(self) -> str:
        return f"RemoteEnv({self.kind}, pid={self.pid})"


def check_portable(factory: Factory) -> Any:
    """The worker's copy of what builds envs; ``ValueError`` when ``factory`` cannot reach a process."""
    spec = gym.spec(factory.env_id) if factory.env_id else None
    try:
        pickle.dumps((factory.target, spec))
    except Exception as exc:  # noqa: BLE001 - any pickling failure means the same
        raise ValueError(
            f"processes= needs a factory a worker process can import: an env id, 'module:factory', "
            f"or a module-level callable; {factory.name} cannot be pickled ({type(exc).__name__}: {exc})") from None
    return spec


class ProcessHost:
    """``count`` worker processes that build and hold envs for one server (see the module doc)."""

    def __init__(self, factory: Factory, count: int, context: str = "spawn"):
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"processes must be a whole number >= 1, got {count!r}")
        self.factory, self.count = factory, count
        self._spec = check_portable(factory)
        self._context = multiprocessing.get_context(context)
        self._workers: list[_Worker] = []
        self._keys = itertools.count(1)
        self._lock = threading.Lock()

    def start(self) -> "ProcessHost":
        """Start the processes and wait until each has loaded the factory; returns ``self``.

        ``ValueError`` (the processes stopped) when one cannot load it.
        """
        render = self.factory.render_mode or False
        args = (self.factory.target, self.factory.kind, render, self._spec)
        with self._lock:
            while len(self._workers) < self.count:
                self._workers.append(_Worker(self._context, args, len(self._workers)))
            workers = list(self._workers)
        try:
            for worker in workers:
                worker.ready(self.factory.name)
        except BaseException:
            self.close()
            raise
        return self

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids."""
        return [w.process.pid for w in self._workers]

    def make(self, kwargs: Mapping[str, Any]) -> tuple[RemoteEnv, str]:
        """Build an env in the least-loaded process (blocking): ``(env, kind)``, as ``Factory.make``."""
        with self._lock:
            if not self._workers:
                raise status.failed_precondition("the server's env processes are stopped")
            worker = min(self._workers, key=lambda w: w.envs)
            worker.add_envs(1)
            key = next(self._keys)
        try:
            info = worker.request("make", key, dict(kwargs))
        except BaseException:
            worker.add_envs(-1)
            raise
        return RemoteEnv(worker, key, info), info["kind"]

    def close(self) -> None:
        """Stop the processes: ask them to exit, then terminate those stuck in an env call (bounded)."""
        with self._lock:
            workers, self._workers = self._workers, []
        threads = [threading.Thread(target=w.stop, daemon=True) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(3 * _STOP_WAIT)


class RemoteFactory:
    """A :class:`Factory` whose ``make`` builds envs in a :class:`ProcessHost`; everything else is the factory's."""

    def __init__(self, factory: Factory, host: ProcessHost):
        self._factory, self.host = factory, host

    def make(self, kwargs: Mapping[str, Any], seed: int | None = None) -> tuple[RemoteEnv, str]:
        return self.host.make(kwargs)    # (dm_env envs, the only ones built with a seed, are not served here)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._factory, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_factory", "host"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._factory, name, value)
