"""PettingZoo worlds: one ``ParallelEnv`` shared by the agents that join it.

CreateWorld builds the env (settings -> factory keyword arguments; ``seed``
seeds the first ``reset``). Each JoinWorld claims one agent: the join setting
``agent`` names it (a string, or an index into ``possible_agents``), otherwise
the first free one is taken; a taken or unknown agent is refused. Each agent's
specs come from ``observation_space(agent)`` / ``action_space(agent)``.

Semantics (all waits end with DEADLINE_EXCEEDED when the world makes no
progress for the server's ``timeout``, default 30 s; none can hang):

- **Episodes start** when a non-running agent steps and no episode is in
  progress: the step waits until every agent of ``possible_agents`` is joined,
  then ``env.reset`` runs and every agent's first step returns its first
  observation (RUNNING).
- **Rounds**: a running agent's step submits its action and waits until every
  agent still in ``env.agents`` has submitted; then ``env.step`` runs with all
  of them and each step returns that agent's result: ``terminated`` ->
  TERMINATED (discount 0), ``truncated`` -> INTERRUPTED, else RUNNING.
- **Finished agents do not block others**: an agent that left ``env.agents``
  is not waited for. Its next step (which starts a new sequence) waits until it
  is back in ``env.agents``, normally when the episode has ended (no agents
  left) and the next one starts.
- **Aborts**: when a running agent leaves (or disconnects), sends Reset, or
  anyone sends ResetWorld, the episode ends for everyone: agents still
  running get INTERRUPTED on their next (or pending) step, and the next
  episode starts as above. If ``env.step`` raises, every agent waiting on that
  round gets the error (INTERNAL) and the episode ends.
- **Draining** (the server's): the running episode goes on; a step that would start
  one (or wait for agents to start one) ends its stream UNAVAILABLE, saying so.
- **Seeds** are the world's: the ``seed`` of CreateWorld, ResetWorld, Reset or
  a write of the ``seed`` property seeds the next ``env.reset``.

The env is one object, so its calls (``reset``, ``step``, ``render``, ``close``)
run one at a time on the world's :class:`~dmrpc_gym.server.running.workers.Lane`: off the
event loop, or inline on it where the lane's rule allows (a short step of an env stepping
alone); the waiting between agents stays on the loop. A round whose step runs inline is run
by the agent whose action completed it, in its own step: the other agents' answers come one
loop turn later, its own at once.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Mapping

import numpy as np

from dmrpc_gym.server.serving import status
from dmrpc_gym.server.envs.factories import Factory, close_quietly
from dmrpc_gym.server.worlds.fidelity import say_losses
from dmrpc_gym.server.worlds.interface import AgentInterface, spec_names
from dmrpc_gym.server.worlds.rendering import rgb_shape
from dmrpc_gym.server.worlds.parallel_agent import AGENT, ParallelAgent, names_text
from dmrpc_gym.server.worlds.properties import Property, env_properties
from dmrpc_gym.server.serving.stats import WorldCounts
from dmrpc_gym.server.running.workers import NOT_NOW, Lane
from dmrpc_gym.server.worlds.settings import SEED, check_seed, refuse_unknown, unpack_settings, world_reset_settings
from dmrpc_gym.protocol.wire import pb

__all__ = ["ParallelWorld", "AGENT"]

log = logging.getLogger("dmrpc_gym.server")


_RUNNING, _INTERRUPTED = pb.RUNNING, pb.INTERRUPTED
_EXPIRED = object()     # what a waiter's future holds when its deadline passed


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(_EXPIRED)


def _reset(env: Any, seed: int | None) -> tuple[Any, Any, list]:
    """``env.reset`` and the agents it left in ``env.agents`` (on the world's lane)."""
    obs, infos = env.reset(seed=seed)
    return obs, infos, list(env.agents)


def _step(env: Any, actions: dict) -> tuple:
    """``env.step`` and the agents it left in ``env.agents`` (on the world's lane)."""
    return (*env.step(actions), list(env.agents))


class ParallelWorld:
    """A PettingZoo ``ParallelEnv`` whose agents are joined connections (see the module doc).

    >>> from dmrpc_gym.worlds.tag import Tag
    >>> world = ParallelWorld("demo", Factory(Tag), {}, 0, Tag(evaders=1), timeout=5.0)
    >>> async def first_steps():
    ...     agents = [await world.join({}) for _ in world.possible]
    ...     outs = [pb.StepResponse() for _ in agents]
    ...     await asyncio.gather(*(a.step(pb.StepRequest(), o) for a, o in zip(agents, outs)))
    ...     return [a.name for a in agents], [pb.EnvironmentStateType.Name(o.state) for o in outs]
    >>> asyncio.run(first_steps())
    (['pursuer_0', 'pursuer_1', 'evader_0'], ['RUNNING', 'RUNNING', 'RUNNING'])
    """

    kind = "pettingzoo"
    #: While a dashboard watches: what it keeps beyond the counts (:mod:`~dmrpc_gym.server.serving.watching`).
    watch: Any = None
    #: The class of a joined agent, and what resets the env (on the lane): subclasses' hooks.
    agent_class = ParallelAgent
    env_reset = staticmethod(_reset)

    def __init__(self, name: str, factory: Factory, kwargs: dict[str, Any], seed: int | None,
                 env: Any, timeout: float, lane: Lane | None = None):
        self.name, self.factory, self.kwargs, self.timeout = name, factory, kwargs, timeout
        self.env = env
        self.lane = lane if lane is not None else Lane(None)
        self.seed = seed                # seeds the next env.reset
        self.episode_seed: int | None = None
        self.interfaces = self._describe(env, kwargs, seed)
        self.possible = list(self.interfaces)
        self.agents: dict[str, ParallelAgent] = {}
        self.episode = 0                # number of the current (or last) episode
        self.running = False            # an episode is in progress
        self.live: set[str] = set()     # env.agents of the running episode
        self.obs: dict[str, Any] = {}   # each agent's latest observation
        self.infos: dict[str, Any] = {}  # each agent's info from the latest env.reset
        self.pending: dict[str, Any] = {}
        self.rounds = 0                 # env.step calls in the current episode
        self.failure: tuple[int, str] | None = None   # (episode, message) when env.step raised
        self.generation = 0             # counts aborts: a round or reset that outlived one is void
        self.resetting = False          # env.reset is running
        self.draining = False           # the server drains: no episode starts (start_sequence)
        self._waiters: list[asyncio.Future] = []
        self.counts = WorldCounts(self.kind)

    def _describe(self, env: Any, recipe: Mapping[str, Any], seed: int | None) -> dict[str, AgentInterface]:
        possible = list(getattr(env, "possible_agents", []) or [])
        if not possible:
            raise status.failed_precondition(f"{self.factory.name} has no possible_agents")
        rgb = rgb_shape(self.factory, env, recipe, seed)
        interfaces = {agent: AgentInterface(env.observation_space(agent), env.action_space(agent), rgb,
                                            who=f"{self.factory.name} agent {agent!r}", names=spec_names(env))
                      for agent in possible}
        for interface in interfaces.values():
            say_losses(self.factory, interface)
        return interfaces

    # -- waiting ---------------------------------------------------------------------

    def _notify(self) -> None:
        """Wake every waiter: something changed (a round, a join, a leave, an abort)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self, what: Callable[[], str]) -> None:
        """Wait for the next change; DEADLINE_EXCEEDED (saying ``what()`` was awaited) after ``timeout`` s without one.

        A bare future per waiter, set by :meth:`_notify`: a waiter wakes one loop turn after a change (an
        ``asyncio.wait_for`` on an ``Event`` took three, and a task a wait); the timer is only the deadline.
        """
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(self.timeout, _expire, waiter)
        try:
            woke = await waiter
        except BaseException:
            if waiter in self._waiters:      # cancelled: no notify will drop it
                self._waiters.remove(waiter)
            raise
        finally:
            timer.cancel()
        if woke is _EXPIRED:
            raise status.deadline_exceeded(
                f"world {self.name!r}: waited {self.timeout:g} s for {what()} with no progress")

    def _missing(self) -> str:
        missing = [a for a in self.possible if a not in self.agents]
        return f"agent{'s' if len(missing) > 1 else ''} {names_text(missing)} to join"

    def _late(self) -> str:
        late = sorted(self.live - self.pending.keys())
        return f"agent{'s' if len(late) > 1 else ''} {names_text(late)} to step"

    # -- episodes ---------------------------------------------------------------------

    def abort(self) -> None:
        """End the episode in progress (or starting): running agents get INTERRUPTED on their next step."""
        self.generation += 1
        if self.running:
            self.running = False
            self.live = set()
            self.pending.clear()
            self._notify()

    async def _reset_env(self) -> None:
        seed, self.seed = self.seed, None
        generation = self.generation
        self.resetting = True
        self.counts.resets += 1
        watch = self.watch
        if watch is not None and self.rounds:     # a dashboard watches: the episode before's return
            watch.ended(sum(agent.episode_return for agent in self.agents.values() if agent is not None), self.rounds)
        try:
            obs, infos, agents = await self.lane.quick(self.env_reset, self.env, seed)
        except Exception as exc:  # noqa: BLE001 - the env's error is the answer
            raise status.internal(f"{self.factory.name}: reset raised {type(exc).__name__}: {exc}") from None
        finally:
            self.resetting = False
            self._notify()
        self.episode += 1
        self.episode_seed = seed
        self.live = set(agents)
        self.running = bool(self.live)
        self.obs = dict(obs)
        self.infos = dict(infos or {})
        self.pending.clear()
        self.rounds = 0
        if not self.running:
            raise status.internal(f"{self.factory.name}: reset left no agents in env.agents")
        if generation != self.generation or not self.live <= self.agents.keys():
            self.abort()  # a ResetWorld, Reset or leave came while the env was resetting

    def drain(self) -> None:
        """The server drains: the running episode goes on, no new one starts; an agent waiting to
        start one is woken to hear so (:meth:`start_sequence`)."""
        self.draining = True
        self._notify()

    def playing(self) -> int:
        """How many joined agents are in the episode that runs (all, while one starts): what a drain waits for."""
        if self.resetting:
            return len(self.agents)
        return len(self.live & self.agents.keys()) if self.running else 0

    async def start_sequence(self, agent: "ParallelAgent") -> None:
        """Wait until ``agent`` is in a running episode (starting one when everyone is joined; while
        the server drains, its stream ends UNAVAILABLE instead, :func:`~dmrpc_gym.server.serving.status.draining`)."""
        while True:
            if self.running and agent.name in self.live:
                agent.begin(self.episode)
                return
            if self.agents.get(agent.name) is not agent:
                raise status.failed_precondition(f"agent {agent.name!r} is no longer joined to {self.name!r}")
            if not self.running:
                if self.resetting:
                    await self._wait(lambda: "the env to reset")
                elif self.draining:              # no episode runs, and none may start
                    raise status.draining("episodes")
                elif all(a in self.agents for a in self.possible):
                    await self._reset_env()
                    continue
                else:
                    await self._wait(self._missing)
            else:
                await self._wait(lambda: f"the episode to end (agent {agent.name!r} has finished it)")

    async def act(self, agent: "ParallelAgent", action: Any) -> tuple | None:
        """Submit ``agent``'s action and wait for the round; None when the episode was aborted."""
        episode = self.episode
        self.pending[agent.name] = action
        agent.result = None
        if self.live <= self.pending.keys() and not self._round_now():
            # A task of its own: the round goes on for the others if this agent's stream ends.
            asyncio.get_running_loop().create_task(self._round())
        try:
            while agent.result is None:
                if self.failure is not None and self.failure[0] == episode:
                    raise status.internal(self.failure[1])
                if not self.running or self.episode != episode:
                    return None
                await self._wait(self._late)
        except BaseException:
            if self.pending.get(agent.name) is action:
                del self.pending[agent.name]
            raise
        result, agent.result = agent.result, None
        return result

    def _round_now(self) -> bool:
        """The round, now, by the agent whose action completed it, where the lane runs ``env.step`` inline
        (:meth:`~dmrpc_gym.server.running.workers.Lane.inline`): no task, no loop turn, and that agent has
        its result at once. False (nothing done) where the step would go to a worker: :meth:`_round` then."""
        actions = {name: self.pending[name] for name in self.live}
        try:
            answer = self.lane.inline(_step, self.env, actions)
        except Exception as exc:  # noqa: BLE001 - the env's error is the answer
            self.pending.clear()
            self._failed(exc)
            return True
        if answer is NOT_NOW:
            return False
        self.pending.clear()
        self._hand_out(actions, answer)
        return True

    async def _round(self) -> None:
        """Every live agent has acted: ``env.step`` (on a worker) and hand out the results (or the failure)."""
        actions = {name: self.pending[name] for name in self.live}
        self.pending.clear()
        generation = self.generation
        try:
            answer = await self.lane.quick(_step, self.env, actions)
        except Exception as exc:  # noqa: BLE001 - the env's error is the answer
            if generation == self.generation:
                self._failed(exc)
            return
        if generation != self.generation:
            return  # the episode was aborted while the env stepped: nobody waits for this round
        self._hand_out(actions, answer)

    def _failed(self, exc: Exception) -> None:
        """``env.step`` raised: every agent waiting on the round gets the error, and the episode ends."""
        self.failure = (self.episode, f"{self.factory.name}: step raised {type(exc).__name__}: "
                                      f"{exc}; the episode ended")
        self.running, self.live = False, set()
        self._notify()

    def _hand_out(self, actions: dict, answer: tuple) -> None:
        """Each acting agent's result of the round ``env.step`` answered."""
        obs, rewards, terminations, truncations, infos, agents = answer
        self.rounds += 1
        infos = infos or {}
        for name in actions:
            if name in obs:
                self.obs[name] = obs[name]
            joined = self.agents.get(name)
            if joined is not None:
                joined.result = (self.obs.get(name), rewards.get(name, 0.0),
                                 bool(terminations.get(name, False)), bool(truncations.get(name, False)),
                                 infos.get(name))
        self.live = set(agents)
        for name in self.live:
            if name in obs:
                self.obs[name] = obs[name]
        if not self.live:
            self.running = False
        self._notify()

    # -- protocol ----------------------------------------------------------------------

    async def join(self, settings: Mapping[str, pb.Tensor], asked: str | None = None) -> "ParallelAgent":
        """Claim an agent (JoinWorld): the ``agent`` setting, or the first free one. The env renders as
        its creator asked; ``asked``, the joining client's render_mode, changes nothing."""
        kwargs = unpack_settings(settings, "join")
        wanted = kwargs.pop(AGENT, None)
        refuse_unknown(kwargs, "join", f"world {self.name!r}", [AGENT])
        free = [a for a in self.possible if a not in self.agents]
        if wanted is None:
            if not free:
                raise status.failed_precondition(
                    f"every agent of world {self.name!r} is taken ({names_text(self.possible)})")
            name = free[0]
        else:
            if isinstance(wanted, (int, np.integer)) and not isinstance(wanted, bool) \
                    and 0 <= wanted < len(self.possible):
                name = self.possible[int(wanted)]
            elif isinstance(wanted, str) and wanted in self.interfaces:
                name = wanted
            else:
                raise status.invalid_argument(
                    f"world {self.name!r} has no agent {wanted!r} (agents: {names_text(self.possible)})")
            if name in self.agents:
                raise status.failed_precondition(
                    f"agent {name!r} of world {self.name!r} is taken (free: {names_text(free)})")
        agent = self.agent_class(self, name, self.interfaces[name])
        self.agents[name] = agent
        self._notify()
        return agent

    def release(self, agent: "ParallelAgent") -> None:
        """The agent left (or disconnected): free it; a running episode it plays in ends."""
        if self.agents.get(agent.name) is not agent:
            return
        del self.agents[agent.name]
        if self.running and agent.name in self.live:
            self.abort()
        self._notify()

    async def reset_world(self, settings: Mapping[str, pb.Tensor], caller: Any) -> None:
        """ResetWorld: new seed / settings for the next episode; the current one ends."""
        recipe, seed = world_reset_settings(self, settings)
        if recipe is not None:
            await self._rebuild(recipe, seed)
        if seed is not None:
            self.seed = seed
        if isinstance(caller, ParallelAgent) and caller.world is self:
            caller.running = False
        self.abort()

    async def _rebuild(self, recipe: dict[str, Any], seed: int | None) -> None:
        lane = self.lane
        env, interfaces = await lane.build(lambda built: close_quietly(built[0]), self._build, recipe, seed)
        if list(interfaces) != self.possible or any(    # checked on the loop: agents may have joined
                interfaces[a].specs != self.interfaces[a].specs for a in self.agents):
            lane.post(close_quietly, env)
            raise status.failed_precondition(
                f"these settings change the agents of world {self.name!r} or their specs; "
                f"create a new world instead")
        self.abort()
        lane.post(close_quietly, self.env)
        self.env, self.kwargs, self.interfaces = env, recipe, interfaces
        for agent in self.agents.values():
            agent.interface = interfaces[agent.name]

    def _build(self, recipe: dict[str, Any], seed: int | None) -> tuple[Any, dict[str, AgentInterface]]:
        """A new env for ``recipe`` and its interfaces (on the lane)."""
        env, kind = self.factory.make(recipe)
        try:
            if kind != self.kind:
                raise status.failed_precondition(f"{self.factory.name} returned a {kind} env")
            return env, self._describe(env, recipe, seed)
        except BaseException:
            close_quietly(env)
            raise

    def properties(self) -> list[Property]:
        return [
            Property(SEED, pb.INT64,
                     "the seed of the next episode when one is pending, else of the current one "
                     "(-1: unseeded); writing it seeds the next episode",
                     read=self._read_seed, write=self._write_seed),
            Property("episode_step", pb.INT64, "env.step calls in the current episode",
                     read=lambda: self.rounds),
            Property("agents", pb.STRING, "every agent of this world (possible_agents)",
                     read=lambda: np.array(self.possible, dtype=np.str_), shape=(-1,)),
            Property("missing_agents", pb.STRING,
                     "the agents not joined yet: an episode starts once none is missing",
                     read=lambda: np.array([a for a in self.possible if a not in self.agents], dtype=np.str_),
                     shape=(-1,)),
            *env_properties(self.env, self.lane),
        ]

    def _read_seed(self) -> int:
        seed = self.seed if self.seed is not None else self.episode_seed
        return -1 if seed is None else seed

    def _write_seed(self, value: np.ndarray) -> None:
        self.seed = check_seed(value.item(), "property")

    def close(self) -> None:
        """Destroy: end the episode and close the env (on its lane; never waits)."""
        self.abort()
        self.agents.clear()
        self.lane.post(close_quietly, self.env)
