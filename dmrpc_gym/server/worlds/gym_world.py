"""Gymnasium worlds: every joined agent owns an env built from the world's recipe.

A **gym world** is a recipe: factory keyword arguments (the CreateWorld
settings) and a seed. Every connection that joins it is one agent with its
own env built from the recipe, so one world serves any number of agents
independently (a vectorised client joins one world N times, or makes N
worlds). Agent ``k`` (the lowest free slot, 0 for the first agent) starts from
``seed + k`` when the world has a seed. Envs of agents that leave are kept for
the next agent to join.

Per agent (the dm_env_rpc state machine):

- the first step, and any step after TERMINATED / INTERRUPTED or a Reset,
  ignores its actions and starts a new sequence with ``env.reset`` (seeded by
  the pending seed, if any, else continuing the env's random stream);
- a running step checks and applies the actions (``env.step``):
  ``terminated`` -> TERMINATED (discount 0), ``truncated`` -> INTERRUPTED
  (discount 1), else RUNNING;
- Reset (settings: ``seed``, and any world setting as an override for this
  agent, which rebuilds its env) makes the next step start a new sequence;
- ResetWorld (settings: ``seed``, world settings) applies to every agent's next
  sequence; agents other than the caller that are running get INTERRUPTED on
  their next step (their actions ignored), then start over. ResetWorld never
  blocks. When new world settings change an agent's specs, its next sequence
  start fails with FAILED_PRECONDITION until it sends Reset (which returns
  the new specs) or joins again.

Every env call (building, ``reset``, ``step``, ``render``, ``close``) runs on the
env's :class:`~dmrpc_gym.server.running.workers.Lane`, off the event loop: the agents of
a world, each with its own env, step concurrently.
"""
from __future__ import annotations

import itertools
from typing import Any, Mapping

import numpy as np

from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.fidelity import exact_step
from dmrpc_gym.protocol.states import State, transitions
from dmrpc_gym.server.serving import status
from dmrpc_gym.server.envs.factories import RENDER_MODE, Factory, close_quietly
from dmrpc_gym.server.worlds.fidelity import fidelity_properties, say_losses
from dmrpc_gym.server.worlds.interface import AgentInterface, StepAnswer, sequence_state, spec_names
from dmrpc_gym.server.worlds.rendering import current_frame, rgb_render, rgb_shape
from dmrpc_gym.server.worlds.properties import Property, env_properties
from dmrpc_gym.server.serving.stats import WorldCounts
from dmrpc_gym.server.running.workers import NOT_NOW, Lane, WorkerPool
from dmrpc_gym.server.worlds.settings import (SEED, check_seed, refuse_unknown, pop_seed, same_settings, unpack_settings,
                                       world_reset_settings)
from dmrpc_gym.protocol.wire import pb

__all__ = ["GymWorld", "GymAgent"]

_RUNNING, _INTERRUPTED = pb.RUNNING, pb.INTERRUPTED


def _close_built(built: tuple[Any, AgentInterface]) -> None:
    close_quietly(built[0])


