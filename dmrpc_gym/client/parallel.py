"""``DmRpcParallelEnv``: a multi-agent dm_env_rpc world as a PettingZoo ``ParallelEnv``.

dm_env_rpc's multi-agent rule is one connection per agent, every agent joined
to the same world, and a server may hold one agent's step until the others
have stepped. So the env opens one :class:`~dmrpc_gym.client.connection.Connection`
per agent, creates the world once (or joins ``world_name=``), joins all agents
at once, and sends every agent's StepRequest before it waits for any answer.
Agents finish independently: TERMINATED sets ``terminations[agent]``,
INTERRUPTED sets ``truncations[agent]``, and the agent leaves ``agents``.

>>> import dmrpc_gym
>>> env = dmrpc_gym.tag_env(size=5)        # the bundled Tag world, served in-process
>>> observations, infos = env.reset(seed=0)
>>> env.agents
['pursuer_0', 'pursuer_1', 'evader_0', 'evader_1']
>>> env.observation_space("evader_0").shape, env.action_space("evader_0")
((7,), Discrete(5))
>>> observations, rewards, terminations, truncations, infos = env.step(
...     {agent: env.action_space(agent).sample() for agent in env.agents})
>>> env.close()

Training with Stable-Baselines3 through SuperSuit, whose ``concat_vec_envs_v1`` copies the env by
pickling it (each copy re-created from the constructor's arguments, with its own connections and
world): the PettingZoo guide (``docs/guides/pettingzoo.md``) shows it, and runs in CI.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Sequence

import grpc
import numpy as np
from pettingzoo import ParallelEnv

from dmrpc_gym.client.addresses import following
from dmrpc_gym.client.agent import RemoteAgent, RewardFn, State
from dmrpc_gym.client.agents import AgentsArg, join_settings, per_agent, world_agents
from dmrpc_gym.client.seeding import AUTO, SeedRoute
from dmrpc_gym.client.connection import Connection, settings_tensors, transport_options
from dmrpc_gym.client.env import close_world, open_world
from dmrpc_gym.client.env_facts import parallel_metadata, share_spaces
from dmrpc_gym.client.exchanges import named_failure, receive_all, submit_all
from dmrpc_gym.client.lifecycle import RemoteResource, reset_reconnecting, warn_reconnected
from dmrpc_gym.client.properties import Properties, same_run, server_instance
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.fidelity import lists_header, render_header
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.transport import SharedConnections

__all__ = ["DmRpcParallelEnv", "join_settings", "world_agents", "AgentsArg"]

#: ``agents=``: a count, a list of names, or a dict name -> join settings.
class DmRpcParallelEnv(RemoteResource, ParallelEnv):
    """A multi-agent dm_env_rpc world as a PettingZoo ``ParallelEnv``.

    Args:
        address: ``"host:port"`` (or ``"unix:PATH"``) of the server (insecure unless ``credentials``), or
            a list to fail over along, as :class:`~dmrpc_gym.client.env.DmRpcEnv`'s (every agent on one).
        world_settings: CreateWorld settings (the world is created once, on the
            first agent's connection, and destroyed by ``close``).
        world_name: join this existing world instead of creating one.
        agents: ``None`` (the world's own agents, as a dmrpc_gym server names them; see
            :func:`world_agents`), a count ``n`` (``agent_0``..), a list of names, or a dict
            name -> join settings (see :func:`join_settings`).
        reset_settings: ResetRequest settings every agent sends on ``reset``.
        seed_setting: the reset setting carrying ``reset(seed=...)`` to the server (default
            ``"auto"``: ``seed`` on a dmrpc_gym server; see :mod:`~dmrpc_gym.client.seeding`).
        reward / discount: an observation name, a callable ``(obs, state, agent)``
            (or ``(obs, state)``), ``None``, or a dict agent -> one of those.
        observations / actions: ``None`` (all), a name (one bare space), a list
            (a Dict subset), or a dict agent -> one of those.
        nested: dotted spec names become nested Dict spaces.
        render_mode: ``"rgb_array"``: ``render()`` gives the frame of the current state, which a
            dmrpc_gym server (building the world with this mode) renders on demand; another
            server's is ``render_agent``'s render observation (``render_observation="RGB"``).
        connect_timeout: seconds to reach the server and to join, per agent.
        step_timeout: seconds to wait for each answer (``None``: no limit).
        credentials / grpc_metadata: gRPC channel credentials and call metadata.
        tls / token / compression / max_message_size / keepalive: as for
            :class:`~dmrpc_gym.client.connection.Connection`.
        reconnect: a connection lost between episodes is made again by the next ``reset()``
            (:meth:`restore`); a loss mid-episode still raises from that step.
        share_connections: the agents' streams share one HTTP/2 connection (a step is one
            ``send``, :mod:`~dmrpc_gym.transport.client.pool`); False: a connection each.
        shared_memory: large tensors through shared memory with a dmrpc_gym server on the same host (True,
            the default: each agent's connection has its region, :mod:`~dmrpc_gym.transport.shared_memory`);
            False: every tensor in the messages.

    Once an agent fails (its connection dies, or the server answers with an
    error), the others' answers are awaited at most ``abandon_timeout`` seconds,
    the error raised names the agent (``err.agent``), and the env only closes.
    Answers are read in agent order, so a server that keeps holding agent A's
    step for an agent B whose stream died (rather than ending A's sequence) is
    bounded only by ``step_timeout``.

    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> env = DmRpcParallelEnv(embedded_server("tag").address, world_settings={"evaders": 1},
    ...                        agents=["pursuer_0", "pursuer_1", "evader_0"])
    >>> observations, infos = env.reset(seed=3)
    >>> sorted(observations), env.action_space("pursuer_0")
    (['evader_0', 'pursuer_0', 'pursuer_1'], Discrete(5))
    >>> env.close()
    """

    metadata = {"render_modes": ["rgb_array"], "name": "dmrpc_parallel_v0",
                "is_parallelizable": True}
    #: Seconds the other agents' answers are still awaited once one agent has failed.
    abandon_timeout: float = 2.0
    #: What each agent's joined connection is (a subclass's hook).
    agent_class = RemoteAgent

    def __init__(self, address: str | Sequence[str] | None = None, *, world_settings: Mapping[str, Any] | None = None,
                 world_name: str | None = None, agents: AgentsArg | None = None,
                 reset_settings: Mapping[str, Any] | None = None, seed_setting: str | None = AUTO,
                 reward: RewardFn | Mapping[str, RewardFn] = "reward",
                 discount: RewardFn | Mapping[str, RewardFn] = "discount",
                 observations: str | Sequence[str] | Mapping[str, Any] | None = None,
                 actions: str | Sequence[str] | Mapping[str, Any] | None = None, nested: bool = False,
                 render_mode: str | None = None, render_agent: str | None = None,
                 render_observation: str | None = None, connect_timeout: float | None = 10.0,
                 step_timeout: float | None = None, credentials: grpc.ChannelCredentials | None = None,
                 grpc_metadata: Iterable[tuple[str, str]] | None = None, tls: Any = None, token: str | None = None,
                 compression: str | None = None, max_message_size: int | None = None,
                 keepalive: float | None = None, reconnect: bool = False, share_connections: bool = True,
                 shared_memory: bool = True):
        self._kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.reconnects = getattr(self, "reconnects", 0)        # kept by restore(), as is the address
        self._lost: str | None = getattr(self, "_lost", None)   # lost, which the next connection moves on from
        self._shared = SharedConnections() if share_connections and credentials is None else None
        self._closed = self._created = False
        self._failure: str | None = None
        self._unhealthy: set[str] = set()      # agents whose connection may owe or lose answers
        self.connections: dict[str, Connection] = {}
        self.remote: dict[str, RemoteAgent] = {}
        join = None if agents is None else join_settings(agents)
        self.possible_agents: list[str] = list(join or [])
        self.agents: list[str] = []
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r}; expected None or one of {self.metadata['render_modes']}")
        if join is not None and render_agent is not None and render_agent not in join:
            raise ValueError(f"render_agent={render_agent!r} is not one of the agents {self.possible_agents}")
        if address is None:
            raise ValueError("address= is required (dmrpc_gym.parallel_env() without one serves the bundled Tag world)")
        self.render_mode = render_mode
        self._seeds = SeedRoute(None, ours=False, where=str(address))     # until the world is joined
        self.reset_settings = dict(reset_settings or {})
        self.step_timeout, self.world_name = step_timeout, world_name
        connect = self._connect
        opener = None
        try:
            opener = connect()         # the first agent's: it creates the world
            self.world_name, self._created = open_world(opener, world_settings, world_name)
            if join is None:
                join = join_settings(world_agents(opener, self.world_name, opener.address))
                self.possible_agents = list(join)
                if render_agent is not None and render_agent not in join:
                    raise ValueError(f"render_agent={render_agent!r} is not one of the world's agents "
                                     f"{self.possible_agents}")
            self.connections[self.possible_agents[0]] = opener
            for name in self.possible_agents[1:]:
                self.connections[name] = connect(opener.address)     # every agent on one server
            self.render_agent = self.possible_agents[0] if render_agent is None else render_agent
            options = dict(reward=reward, discount=discount, observations=observations, actions=actions)
            self._join_all(join, options, nested, render_observation, connect_timeout)
            first = self.connections[self.possible_agents[0]]
            self._check_turns(first, first.address)
            self._seeds = SeedRoute(seed_setting, ours=first.server_software is not None, where=first.address)
            self._instance = server_instance(first) if reconnect and self._created else None
        except BaseException:
            if opener is not None and opener not in self.connections.values():
                if self._created:              # made before its agents were known: destroy it here
                    close_world(opener, self.world_name)
                opener.close()
            self.close()
            raise
        self._refresh_spaces()

    # -- joining -------------------------------------------------------------------
    def _join_all(self, join: dict[str, dict], options: dict, nested: bool,
                  render_observation: str | None, timeout: float | None) -> None:
        """Join every agent at once (a server may hold joins until all agents are there)."""
        def join_one(name: str) -> RemoteAgent:
            connection = self.connections[name]
            connection.timeout = timeout
            try:
                mine = {k: per_agent(v, name) for k, v in options.items()}
                for key, default in (("reward", "reward"), ("discount", "discount")):
                    if isinstance(options[key], Mapping) and name not in options[key]:
                        mine[key] = default
                renders = name == self.render_agent
                return self.agent_class(connection, self.world_name, join[name], nested=nested,
                                        render_observation=render_observation if renders else None,
                                        render=self.render_mode is not None and renders,
                                        agent=name, **mine)
            finally:
                connection.timeout = self.step_timeout

        names = self.possible_agents
        with concurrent.futures.ThreadPoolExecutor(len(names), thread_name_prefix="dmrpc-join") as pool:
            outcomes = {name: pool.submit(join_one, name) for name in names}
        first = None
        for name, outcome in outcomes.items():
            err = outcome.exception()
            if err is None:
                self.remote[name] = outcome.result()
            elif first is None:
                first = (name, err)
        if first is not None:
            raise named_failure(first[1], first[0], "join_world") from first[1]

    def _check_turns(self, connection: Connection, address: str) -> None:
        """``ValueError`` for a turn-based world (a PettingZoo AEC game, whose agents' steps are
        answered in turn, :mod:`~dmrpc_gym.server.worlds.aec_world`): ``dmrpc_gym.aec_env`` reads those."""
        if connection.server_software is not None and "agent_selection" in Properties(connection):
            raise ValueError(f"world {self.world_name!r} at {address} is turn-based (a PettingZoo AEC game "
                             "served turn by turn): read it with dmrpc_gym.aec_env()")

    def _facts(self) -> dict[str, Any] | None:
        """What the served env says of itself (a dmrpc_gym server's, :mod:`~dmrpc_gym.server.worlds.env_facts`)."""
        first = self.remote.get(self.possible_agents[0]) if self.possible_agents else None
        return first.exact.facts if first is not None and first.exact is not None else None

    def _refresh_spaces(self) -> None:
        self.observation_spaces = {name: agent.observation_space for name, agent in self.remote.items()}
        self.action_spaces = {name: agent.action_space for name, agent in self.remote.items()}
        facts = self._facts() or {}
        share_spaces(facts, self.observation_spaces, self.action_spaces)    # one object, as the served env's
        self._default_rewards = facts.get("rewards") == "defaultdict(int)"   # aec_to_parallel's container
        self.metadata = parallel_metadata(facts, type(self).metadata)

    def observation_space(self, agent: str):
        """``agent``'s observation space (the same object on every call)."""
        return self.observation_spaces[agent]

    def action_space(self, agent: str):
        """``agent``'s action space (the same object on every call)."""
        return self.action_spaces[agent]

    # -- one exchange with every agent ----------------------------------------------
    def _exchange(self, what: str, calls: Mapping[str, tuple[Callable[[], bool], Callable[[], Any]]]) -> dict:
        """Send every agent's request, then collect every answer.

        ``calls`` maps an agent to ``(submit, receive)``; ``submit`` returns whether
        an answer is owed. If any agent fails, the others' answers are awaited at
        most ``abandon_timeout`` seconds and the first failure is raised, naming
        its agent; the env is then unusable (the world's agents are out of step).
        """
        try:
            with self._shared.corked() if self._shared is not None else contextlib.nullcontext():
                owed, failures = submit_all(calls, lambda name: calls[name][0]())
        except BaseException:            # interrupted between agents: some answers are owed, some never come
            self._failure = f"an interrupt during {what} left the agents out of step"
            raise

        def bound_wait(name: str) -> Callable[[], None]:
            connection = self.connections[name]
            saved = connection.timeout
            connection.shorten_timeout(self.abandon_timeout)
            return lambda: setattr(connection, "timeout", saved)

        results = receive_all(owed, lambda name: calls[name][1](), failures, bound_wait)
        if failures:
            self._unhealthy.update(failures)
            name, err = next(iter(failures.items()))
            abandoned = [a for a, e in failures.items() if a != name and isinstance(e, TimeoutError)]
            failed = [a for a in failures if a != name and a not in abandoned]
            notes = ([f"the answers of {abandoned} were abandoned"] if abandoned else []) + \
                ([f"{failed} failed too"] if failed else [])
            note = f" ({'; '.join(notes)})" if notes else ""
            self._failure = f"agent {name!r} failed during {what}: {err}{note}"
            if not isinstance(err, Exception):      # KeyboardInterrupt and friends
                raise err
            raise named_failure(err, name, what, note) from err
        return results

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("this DmRpcParallelEnv is closed")
        if self._failure is not None:
            raise RuntimeError(f"this DmRpcParallelEnv is unusable since {self._failure}; close it and make a new one")

    # -- PettingZoo API ----------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None):
        """Start a new sequence for every agent: ``(observations, infos)``.

        Running agents first send a ResetRequest (with ``reset_settings``,
        ``options["settings"]`` and the seed under ``seed_setting``);
        ``options["world_settings"]`` then resets the world (ResetWorld); then
        every agent steps once to get its first observation. A seed the server cannot be
        sent is said once (see :mod:`~dmrpc_gym.client.seeding`). With ``reconnect=True``, lost
        connections are made again first (see :meth:`restore`).
        """
        if self._kwargs["reconnect"] and not self._closed:
            return reset_reconnecting(self._loss, self.restore, lambda: self._reset(seed, options))
        return self._reset(seed, options)

    def _loss(self) -> str | None:      # why the env or a connection is lost, if it is
        return self._failure or next((c.failure for c in self.connections.values() if c.failure), None)

    def _connect(self, address: str | None = None) -> Connection:
        """A connection to ``address``, else to the first that serves of the list after the one lost."""
        k = self._kwargs
        return Connection(address or following(k["address"], self._lost), credentials=k["credentials"],
                          metadata=(*(k["grpc_metadata"] or ()), render_header(k["render_mode"]),
                                    *lists_header(k["world_settings"])),
                          connect_timeout=k["connect_timeout"], timeout=k["step_timeout"],
                          **transport_options(k["tls"], k["token"], k["compression"], k["max_message_size"],
                                             k["keepalive"], self._shared, k["shared_memory"]))

    def restore(self, why: str | None = None) -> None:
        """Connect every agent again after a connection was lost, as the constructor does (to the next
        address on the list): leave what is left of the old world (destroying it through a connection
        still up), then join it again if the same run of a dmrpc_gym server still has it, else create
        it again (or join ``world_name``)."""
        why = why or self._loss() or "a connection was lost"
        kwargs, name, instance, created = self._kwargs, self.world_name, self._instance, self._created
        self._lost = lost = next((c.address for c in self.connections.values()), None)   # moved on from
        self.close()
        again = created and instance is not None and same_run(instance, self._connect)
        if again:
            try:
                self.__init__(**{**kwargs, "world_settings": None, "world_name": name})
                self._kwargs, self._created, self._instance = kwargs, True, instance
                for agent in self.remote.values():
                    agent.state = State.RUNNING   # maybe mid-episode: the next reset sends ResetRequests
            except DmRpcError as err:
                if err.code_name != "NOT_FOUND":
                    raise
                again = False
        if not again:
            self.__init__(**kwargs)
        self.reconnects += 1
        at = self.connections[self.possible_agents[0]].address
        warn_reconnected(at, created and not again, self.world_name, why, lost)

    def _reset(self, seed: int | None, options: dict | None):
        self._check_usable()
        options = dict(options or {})
        settings = self._seeds.settings(self.reset_settings, options, seed)
        names = self.possible_agents
        self._exchange("reset", {name: (lambda a=self.remote[name]: a.submit_reset(settings),
                                        self.remote[name].receive_reset) for name in names})
        if "world_settings" in options:
            request = pb.ResetWorldRequest(world_name=self.world_name,
                                           settings=settings_tensors(options["world_settings"]))
            connection = self.connections[names[0]]
            self._exchange("reset_world", {names[0]: (lambda: connection.submit(request) or True,
                                                      connection.receive)})
            for agent in self.remote.values():
                agent.state = State.INTERRUPTED
        answers = self._exchange("reset", {name: (lambda a=self.remote[name]: a.submit_step(None) or True,
                                                  self.remote[name].receive_step) for name in names})
        self._refresh_spaces()
        self.agents = [name for name in names if self.remote[name].state == State.RUNNING]
        return {a: answers[a][0] for a in self.agents}, {a: answers[a][4] for a in self.agents}

    def step(self, actions: Mapping[str, Any]):
        """Act for every live agent at once: ``(observations, rewards, terminations, truncations, infos)``.

        ``actions`` needs an entry for each agent in ``agents`` (``None`` sends no
        action); entries for finished agents are ignored. Every action is checked
        against its space before anything is sent.
        """
        self._check_usable()
        if not self.agents:
            raise RuntimeError("no agent is playing; call reset()")
        unknown = [a for a in actions if a not in self.remote]
        if unknown:
            raise ValueError(f"actions for unknown agents {unknown}; the agents are {self.possible_agents}")
        live = list(self.agents)
        missing = [a for a in live if a not in actions]
        if missing:
            raise ValueError(f"no action for agents {missing}; every agent in env.agents needs one (None sends none)")
        requests = {}
        for name in live:
            try:
                requests[name] = self.remote[name].step_request(actions[name])
            except ValueError as err:
                raise ValueError(f"agent {name!r}: {err}") from None
        answers = self._exchange("step", {name: (lambda c=self.connections[name], r=requests[name]: c.submit(*r) or True,
                                                 self.remote[name].receive_step) for name in live})
        observations, terminations, truncations, infos = {}, {}, {}, {}
        rewards = defaultdict(int) if self._default_rewards else {}     # the served env's container
        for name in live:
            observations[name], rewards[name], terminations[name], truncations[name], infos[name] = answers[name]
        self.agents = [a for a in live if not (terminations[a] or truncations[a])]
        return observations, rewards, terminations, truncations, infos

    states = property(lambda self: {name: a.state for name, a in self.remote.items()},
                      doc="Each agent's dm_env_rpc state after its latest step (``infos`` are the env's own).")
    last_discounts = property(lambda self: {name: a.last_discount for name, a in self.remote.items()},
                              doc="Each agent's discount of its latest step (``discount=`` says from where).")

    def render(self) -> np.ndarray | None:
        """The frame of the current state in ``rgb_array`` mode (see ``render_mode``)."""
        if self.render_mode is None:
            return None
        return self.remote[self.render_agent].current_frame(self.render_mode)

    def close(self) -> None:
        """Leave every agent and destroy the world this env created. Idempotent; never hangs."""
        if self._closed:
            return
        self._closed = True
        try:
            # A connection that may still owe answers is closed rather than asked to leave.
            for name in self._unhealthy:
                if name in self.connections:
                    self.connections[name].close()
            for name, agent in self.remote.items():
                if name not in self._unhealthy:
                    agent.leave()
            if self._created:
                spare = [c for n, c in self.connections.items() if n not in self._unhealthy and not c.closed]
                if spare:
                    close_world(spare[0], self.world_name)
        finally:
            for connection in self.connections.values():
                connection.close()
