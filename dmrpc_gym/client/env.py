"""``DmRpcEnv``: a dm_env_rpc world as a ``gymnasium.Env``."""
from __future__ import annotations

import time
import warnings
from typing import Any, Mapping, Sequence

import grpc
import gymnasium as gym
import numpy as np

from dmrpc_gym.client.addresses import following
from dmrpc_gym.client.agent import RemoteAgent, RewardFn, State
from dmrpc_gym.client.connection import Connection, settings_tensors, transport_options
from dmrpc_gym.client.env_facts import served_metadata, with_steps
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.fidelity import lists_header, render_header
from dmrpc_gym.client.lifecycle import RemoteResource, reset_reconnecting, warn_reconnected
from dmrpc_gym.client.properties import server_instance
from dmrpc_gym.client.seeding import AUTO, SeedRoute
from dmrpc_gym.client.window import FrameWindow
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.transport import SharedConnections

__all__ = ["DmRpcEnv", "State", "open_world", "close_world", "check_alone", "RESET_OPTIONS"]

#: The keys ``reset(options=...)`` understands.
RESET_OPTIONS = ("settings", "world_settings")


def check_options(options: Mapping[str, Any] | None, known: Sequence[str] = RESET_OPTIONS) -> dict[str, Any]:
    """``options`` as a dict; ``ValueError`` naming any key nobody reads (a typo would be ignored)."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"unknown reset option{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(map(repr, unknown))}; expected {', '.join(map(repr, known))}")
    return options


def open_world(connection: Connection, world_settings: Mapping[str, Any] | None,
               world_name: str | None) -> tuple[str, bool]:
    """Create a world (or take ``world_name`` to join one): ``(name, created)``."""
    if world_name is not None:
        if world_settings:
            raise ValueError("give world_settings= to create a world, or world_name= to join one, not both")
        return world_name, False
    response = connection.send(pb.CreateWorldRequest(settings=settings_tensors(world_settings)))
    return response.world_name, True


def close_world(connection: Connection, world_name: str, timeout: float = 2.0) -> None:
    """DestroyWorld, best effort and bounded in time.

    A world is only destroyed once nobody is joined; right after agents left (or
    their streams closed) the server may still be seeing them out, so a refusal
    for that reason is retried briefly.
    """
    if connection.closed:
        return
    connection.shorten_timeout(timeout)
    deadline = time.monotonic() + min(timeout, 0.5)
    while True:
        try:
            connection.send(pb.DestroyWorldRequest(world_name=world_name))
            return
        except DmRpcError as err:
            if err.code_name != "FAILED_PRECONDITION" or time.monotonic() > deadline:
                return
            time.sleep(0.05)
        except Exception:
            return


def _names(items: Sequence[str]) -> str:
    return ", ".join(repr(str(a)) for a in items)


def check_alone(connection: Connection, world_name: str, created: bool, where: str) -> None:
    """Refuse (or warn about) a single agent in a multi-agent world whose other agents are not joined.

    A multi-agent world starts an episode only once all its agents are joined,
    so a lone agent's first step would wait for the server's timeout. Servers
    built with :mod:`dmrpc_gym.server` say which agents are missing (the
    ``missing_agents`` property); other servers are not asked (they name
    themselves in their response headers, and a minimal server may not survive
    an extension request it does not know). A world
    this client created alone cannot have been found by anyone else yet:
    ``ValueError``. A world joined by name may be joined by others later: a warning.
    """
    if connection.server_software is None:
        return
    from dmrpc_gym.client.properties import Properties
    props = Properties(connection)
    try:
        listed = props.specs()
        if "missing_agents" not in listed:   # listed first: a single-agent world is not asked
            return
        maker = "aec_env" if "agent_selection" in listed else "parallel_env"    # turn-based: AEC
        missing = [str(a) for a in props["missing_agents"].reshape(-1).tolist()]
        if not missing:
            return
        everyone = [str(a) for a in props["agents"].reshape(-1).tolist()]
        me = str(props["agent"].item())
    except (DmRpcError, KeyError, ValueError, TypeError):
        return                          # not one of our multi-agent worlds: nothing is known
    what = (f"world {world_name!r} at {where} is a multi-agent world (agents {_names(everyone)}): "
            f"an episode starts once every agent is joined")
    if created:
        raise ValueError(
            f"{what}, and this DmRpcEnv created it and joined alone as {me!r}, so its first step would "
            f"wait for {_names(missing)} until the server's timeout. Play every agent with "
            f"dmrpc_gym.{maker}({where!r}, agents={everyone!r}), or join a world that one "
            f"client per agent joins with world_name=")
    warnings.warn(f"{what}; this env plays {me!r} and reset() waits until {_names(missing)} "
                  f"have joined too (up to the server's timeout)", stacklevel=3)


def _takes_nothing(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Dict) and not space.spaces


def _start_hint(err: ValueError, space: gym.Space, action: Any) -> ValueError:
    """``err`` with a hint where the action space starts elsewhere than 0 and ``action`` lies in
    ``0..n-1``: what a library that ignores ``start`` (Stable-Baselines3 does) sends.

    >>> _start_hint(ValueError("action 'paddle': value 2 is above the maximum 1"),
    ...             gym.spaces.Discrete(3, start=-1), 2)        # doctest: +ELLIPSIS
    ValueError("action 'paddle': value 2 is above the maximum 1 (the action space is Discrete(3, start=-1): ...FlatSpaces...")
    >>> _start_hint(ValueError("value 5 is above the maximum 1"), gym.spaces.Discrete(3, start=-1), 5)
    ValueError('value 5 is above the maximum 1')
    """
    if isinstance(space, gym.spaces.Discrete):
        counts = space.n
    elif isinstance(space, gym.spaces.MultiDiscrete):
        counts = space.nvec
    else:
        return err
    try:
        values = np.asarray(action)
        zero_based = values.shape == np.shape(counts) and bool(np.all((values >= 0) & (values < counts)))
    except (TypeError, ValueError):
        zero_based = False
    if not zero_based or not np.any(space.start):
        return err
    return ValueError(f"{err} (the action space is {space}: a library that ignores `start`, as Stable-Baselines3 "
                      "does, sends 0..n-1; wrap the env in dmrpc_gym.integrations.flat_spaces.FlatSpaces, whose "
                      "spaces start at 0)")


class DmRpcEnv(RemoteResource, gym.Env):
    """A dm_env_rpc world as a gymnasium environment.

    Creates a world (``world_settings``) or joins ``world_name``, joins it as one
    agent, and maps its specs to spaces (see :mod:`dmrpc_gym.spaces`).
    TERMINATED ends an episode with ``terminated=True``, INTERRUPTED with
    ``truncated=True``. From a dmrpc_gym server the env is the served env: its
    own spaces, dtypes and ``info`` (:mod:`dmrpc_gym.protocol.fidelity`,
    :mod:`dmrpc_gym.protocol.info`); from any other server the spaces are those
    its TensorSpecs give, and ``info`` holds the observations that have no
    gymnasium space. The bridge's own view of the latest step is apart from
    ``info``: :attr:`state` (dm_env_rpc's) and :attr:`last_discount`.

    Args:
        address: the server, ``"host:port"`` or ``"unix:PATH"``, or an ordered list of servers that
            serve the same env to fail over along (below, and :mod:`~dmrpc_gym.client.addresses`); or
        channel: an existing ``grpc.Channel`` to use instead (then grpcio carries the calls).
        world_settings: CreateWorld settings of the world to create; or
        world_name: an existing world to join (not both).
        join_settings / reset_settings: JoinWorld settings, and ResetRequest settings sent on every reset.
        observations / actions: ``None`` (all; observations leave out reward, discount and the
            render observation), a name (that one as a bare space) or a list (a Dict subset).
        nested: dotted spec names (``pos.x``) become nested Dict spaces.
        reward / discount: an observation name, a callable ``(obs, state) -> float`` that
            reads every observation, or ``None`` (0.0 / 1.0). They never change the spaces.
        seed_setting: the reset setting ``reset(seed=...)`` travels as; ``"auto"``: ``seed``
            on a dmrpc_gym server, none elsewhere, said once (:mod:`~dmrpc_gym.client.seeding`).
        render_mode / render_observation: ``"rgb_array"``: ``render()`` returns the frame of the
            current state. A dmrpc_gym server builds the env with this render_mode (None: the
            env's default) and renders only when ``render()`` asks; another server's frames come
            from a uint8 HxWx3 observation (``render_observation``, default ``RGB``) sent with
            every step, which is said once.
        connect_timeout: seconds to reach the server and join, waiting for one that is
            starting; step_timeout: seconds per step (None: no limit).
        credentials / grpc_metadata: grpcio channel credentials and gRPC call metadata (``metadata`` is
            gymnasium's: the served env's own, below).
        tls / token / compression / max_message_size: TLS (True, a CA file, or an
            ``ssl.SSLContext``), the server's shared secret (default: ``$DMRPC_GYM_TOKEN``),
            gzip/deflate requests, and the largest answer accepted; they go to the
            :class:`~dmrpc_gym.client.connection.Connection`.
        keepalive: seconds (>= 10) in which nothing came after which the connection PINGs the
            server, so that a dead or frozen server is found (a PING unanswered for 20 s fails the
            call); None (default): every 10 s toward our own servers, none toward others; False:
            no PINGs (see :class:`~dmrpc_gym.client.connection.Connection`).
        reconnect: make a lost connection again on the next ``reset()`` (below).
        connections: a :class:`~dmrpc_gym.transport.client.pool.SharedConnections` to put this
            env's stream on the HTTP/2 connection it keeps for the server (a vector env's
            sub-envs share one); None: a connection of its own.
        shared_memory: between this env and a dmrpc_gym server on the same host, large tensors travel
            through shared memory (True, the default; ``connection.shared_memory`` says whether they do);
            False: every tensor in the messages (:mod:`~dmrpc_gym.transport.shared_memory`).

    With ``reconnect=True``, a connection lost between episodes is made again
    by the next ``reset()`` (within ``connect_timeout``, so a restarting server
    has that long to come back): a world this env created is created again with
    the same settings, a world joined by name is joined again. A loss in the
    middle of an episode still raises ``ConnectionError`` from that step; the
    next ``reset()`` reconnects. Each reconnection warns and counts in ``reconnects``.

    **A list of addresses** (``["host1:port", "host2:port"]``): the env connects to the
    first on the list that serves it, in order (``connection.address`` says which).
    With ``reconnect=True``, a server lost (the connection fails, or the server ends the
    stream UNAVAILABLE: it shuts down, or drains and refuses to start the next episode)
    sends the next ``reset()`` to the *next* address on the list, wrapping around, so
    the lost one is tried last; all within ``connect_timeout``, and the warning names
    the address it moved from and the one it moved to. The world is created there
    again with the same settings (a world joined by ``world_name=`` is joined by that
    name, so the servers must each have it). Without ``reconnect``, a list means only
    "the first that serves at connect time".

    >>> import gymnasium as gym, dmrpc_gym
    >>> env = gym.make("dmrpc/Catch-v0")
    >>> obs, info = env.reset(seed=1)
    >>> obs.shape, env.action_space
    ((10, 10), Discrete(3, start=-1, dtype=int8))
    >>> obs, reward, terminated, truncated, info = env.step(np.int8(0))
    >>> env.close()
    """

    #: What any DmRpcEnv can render; an instance's ``metadata`` is the served env's own (:func:`served_metadata`).
    metadata = {"render_modes": ["rgb_array", "human"]}

    def __init__(self, address: str | Sequence[str] | None = None, *, channel: grpc.Channel | None = None,
                 world_settings: Mapping[str, Any] | None = None, world_name: str | None = None,
                 join_settings: Mapping[str, Any] | None = None,
                 reset_settings: Mapping[str, Any] | None = None,
                 observations: str | Sequence[str] | None = None,
                 actions: str | Sequence[str] | None = None, nested: bool = False,
                 reward: RewardFn = "reward", discount: RewardFn = "discount",
                 seed_setting: str | None = AUTO, render_mode: str | None = None,
                 render_observation: str | None = None, connect_timeout: float | None = 10.0,
                 step_timeout: float | None = None, credentials: grpc.ChannelCredentials | None = None,
                 grpc_metadata: Sequence[tuple[str, str]] | None = None, tls: Any = None, token: str | None = None,
                 compression: str | None = None, max_message_size: int | None = None,
                 keepalive: float | bool | None = None, reconnect: bool = False,
                 connections: SharedConnections | None = None, shared_memory: bool = True):
        self._kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.reconnects = 0
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r}; DmRpcEnv renders {self.metadata['render_modes']} "
                             "('human' shows the served env's rgb_array frames in a window here, with pygame)")
        self.render_mode = render_mode
        self._window: FrameWindow | None = None
        self._max_episode_steps: int | None = None
        self._spec: Any = None
        self._reset_once = False
        self.reset_settings = dict(reset_settings or {})
        self._closed = False
        self._agent = None
        self.connection = self._connect()
        try:   # CreateWorld and JoinWorld are part of connecting: bounded by connect_timeout
            self.world_name, self._created = open_world(self.connection, world_settings, world_name)
            self._agent = RemoteAgent(
                self.connection, self.world_name, join_settings, observations=observations,
                actions=actions, nested=nested, reward=reward, discount=discount,
                render_observation=render_observation, render=render_mode is not None)
            where = self.connection.address if address is not None else "the server"
            check_alone(self.connection, self.world_name, self._created, where)
            self._seeds = SeedRoute(seed_setting, ours=self.connection.server_software is not None,
                                    where=where)
            self._instance = server_instance(self.connection) if reconnect and self._created else None
        except BaseException:
            self.close()
            raise
        self.connection.timeout = step_timeout
        self.observation_space = self._agent.observation_space
        self.action_space = self._agent.action_space
        self._properties = None
        facts = self._agent.exact.facts if self._agent.exact is not None else None
        self.metadata = served_metadata(facts)
        self._max_episode_steps = (facts or {}).get("max_episode_steps")
        if render_mode == "human":
            self._window = FrameWindow(self.metadata.get("render_fps"))

    spec = property(lambda self: self._spec, lambda self, spec: setattr(self, "_spec", with_steps(
        spec, self._max_episode_steps)), doc="gymnasium's ``EnvSpec`` (``gymnasium.make`` sets it), with the "
        "served env's ``max_episode_steps`` where it gives none (:func:`~dmrpc_gym.client.env_facts.with_steps`)")

    def _connect(self, lost: str | None = None) -> Connection:
        """A new connection from the constructor's arguments (the address list tried from the one
        after ``lost``, :func:`~dmrpc_gym.client.addresses.following`); answers are awaited
        ``connect_timeout`` (CreateWorld and JoinWorld are part of connecting) until ``step_timeout``
        takes over."""
        k = self._kwargs
        mode = "rgb_array" if k["render_mode"] == "human" else k["render_mode"]   # shown here: FrameWindow
        call = (*(k["grpc_metadata"] or ()), render_header(mode), *lists_header(k["world_settings"]))
        address = k["address"] if lost is None or k["address"] is None else following(k["address"], lost)
        return Connection(address, channel=k["channel"], credentials=k["credentials"], metadata=call,
                          connect_timeout=k["connect_timeout"], timeout=k["connect_timeout"],
                          **transport_options(k["tls"], k["token"], k["compression"], k["max_message_size"],
                                             k["keepalive"], k["connections"], k["shared_memory"]))

    def restore(self, why: str | None = None) -> None:
        """Connect again after the connection was lost, to the next address on the list (the same
        one if there is one), and join the world again: the same world while it exists
        (``world_name``, or the one this env created if the same run of a dmrpc_gym server still
        has it), else one created again with the same settings. ``reset()`` does it with
        ``reconnect=True``; a warning says so (``why``: what was lost)."""
        self._check_open()
        why = why or self.connection.failure or "the connection was lost"
        lost = self.connection.address
        self.connection.close()
        k = self._kwargs
        connection = self._connect(lost)
        try:
            name, created = self.world_name, False
            if self._created:
                instance = server_instance(connection, ask=self._instance is not None)
                rejoined = instance is not None and instance == self._instance and self._rejoin(connection)
                self._instance = instance
                if not rejoined:
                    name, created = connection.send(pb.CreateWorldRequest(
                        settings=settings_tensors(k["world_settings"]))).world_name, True
            if created or not self._created:
                self._agent.rejoin(connection, name, k["join_settings"])
            if not created:
                self._agent.state = State.RUNNING   # maybe mid-episode: the next reset sends a ResetRequest
        except BaseException:
            connection.close()
            raise
        connection.timeout = k["step_timeout"]
        self.connection, self.world_name, self._properties = connection, name, None
        self.reconnects += 1
        warn_reconnected(connection.address, created, name, why, lost)

    def _rejoin(self, connection: Connection) -> bool:
        """Join the world this env created again; False if the server no longer has it."""
        try:
            self._agent.rejoin(connection, self.world_name, self._kwargs["join_settings"])
            return True
        except DmRpcError as err:
            if err.code_name != "NOT_FOUND":
                raise
            return False

    @property
    def agent(self) -> RemoteAgent:
        """The joined agent behind this env (its connection, specs, codec and last state)."""
        return self._agent

    @property
    def seed_setting(self) -> str | None:
        """The reset setting that carries ``reset(seed=...)`` to the world (None: not sent)."""
        return self._seeds.name

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a new episode.

        ``options["settings"]`` adds ResetRequest settings; ``options["world_settings"]``
        first resets the whole world (ResetWorld). The seed travels to the server as the
        reset setting ``seed_setting`` names (by default ``seed``, on a dmrpc_gym server;
        see :mod:`~dmrpc_gym.client.seeding`). With ``reconnect=True`` a lost connection is made again first.
        """
        if self._kwargs["reconnect"] and not self._closed:
            result = reset_reconnecting(lambda: self.connection.failure is not None, self.restore,
                                        lambda: self._agent.reset(self.prepare_reset(seed, options)))
        else:
            result = self._agent.reset(self.prepare_reset(seed, options))
        if self._window is not None:
            self.render()
        return result

    def prepare_reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The client side of ``reset``: seed the client RNG, reset the world when asked,
        and return the ResetRequest settings. Vector envs call it, then pipeline the rest."""
        super().reset(seed=seed)
        self._check_open()
        options = check_options(options)
        self._reset_once = True
        if "world_settings" in options:
            self.connection.send(pb.ResetWorldRequest(
                world_name=self.world_name, settings=settings_tensors(options["world_settings"])))
            self._agent.state = State.INTERRUPTED
        return self._seeds.settings(self.reset_settings, options, seed)

    def step(self, action: Any):
        """Send ``action`` (checked against the action space first) and return the 5-tuple."""
        if self._closed:                 # (_check_open's test, without its call: every step passes here)
            raise RuntimeError("this DmRpcEnv is closed")
        if not self._reset_once:        # as gymnasium's OrderEnforcing (gymnasium.make's) refuses it
            raise gym.error.ResetNeeded("Cannot call env.step() before calling env.reset()")
        if action is None and not _takes_nothing(self.action_space):
            raise ValueError(f"step(None): expected an action of {self.action_space} "
                             "(None sends no action; only a world without actions takes it)")
        try:
            result = self._agent.step(action)
        except ValueError as err:
            raise _start_hint(err, self.action_space, action) from None
        if self._window is not None:
            self.render()
        return result

    @property
    def state(self) -> State:
        """dm_env_rpc's state after the latest step (``info`` is the served env's own)."""
        return self._agent.state

    @property
    def last_discount(self) -> float:
        """The discount of the latest step (``discount=`` says where it comes from)."""
        return self._agent.last_discount

    def render(self) -> np.ndarray | None:
        """The frame of the current state (uint8 HxWxC) in ``rgb_array`` mode (see ``render_mode``)."""
        if self.render_mode is None:
            gym.logger.warn("You are calling render method without specifying any render mode. "
                            "You can specify the render_mode at initialization, "
                            f'e.g. gym.make("{self.spec.id if self.spec else "dmrpc/Remote-v0"}", '
                            'render_mode="rgb_array")')
            return None
        self._check_open()
        if self._window is not None:
            self._window.show(self._agent.current_frame("rgb_array"))
            return None
        return self._agent.current_frame(self.render_mode)

    @property
    def properties(self):
        """The world's properties (dm_env_rpc properties extension), dict-like."""
        if self._properties is None:
            from dmrpc_gym.client.properties import Properties
            self._properties = Properties(self.connection)
        return self._properties

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this DmRpcEnv is closed")

    def share_region(self, region: Any, at: Mapping[tuple[str, int], int]) -> str:
        """Put this env's large tensors into ``region`` (a vector env's one region, which it owns) at the
        offsets ``at`` (``("a" or "o", uid) -> offset``, for every one its connection laid out), observations
        read as views of it (valid until this env's next step); returns :attr:`Connection.shared_memory`."""
        self._agent.plan_regions(region=region, at=at)
        if self.connection.regions.region is region:
            self.connection.regions.copy = False
        return self.connection.shared_memory

    def close(self) -> None:
        """Leave the world (destroying it if this env created it). Idempotent; never hangs."""
        if self._closed:
            return
        self._closed = True
        try:
            if getattr(self, "_window", None) is not None:
                self._window.close()
            if self._agent is not None:
                self._agent.leave()
            if getattr(self, "_created", False):
                close_world(self.connection, self.world_name)
        finally:
            self.connection.close()