class GymWorld:
    """A world of independent gymnasium agents built from one recipe (see the module doc).

    Built on a worker thread; ``lane`` is ``env``'s, ``pool`` gives lanes to new envs. ``kwargs`` is the
    recipe: the settings and, under ``RENDER_MODE``, the creator's
    :class:`~dmrpc_gym.server.envs.factories.Rendering` (an agent whose client asks for another gets an env
    built with its own).
    """

    kind = "gym"
    agent_class: type = None  # type: ignore[assignment]  # GymAgent, set below
    #: While a dashboard watches: what it keeps beyond the counts (:mod:`~dmrpc_gym.server.serving.watching`).
    watch: Any = None

    def __init__(self, name: str, factory: Factory, kwargs: dict[str, Any], seed: int | None, env: Any,
                 lane: Lane, pool: WorkerPool | None = None):
        self.name, self.factory, self.kwargs, self.seed = name, factory, kwargs, seed
        self.pool = pool
        self.interface = self._describe(env, kwargs, seed)
        self._spares: list[tuple[Any, Lane]] = [(env, lane)]
        self.agents: dict[int, GymAgent] = {}
        self.draining = False    # the server drains: no agent starts a sequence (GymAgent._start)
        self.counts = WorldCounts(self.kind)

    def _lane(self) -> Lane:
        return self.pool.lane() if self.pool is not None else Lane(None)

    def _describe(self, env: Any, recipe: Mapping[str, Any], seed: int | None) -> AgentInterface:
        rgb = rgb_shape(self.factory, env, recipe, seed)
        interface = AgentInterface(env.observation_space, env.action_space, rgb, who=self.factory.name,
                                   names=spec_names(env))
        say_losses(self.factory, interface)
        return interface

    def _build(self, kwargs: Mapping[str, Any], seed: int | None, describe: bool) -> tuple[Any, AgentInterface]:
        """Build (and unless ``describe`` is False, probe) an env; runs on a worker thread."""
        env, kind = self.factory.make(kwargs, seed)
        try:
            if kind != self.kind:
                raise status.failed_precondition(f"{self.factory.name} returned a {kind} env in a gym world")
            return env, (self._describe(env, kwargs, seed) if describe else self.interface)
        except BaseException:
            close_quietly(env)
            raise

    async def take_env(self, kwargs: Mapping[str, Any], seed: int | None) -> tuple[Any, Lane, AgentInterface]:
        """An env built with ``kwargs``, its lane and interface (a spare one when ``kwargs`` is the recipe)."""
        recipe = same_settings(kwargs, self.kwargs)
        if recipe and self._spares:
            env, lane = self._spares.pop()
            return env, lane, self.interface
        lane = self._lane()
        env, interface = await lane.build(_close_built, self._build, kwargs, seed, not recipe)
        return env, lane, interface

    def give_back(self, env: Any, lane: Lane, kwargs: Mapping[str, Any], reusable: bool = True) -> None:
        """Keep ``env`` for the next agent when it follows the recipe, else close it (on its lane)."""
        if reusable and same_settings(kwargs, self.kwargs):
            self._spares.append((env, lane))
        else:
            lane.post(close_quietly, env)

    # -- protocol ----------------------------------------------------------------

    async def join(self, settings: Mapping[str, pb.Tensor], asked: str | None = None) -> "GymAgent":
        """A new agent (JoinWorld). Join settings: ``seed`` only. ``asked``: the render_mode its
        client named (None: a foreign client), see :meth:`~dmrpc_gym.server.envs.factories.Factory.rendering`."""
        kwargs = unpack_settings(settings, "join")
        seed = pop_seed(kwargs, "join")
        refuse_unknown(kwargs, "join", f"world {self.name!r}", [SEED])
        slot = next(i for i in itertools.count() if i not in self.agents)
        self.agents[slot] = None  # type: ignore[assignment]  # claimed while the env is built
        try:
            if seed is None and self.seed is not None:
                seed = self.seed + slot
            kwargs = {**self.kwargs, RENDER_MODE: self.factory.rendering(asked)}
            env, lane, interface = await self.take_env(kwargs, seed)
        except BaseException:
            del self.agents[slot]
            raise
        agent = self.agent_class(self, slot, env, lane, interface, kwargs, seed)
        self.agents[slot] = agent
        return agent

    def release(self, agent: "GymAgent") -> None:
        """The agent left: free its slot, keep or close its env."""
        if self.agents.get(agent.slot) is agent:
            del self.agents[agent.slot]
            self.give_back(agent.env, agent.lane, agent.env_kwargs, reusable=not agent.broken)

    async def reset_world(self, settings: Mapping[str, pb.Tensor], caller: Any) -> None:
        """ResetWorld: new settings and seed for every agent's next sequence (never waits for agents)."""
        recipe, seed = world_reset_settings(self, settings)
        if recipe is not None:
            lane = self._lane()
            env, interface = await lane.build(_close_built, self._build, recipe, seed, True)
            for spare, spare_lane in self._spares:
                spare_lane.post(close_quietly, spare)
            self._spares, self.kwargs, self.interface = [(env, lane)], recipe, interface
        if seed is not None:
            self.seed = seed
        for agent in self.agents.values():
            if agent is not None:
                agent.world_reset(None if seed is None else seed + agent.slot, caller is agent)

    def drain(self) -> None:
        """The server drains: sequences running go on, none starts (nobody waits for one here)."""
        self.draining = True

    def playing(self) -> int:
        """How many agents are in a sequence (starting or running): what a drain waits for."""
        return sum(1 for agent in self.agents.values()
                   if agent is not None and agent.sequence in (Sequence.STARTING, Sequence.RUNNING))

    def properties(self) -> list[Property]:
        """World properties (none beyond the agent's for gym worlds)."""
        return []

    def close(self) -> None:
        """Destroy: close every env on its lane (never waits)."""
        for env, lane in self._spares:
            lane.post(close_quietly, env)
        self._spares = []
        for agent in list(self.agents.values()):
            if agent is not None:
                agent.lane.post(close_quietly, agent.env)
        self.agents.clear()


