"""Running the service: an HTTP/2 gRPC listener on its own event loop in a background thread.

All streams of a server share that one loop, so world state needs no locks and
multi-agent waits are asyncio events with timeouts. Env calls run off the loop,
on a bounded pool of worker threads (:mod:`~dmrpc_gym.server.running.workers`), one
at a time per env, so that worlds step concurrently; with ``processes=N`` the
envs live in worker processes (:mod:`~dmrpc_gym.server.running.processes`). The transport is
:class:`~dmrpc_gym.transport.GrpcProtocol` (its cost against grpcio's servers is in
``benchmarks/README.md``). Several servers in one process each have their own
loop and thread.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any, Callable, Sequence

from dmrpc_gym.server.envs.factories import Factory
from dmrpc_gym.transport import (DEFAULT_MAX_MESSAGE, MAX_SHARED, ConnectionLimits, GrpcProtocol, busy_selector,
                                 SharedMemoryHost, behind_tls, listen_same_host, listen_unix, parse_address,
                                 remove_socket_file, same_host_settings, server_context, token_metadata, unix_address,
                                 unix_path)
from dmrpc_gym.server.serving.health import Health
from dmrpc_gym.server.worlds.registry import WorldRegistry
from dmrpc_gym.server.serving.metrics import MetricsEndpoint, check_metrics_port
from dmrpc_gym.server.serving.stats import ServerStats
from dmrpc_gym.server.serving.services import served_methods
from dmrpc_gym.server.running.workers import INLINE_BELOW, WorkerPool, default_workers
from dmrpc_gym._version import __version__
from dmrpc_gym.protocol.fidelity import FIDELITY_FEATURE
from dmrpc_gym.protocol.info import INFO_FEATURE
from dmrpc_gym.protocol.wire import FEATURES_METADATA, SERVER_METADATA

__all__ = ["Server", "serve"]

log = logging.getLogger("dmrpc_gym.server")

#: What our server says of itself in every response's headers: its version, and the features
#: (beyond dm_env_rpc) that our client may use with it.
RESPONSE_HEADERS = ((SERVER_METADATA, __version__), (FEATURES_METADATA, f"{INFO_FEATURE},{FIDELITY_FEATURE}"))

_START_TIMEOUT = 30.0
_STOP_MARGIN = 5.0
# Seconds stop() waits for the envs' closes (a game process quitting, say) before it returns.
_CLOSE_WAIT = 3.0


class Server:
    """A dm_env_rpc server for a gymnasium or PettingZoo env factory, in background threads.

    Args:
        factory: a gymnasium env id (``"CartPole-v1"``), ``"module:factory"``, or a
            callable returning a gymnasium ``Env`` or a PettingZoo ``ParallelEnv``.
            CreateWorld settings become its keyword arguments (``seed`` seeds reset).
        kind: ``"gym"``, ``"pettingzoo"`` or None (told by the envs the factory makes).
        address: ``host:port`` to listen on (port 0 picks a free port), ``unix:PATH`` for a
            Unix domain socket (:mod:`~dmrpc_gym.transport.unix`: mode 0600, a stale file
            replaced, removed at stop), or a list of them to listen on each.
        render: True to offer the ``RGB`` observation of envs that render
            ``rgb_array`` (rendered only when a client requests it), False for
            none, or a render mode to build envs with (``"human"``).
        timeout: seconds a multi-agent wait may see no progress before it fails.
        default_world: whether JoinWorld with an empty world name joins a world
            made on first use with no settings.
        workers: threads that env calls run on (None: 64, started as needed);
            envs that release the GIL overlap up to this many. 0 runs envs on
            the event loop (one at a time; the least overhead per step).
        inline_below: seconds; an env whose recent steps each took less runs
            its steps on the event loop, where they cost less than a thread
            hand-off (see :mod:`~dmrpc_gym.server.running.workers`); 0: never (always
            with ``processes``).
        processes: 0 to keep envs in the server's process, or the number of
            worker processes (``spawn``) to build and step them in, for envs
            that hold the GIL; the factory must then be importable by the
            workers (an env id, ``"module:factory"`` or a module-level callable).
        tls: serve TLS (ALPN ``h2``): ``(certfile, keyfile)`` or an ``ssl.SSLContext``.
        token: a shared secret every call must carry as metadata
            ``authorization: Bearer <token>``; others are answered UNAUTHENTICATED.
        max_message_size: the largest request accepted, in bytes (RESOURCE_EXHAUSTED beyond).
        limits: what connections may cost (their number, streams, timeouts, reset and
            ping rates): a :class:`~dmrpc_gym.transport.limits.ConnectionLimits`; None: its defaults.
        max_worlds: worlds held at most; CreateWorld past it is RESOURCE_EXHAUSTED.
        max_worlds_per_connection: worlds one connection may have made and not destroyed.
        orphan_lifetime: seconds a world whose creator has gone stays with no agent
            joined (any connection may join it by name meanwhile); then it is destroyed.
        health_without_token: serve gRPC health checking (:mod:`~dmrpc_gym.server.serving.health`)
            without the token, for probes that cannot send one (every other call still needs it).
        metrics_port: serve Prometheus metrics over HTTP on this port (0: the OS picks;
            :attr:`metrics_address` says which), from :attr:`stats`; None (the default): none.
            Needs prometheus-client (the ``metrics`` extra): ``ImportError`` naming it otherwise.
        metrics_host: the interface of the metrics port (None: the host of the first TCP address,
            else 127.0.0.1).
        shared_memory: offer shared memory to our clients on the same host (True, the default): their
            large tensors then travel through a region of theirs (:mod:`~dmrpc_gym.transport.shared_memory`),
            and (without TLS) their TCP connections move to a Unix socket (:mod:`~dmrpc_gym.transport.same_host`);
            False (``serve --no-shared-memory``): plain messages only, over the addresses given.
        max_shared_memory: the largest region one connection may give the server, in bytes (default 1 GiB).

    Beside ``Process`` it serves ``grpc.health.v1.Health`` and server reflection
    (:mod:`~dmrpc_gym.server.serving.reflection`); :meth:`drain` lets running episodes finish before it stops.

    :attr:`stats` (:class:`~dmrpc_gym.server.serving.stats.ServerStats`) counts what the server does, for
    the metrics and ``dmrpc-gym status`` alike.
    ``start()`` returns the server, ``address`` / ``port`` say where it listens,
    ``stop()`` is idempotent and never hangs; it is also a context manager.
    Resolving the factory (an unknown env id, a missing module) raises
    ``ValueError`` here, before anything listens.

    >>> from dmrpc_gym.worlds.catch import Catch
    >>> with Server(Catch) as server:
    ...     server.address.startswith("127.0.0.1:") and server.port > 0
    True
    """

    def __init__(self, factory: Any, *, kind: str | None = None, address: str | Sequence[str] = "127.0.0.1:0",
                 render: bool | str = True, timeout: float = 30.0, default_world: bool = True,
                 workers: int | None = None, processes: int = 0, inline_below: float = INLINE_BELOW,
                 tls: Any = None, token: str | None = None, max_message_size: int = DEFAULT_MAX_MESSAGE,
                 limits: ConnectionLimits | None = None, max_worlds: int = 1024,
                 max_worlds_per_connection: int = 64, orphan_lifetime: float = 60.0,
                 health_without_token: bool = False, metrics_port: int | None = None,
                 metrics_host: str | None = None, shared_memory: bool = True, max_shared_memory: int = MAX_SHARED):
        check_metrics_port(metrics_port)
        if isinstance(max_shared_memory, bool) or not isinstance(max_shared_memory, int) or max_shared_memory < 1:
            raise ValueError(f"max_shared_memory must be a whole number of bytes >= 1, got {max_shared_memory!r}")
        self._shared_memory = (bool(shared_memory), max_shared_memory)
        #: The shared-memory offer (:class:`~dmrpc_gym.transport.SharedMemoryHost`) once started, or None.
        self.shared_memory: SharedMemoryHost | None = None       # before anything is built: a bad port, a missing package
        self.factory = Factory(factory, kind=kind, render=render)
        self.workers = default_workers() if workers is None else workers
        self._pool = WorkerPool(self.workers, inline_below=inline_below)   # checks the numbers
        self._processes: Any = None
        if processes:
            if not self.workers:
                raise ValueError("processes= needs worker threads to wait on the processes; "
                                 "leave workers at its default or give a number >= 1")
            self._pool.inline_below = 0.0   # a step in a process is a wait on a pipe: never on the loop
            from dmrpc_gym.server.running.processes import ProcessHost
            self._processes = ProcessHost(self.factory, processes)
        self._tls = server_context(tls)
        token_metadata(token)                 # checks it
        self._token, self._max_message = token, int(max_message_size)
        self._health_without_token = bool(health_without_token)
        if limits is not None and not isinstance(limits, ConnectionLimits):
            raise TypeError(f"limits must be a ConnectionLimits, got {type(limits).__name__}")
        self.limits = limits or ConnectionLimits()
        for name, value in (("max_worlds", max_worlds), ("max_worlds_per_connection", max_worlds_per_connection)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if isinstance(orphan_lifetime, bool) or not isinstance(orphan_lifetime, (int, float)) or orphan_lifetime <= 0:
            raise ValueError(f"orphan_lifetime must be a positive number of seconds, got {orphan_lifetime!r}")
        self._world_limits = {"max_worlds": max_worlds, "max_worlds_per_connection": max_worlds_per_connection,
                              "orphan_lifetime": float(orphan_lifetime)}
        self._binds = [address] if isinstance(address, str) else list(address)
        if not self._binds:
            raise ValueError("address: give at least one address to listen on")
        for bind in self._binds:
            if unix_path(bind) is None:
                parse_address(bind)                  # ValueError naming it
        if timeout is None or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.default_world = default_world
        self._where: list[str] | None = None    # the addresses listened on, once started
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._listeners: list[Any] = []
        self._connections: set = set()
        self._registry: WorldRegistry | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.stats = ServerStats(timed=metrics_port is not None)
        tcp = [parse_address(bind)[0] for bind in self._binds if unix_path(bind) is None]
        self._metrics_at = (metrics_host or (tcp[0] if tcp else "127.0.0.1"), metrics_port)
        self._metrics: MetricsEndpoint | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> "Server":
        """Listen and serve in a background thread; returns ``self``. ``OSError`` when the address is busy."""
        with self._lock:
            if self._stopped.is_set():
                raise RuntimeError("this server was stopped; create a new Server")
            if self._thread is not None:
                return self
            if self._processes is not None:
                self._processes.start()
            loop = asyncio.SelectorEventLoop(busy_selector())    # polls a little before it sleeps (busy_poll)
            ready: concurrent.futures.Future = concurrent.futures.Future()
            thread = threading.Thread(target=self._run, args=(loop, ready), daemon=True,
                                      name=f"dmrpc-gym-server {self.factory.name}")
            thread.start()
            try:
                self._where = ready.result(timeout=_START_TIMEOUT)
            except BaseException:
                if loop.is_running():
                    loop.call_soon_threadsafe(loop.stop)
                thread.join(_STOP_MARGIN)
                self._release_workers()
                raise
            self._loop, self._thread = loop, thread
        if self._metrics_at[1] is not None and self._metrics is None:
            try:
                self._metrics = MetricsEndpoint(self.stats, *self._metrics_at)
            except BaseException:
                self.stop()
                raise
        log.debug("serving %s on %s", self.factory.name, self.address)   # `serve` prints it
        return self

    def _run(self, loop: asyncio.AbstractEventLoop, ready: concurrent.futures.Future) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._listen(ready))
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            if not ready.done():
                ready.set_exception(exc)
            loop.close()
            return
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _listen(self, ready: concurrent.futures.Future) -> None:
        factory: Any = self.factory
        if self._processes is not None:
            from dmrpc_gym.server.running.processes import RemoteFactory
            factory = RemoteFactory(self.factory, self._processes)
        registry = WorldRegistry(factory, default_world=self.default_world, timeout=self.timeout,
                                 pool=self._pool, stats=self.stats, **self._world_limits)
        connections: set[GrpcProtocol] = set()
        loop = asyncio.get_running_loop()
        self._connections, self._registry = connections, registry
        stats = self.stats
        stats.registry, stats.connections, stats.loop = registry, connections, loop
        stats.max_connections = self.limits.max_connections

        headers = RESPONSE_HEADERS
        if self._shared_memory[0]:
            try:
                self.shared_memory = SharedMemoryHost(self._shared_memory[1])
            except (OSError, AttributeError) as err:     # no abstract Unix sockets here (not Linux)
                log.warning("shared memory is not offered: %s", err)
            else:
                self.shared_memory.start(loop)
                headers += (self.shared_memory.header,)
        stats.shared_memory = self.shared_memory
        methods = served_methods(registry, Health(registry), self._health_without_token, self.shared_memory)

        announced: tuple = ()

        def grpc() -> GrpcProtocol:
            return GrpcProtocol(methods, connections, token=self._token,
                                max_message_size=self._max_message, limits=self.limits,
                                app_headers=headers, traffic=stats.traffic, settings=announced)
        protocol = behind_tls(grpc, self._tls, self.limits.handshake_timeout)
        if self.shared_memory is not None and self._tls is None:     # our clients on this host: a Unix socket
            listener, secret = await listen_same_host(grpc)
            self._listeners.append(listener)
            announced = same_host_settings(secret)
        where = []
        for bind in self._binds:
            path = unix_path(bind)
            if path is not None:
                self._listeners.append(await listen_unix(protocol, path))
                where.append(unix_address(path))
                continue
            host, port = parse_address(bind)
            listener = await loop.create_server(protocol, host, port, reuse_address=True)
            self._listeners.append(listener)
            where.append(f"{bind.rpartition(':')[0]}:{listener.sockets[0].getsockname()[1]}")
        ready.set_result(where)

    def stop(self, grace: float | None = None) -> None:
        """Stop serving: streams get ``grace`` seconds to finish, then end; worlds are closed.

        Idempotent and bounded in time, even when an env is stuck in a step.
        """
        with self._lock:
            if self._stopped.is_set():
                return
            self._stopped.set()
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            self._release_workers()
            return

        async def shutdown() -> None:
            try:
                for listener in self._listeners:
                    listener.close()
                if grace:
                    for connection in list(self._connections):
                        connection.go_away()     # open streams may finish; no new ones
                    deadline = loop.time() + grace
                    while self._connections and loop.time() < deadline:
                        await asyncio.sleep(0.05)
                for connection in list(self._connections):
                    connection.stop()            # its streams end UNAVAILABLE "server shutting down"
                await asyncio.sleep(0)          # let the streams' tasks see their cancellation
                closing = loop.time() + _STOP_MARGIN / 4
                while self._connections and loop.time() < closing:
                    await asyncio.sleep(0.01)   # the trailers and GOAWAY flushed, the peers' bytes read
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                if tasks:
                    await asyncio.wait(tasks, timeout=_STOP_MARGIN)
            finally:
                if self._registry is not None:
                    self._registry.close()
                if self.shared_memory is not None:
                    self.shared_memory.close()
                # Let the streams' tasks unwind before the loop stops (else grpc
                # reports each coroutine closed under it).
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in tasks:
                    task.cancel()
                if tasks:
                    await asyncio.wait(tasks, timeout=_STOP_MARGIN / 2)

        try:
            future = asyncio.run_coroutine_threadsafe(shutdown(), loop)
            future.result(timeout=(grace or 0.0) + _STOP_MARGIN)
        except Exception as exc:  # noqa: BLE001 - stopping is best effort and bounded
            log.warning("stopping the server on %s: %s", self.address, exc or type(exc).__name__)
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:
            pass  # the loop is already closed
        thread.join(_STOP_MARGIN)
        for path in filter(None, map(unix_path, self._binds)):
            remove_socket_file(path)
        if self._metrics is not None:
            self._metrics.close()
        self._release_workers()

    def drain(self, grace: float = 30.0, begun: Callable[[], None] | None = None) -> bool:
        """Drain, then stop: no world is created from now on (CreateWorld is answered UNAVAILABLE,
        saying the server drains), every connection gets GOAWAY, health reports NOT_SERVING, and
        the running episodes go on for up to ``grace`` seconds, until none runs (none starts). Then
        :meth:`stop`: what is left ends with UNAVAILABLE "server shutting down". The listeners stay
        open meanwhile, so that probes see NOT_SERVING. ``begun`` is called once the drain has
        begun (no world will be created). Returns True when every episode ended within the grace.
        A :meth:`stop` from another thread (a second signal) ends it at once.
        """
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not grace >= 0:
            raise ValueError(f"grace must be a number of seconds >= 0, got {grace!r}")
        loop, registry = self._loop, self._registry
        if loop is None or registry is None or self._stopped.is_set():
            self.stop()
            return True

        async def begin() -> None:
            registry.drain()
            for connection in list(self._connections):
                connection.go_away()             # open streams go on; new calls come on new connections

        async def episodes_end() -> bool:
            deadline = loop.time() + grace
            while registry.playing() and not self._stopped.is_set():
                if loop.time() >= deadline:
                    return False
                await asyncio.sleep(0.05)
            return not registry.playing()

        log.info("draining: no new worlds; running episodes have %g s", grace)
        try:
            asyncio.run_coroutine_threadsafe(begin(), loop).result(_STOP_MARGIN)
            if begun is not None:
                begun()
            ended = asyncio.run_coroutine_threadsafe(episodes_end(), loop).result(grace + _STOP_MARGIN)
        except Exception as exc:  # noqa: BLE001 - the loop stopped under it (a stop meanwhile)
            log.info("draining the server on %s: %s", self.address, exc or type(exc).__name__)
            ended = False
        self.stop()
        return ended

    @property
    def draining(self) -> bool:
        """Whether :meth:`drain` has begun (no world is created any more)."""
        return self._registry is not None and self._registry.draining

    def _release_workers(self) -> None:
        """End the worker threads once the envs' closes have run (waiting at most ``_CLOSE_WAIT``
        for an env stuck in a call), and the worker processes (terminated if stuck)."""
        self._pool.close(timeout=_CLOSE_WAIT)
        if self._processes is not None:
            self._processes.close()

    @property
    def env_pids(self) -> list[int]:
        """The process ids of the worker processes envs live in (empty without ``processes``)."""
        return self._processes.pids if self._processes is not None else []

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server is stopped (or ``timeout``); True when it is."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    # -- where -------------------------------------------------------------------------

    @property
    def addresses(self) -> list[str]:
        """Every address listened on, as clients name it (``host:port`` with the actual port for
        port 0, or ``unix:PATH``); ``RuntimeError`` before ``start()``."""
        if self._where is None:
            raise RuntimeError("the server is not started; call start() first")
        return list(self._where)

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of the Prometheus metrics (at ``/metrics``) once started, else None."""
        return self._metrics.address if self._metrics is not None else None

    @property
    def address(self) -> str:
        """The first of :attr:`addresses`."""
        return self.addresses[0]

    @property
    def port(self) -> int:
        """The TCP port of the first ``host:port`` address (the OS's choice for port 0)."""
        tcp = [a for a in self.addresses if unix_path(a) is None]
        if not tcp:
            raise RuntimeError(f"this server listens on {self.address} only: it has no TCP port")
        return int(tcp[0].rpartition(":")[2])

    def __repr__(self) -> str:
        where = ", ".join(self._where if self._where is not None else self._binds)
        state = "stopped" if self._stopped.is_set() else ("serving" if self._where else "not started")
        return f"Server({self.factory.name!r}, {where}, {state})"


def serve(factory: Any, port: int = 0, host: str = "127.0.0.1", **options: Any) -> Server:
    """Start a :class:`Server` for ``factory`` on ``host:port`` and return it (running in the background).

    >>> server = serve("CartPole-v1")
    >>> server.port > 0
    True
    >>> server.stop()
    """
    return Server(factory, address=f"{host}:{port}", **options).start()