class Sequence(State):
    """Where a gym agent is in its sequences (episodes); a StepRequest acts by it.

    IDLE: the next step starts a sequence (``env.reset``); STARTING: ``env.reset`` runs;
    RUNNING: steps step the env; INTERRUPTED: another connection reset the world while this
    agent ran or started, and its next step says so (state INTERRUPTED) and leaves it IDLE;
    STALE: world settings changed this agent's specs, and only a ResetRequest (whose answer
    carries the new specs) leaves it.

    >>> Sequence.IDLE.to(Sequence.STARTING).to(Sequence.RUNNING)
    <Sequence.RUNNING: 'running'>
    """

    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    STALE = "stale"


transitions(Sequence, {
    Sequence.IDLE: {Sequence.IDLE, Sequence.STARTING, Sequence.STALE},
    Sequence.STARTING: {Sequence.RUNNING, Sequence.IDLE, Sequence.INTERRUPTED},
    Sequence.RUNNING: {Sequence.IDLE, Sequence.INTERRUPTED},
    Sequence.INTERRUPTED: {Sequence.IDLE},
    Sequence.STALE: {Sequence.IDLE},
})


class GymAgent:
    """One joined connection of a gym world, with its own env (see the module doc).

    ``sequence`` is where it is in its episodes (:class:`Sequence`); ``broken`` is no part of
    it but a fact about its env: the env raised, and is not handed to another agent.
    """

    def __init__(self, world: GymWorld, slot: int, env: Any, lane: Lane, interface: AgentInterface,
                 env_kwargs: dict[str, Any], seed: int | None):
        self.world, self.slot = world, slot
        self.env, self.lane, self.interface, self.env_kwargs = env, lane, interface, env_kwargs
        self._render = rgb_render(env) if interface.rgb_shape else None
        # Settings of this agent's own over the world's: its Rendering, then Reset's settings.
        self.overrides: dict[str, Any] = {k: v for k, v in env_kwargs.items() if k == RENDER_MODE}
        self.next_seed = seed
        self.sequence_seed: int | None = None
        self.sequence = Sequence.IDLE
        self.broken = False      # the env raised: do not hand it to another agent
        self.episode_step = 0
        self.episode_return = 0.0
        self.last_reward: float | None = None    # the reward of the latest step that stepped the env
        self._obs: Any = None
        self._info: Any = None   # what env.reset returned, sent with the first step

    @property
    def specs(self) -> pb.ActionObservationSpecs:
        return self.interface.specs

    @property
    def observation(self) -> Any:
        """The env's latest observation, as it gave it (what the latest answer carried)."""
        return self._obs

    @property
    def start_info(self) -> Any:
        """What ``env.reset`` returned as its info, sent with the step that started the sequence."""
        return self._info

    def _recipe(self) -> dict[str, Any]:
        return {**self.world.kwargs, **self.overrides}

    async def _rebuild(self, recipe: dict[str, Any], seed: int | None) -> bool:
        """Swap in an env built with ``recipe``; True when the specs changed."""
        env, lane, interface = await self.world.take_env(recipe, seed)
        self.world.give_back(self.env, self.lane, self.env_kwargs, reusable=not self.broken)
        changed = interface.specs != self.interface.specs
        self.env, self.lane, self.interface, self.env_kwargs, self.broken = env, lane, interface, recipe, False
        self._render = rgb_render(env) if interface.rgb_shape else None
        return changed

    async def _start(self) -> None:
        """Begin a sequence: ``env.reset`` with the pending seed; while the server drains, end the
        stream UNAVAILABLE instead (:func:`~dmrpc_gym.server.serving.status.draining`)."""
        if self.world.draining:
            raise status.draining("episodes")
        if self.sequence is Sequence.STALE:
            raise status.failed_precondition(
                f"the settings of world {self.world.name!r} changed this agent's specs; send a "
                f"ResetRequest (its response carries the new specs) or join again")
        seed = self.next_seed
        recipe = self._recipe()
        if not same_settings(recipe, self.env_kwargs) and await self._rebuild(recipe, seed):
            self.sequence = self.sequence.to(Sequence.STALE)
            return await self._start()  # raises: the client must fetch the new specs first
        self._starting()
        try:
            obs, info = await self.lane.quick(self.env.reset, seed=seed)
        except BaseException as exc:
            raise self._reset_failed(exc, seed) from None
        self._started(obs, info, seed)

    def start_inline(self) -> bool | Exception:
        """What :meth:`_start` does, on the caller's thread and now, for the steady path
        (:mod:`~dmrpc_gym.server.serving.steady`): True when the sequence started; the error to answer with
        when ``env.reset`` raised; False where it cannot start so (nothing done: :meth:`_start` starts it):
        the server drains, the agent is not IDLE, its settings changed, or its lane runs no call inline now."""
        if self.world.draining or self.sequence is not Sequence.IDLE \
                or not same_settings(self._recipe(), self.env_kwargs):
            return False
        seed = self.next_seed
        reset = self.env.reset
        try:
            got = self.lane.inline(lambda: reset(seed=seed))
            if got is NOT_NOW:
                return False
            obs, info = got
        except Exception as exc:  # noqa: BLE001 - the env's error is the answer
            self._starting()
            return self._reset_failed(exc, seed)
        self._starting()
        self._started(obs, info, seed)
        return True

    def _starting(self) -> None:
        self.next_seed, self.sequence = None, self.sequence.to(Sequence.STARTING)
        self.world.counts.resets += 1

    def _reset_failed(self, exc: BaseException, seed: int | None) -> BaseException:
        """``env.reset`` (seeded ``seed``) raised ``exc``: back to IDLE, and the error to raise (``exc``
        itself where it is no ``Exception``: cancelled, the stream ended meanwhile)."""
        self.sequence = self.sequence.to(Sequence.IDLE)
        if not isinstance(exc, Exception):
            return exc
        self.broken = True
        if self.next_seed is None:
            self.next_seed = seed
        return status.internal(f"{self.world.factory.name}: reset raised {type(exc).__name__}: {exc}")

    def _started(self, obs: Any, info: Any, seed: int | None) -> None:
        self._info = info
        if self.sequence is Sequence.STARTING:   # else INTERRUPTED meanwhile: the next step says so
            self.sequence = self.sequence.to(Sequence.RUNNING)
        self.sequence_seed = seed
        self.episode_step, self.episode_return = 0, 0.0
        self._obs = obs

    async def step(self, request: pb.StepRequest, out: StepAnswer,
                   large: Mapping[int, large_tensors.Decoded] | None = None) -> None:
        """Answer one StepRequest into ``out`` (the env steps on a worker thread); ``large``: the
        request's tensors read outside protobuf (:func:`~dmrpc_gym.protocol.large_tensors.split`)."""
        plan = self.interface.plan(request.requested_observations)
        reward = raw = 0.0                   # raw: the env's own reward, of its own type
        discount, info, ends = 1.0, None, (False, False)
        sequence = self.sequence
        if sequence is Sequence.RUNNING:
            action = self.interface.actions(request.actions, large)
            try:
                obs, reward, terminated, truncated, info = await self.lane.quick(self.env.step, action)
            except Exception as exc:  # noqa: BLE001 - the env's error is the answer
                raise self.step_failed(exc) from None
            raw, ends = reward, (terminated, truncated)
            out.state, reward, discount = self.stepped(obs, raw, terminated, truncated)
        elif sequence is Sequence.INTERRUPTED:
            self.sequence = sequence.to(Sequence.IDLE)
            out.state = _INTERRUPTED
        else:                                # IDLE, or STALE (then _start refuses)
            await self._start()
            out.state, info = _RUNNING, self._info
        if plan.rgb:
            exact = self._exact(plan, raw, ends)
            await self.interface.answer(plan, out, self._obs, reward, discount, self.lane, self._render, info, exact)
        else:
            self.encode(plan, out, raw, ends, reward, discount, info)

    def step_failed(self, exc: Exception) -> Exception:
        """``env.step`` raised ``exc``: the sequence is over, and the error to answer with."""
        self.broken = True
        self.sequence = self.sequence.to(Sequence.IDLE)   # RUNNING, or INTERRUPTED meanwhile
        return status.internal(f"{self.world.factory.name}: step raised {type(exc).__name__}: {exc}; "
                               f"the next step starts a new sequence")

    def stepped(self, obs: Any, raw: Any, terminated: bool, truncated: bool) -> tuple[int, float, float]:
        """The env stepped (``raw``: its reward): the counters; the answer's ``(state, reward, discount)``."""
        reward = self.ran(obs, raw)
        state, discount = self._outcome(terminated, truncated)
        if state != _RUNNING:            # the sequence ended (an interruption meanwhile with it)
            self.sequence = self.sequence.to(Sequence.IDLE)
            watch = self.world.watch
            if watch is not None:        # a dashboard watches (dmrpc_gym.server.serving.watching)
                watch.ended(self.episode_return, self.episode_step)
        return state, reward, discount

    def ran(self, obs: Any, raw: Any) -> float:
        """Count a step the env took (``obs``, ``raw``: its reward), all of :meth:`stepped` for a step that
        goes on (:mod:`~dmrpc_gym.server.serving.steady`'s); the reward as a float."""
        reward = float(raw)
        self._obs = obs
        self.episode_step += 1
        self.episode_return += reward
        self.last_reward = reward
        return reward

    def encode(self, plan: Any, out: StepAnswer, raw: Any, ends: tuple, reward: float, discount: float,
               info: Any) -> None:
        """Write a step's planned observations (no frame among them) into ``out``."""
        if plan.items:
            self.interface.encode(plan, out, self._obs, reward, discount, None, info, self._exact(plan, raw, ends))

    def _exact(self, plan: Any, raw: Any, ends: tuple) -> dict | None:
        return exact_step(raw, *ends, self.interface.scalar_kinds.of(self._obs) if plan.env else None) \
            if plan.exact else None      # a foreign client never asks: no work for it

    def _outcome(self, terminated: bool, truncated: bool) -> tuple[int, float]:
        """The step's ``(state, discount)``."""
        return sequence_state(terminated, truncated)

    async def reset(self, settings: Mapping[str, pb.Tensor]) -> pb.ActionObservationSpecs:
        """ResetRequest: settings for the next sequence (``seed``, world-setting overrides)."""
        kwargs = unpack_settings(settings, "reset")
        seed = pop_seed(kwargs, "reset")
        overrides = self.overrides
        if kwargs:
            self.world.factory.check(kwargs, "reset")
            overrides = {**overrides, **kwargs}
        recipe = {**self.world.kwargs, **overrides}
        if not same_settings(recipe, self.env_kwargs):
            await self._rebuild(recipe, seed)
        self.overrides = overrides
        if seed is not None:
            self.next_seed = seed
        self.sequence = Sequence.IDLE if self.sequence is Sequence.IDLE else self.sequence.to(Sequence.IDLE)
        return self.interface.specs

    def world_reset(self, seed: int | None, caller: bool) -> None:
        """The world was reset (by ``caller`` or another connection)."""
        if seed is not None:
            self.next_seed = seed
        sequence = self.sequence
        if caller:
            if sequence is Sequence.RUNNING or sequence is Sequence.INTERRUPTED:
                self.sequence = sequence.to(Sequence.IDLE)
        elif sequence is Sequence.RUNNING or sequence is Sequence.STARTING:
            self.sequence = sequence.to(Sequence.INTERRUPTED)

    def leave(self) -> None:
        self.world.release(self)

    # -- properties ------------------------------------------------------------------

    def _write_seed(self, value: np.ndarray) -> None:
        self.next_seed = check_seed(value.item(), "property")

    def _read_seed(self) -> int:
        seed = self.next_seed if self.next_seed is not None else self.sequence_seed
        return -1 if seed is None else seed

    def properties(self) -> list[Property]:
        return [
            *fidelity_properties(self.interface, self.env, lambda: current_frame(
                self.env, self.lane, self.world.factory.name, self.world.factory.render_failure)),
            Property("world_name", pb.STRING, "the world this connection is joined to",
                     read=lambda: self.world.name),
            Property(SEED, pb.INT64,
                     "the seed of the next sequence when one is pending, else of the current one "
                     "(-1: unseeded); writing it seeds the next sequence",
                     read=self._read_seed, write=self._write_seed),
            Property("episode_step", pb.INT64, "steps taken in the current sequence",
                     read=lambda: self.episode_step),
            Property("episode_return", pb.DOUBLE, "sum of the rewards of the current sequence",
                     read=lambda: self.episode_return),
            *env_properties(self.env, self.lane),
        ]


GymWorld.agent_class = GymAgent
