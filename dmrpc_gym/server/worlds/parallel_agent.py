"""One agent of a PettingZoo world: a joined connection's steps, resets and properties.

The world (:mod:`~dmrpc_gym.server.worlds.parallel_world`) holds the env and makes the
agents wait for each other; an agent turns its connection's requests into the
world's calls and the world's results into StepResponses.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol

from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.fidelity import exact_step
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server.running import render_threads
from dmrpc_gym.server.envs.factories import Factory
from dmrpc_gym.server.worlds.fidelity import fidelity_properties
from dmrpc_gym.server.worlds.interface import AgentInterface, StepAnswer, sequence_state
from dmrpc_gym.server.worlds.rendering import current_frame
from dmrpc_gym.server.worlds.properties import Property
from dmrpc_gym.server.worlds.settings import SEED, pop_seed, refuse_unknown, unpack_settings
from dmrpc_gym.server.running.workers import Lane

__all__ = ["ParallelAgent", "SharedWorld", "AGENT"]

#: The join setting naming the agent to play.
AGENT = "agent"

_RUNNING, _INTERRUPTED = pb.RUNNING, pb.INTERRUPTED


def names_text(agents: Any) -> str:
    """Agent names for a message: ``'a', 'b'``."""
    return ", ".join(repr(a) for a in agents) or "none"


class SharedWorld(Protocol):
    """What an agent needs of the world whose env it shares with other agents: a
    :class:`~dmrpc_gym.server.worlds.parallel_world.ParallelWorld` (or an AEC world) is one. Written here
    so that this module need not import the world's, which imports it."""

    name: str
    env: Any
    lane: Lane
    factory: Factory
    obs: dict[str, Any]
    infos: dict[str, Any]
    live: set[str]
    running: bool
    episode: int
    seed: int | None
    episode_seed: int | None

    async def start_sequence(self, agent: ParallelAgent) -> None: ...
    async def act(self, agent: ParallelAgent, action: Any) -> tuple | None: ...
    def abort(self) -> None: ...
    def release(self, agent: ParallelAgent) -> None: ...
    def properties(self) -> list[Property]: ...


class ParallelAgent:
    """One joined connection of a PettingZoo world: one agent of its env."""

    def __init__(self, world: SharedWorld, name: str, interface: AgentInterface):
        self.world, self.name, self.interface = world, name, interface
        self.lane = world.lane           # the world's env's: where a step's env time is read
        self.running = False
        self.episode = 0
        self.result: tuple | None = None
        self.episode_return = 0.0
        self.last_reward: float | None = None   # the reward of its latest step that stepped the env
        self._obs: Any = None
        self._info: Any = None   # the agent's info from env.reset, sent with its first step
        self._render = self._frame if interface.rgb_shape else None

    @property
    def specs(self) -> pb.ActionObservationSpecs:
        return self.interface.specs

    def _frame(self) -> Any:
        return render_threads.render(self.world.env)

    def begin(self, episode: int) -> None:
        """Start this agent's sequence in ``episode``."""
        self.running, self.episode, self.episode_return = True, episode, 0.0
        self._obs = self.world.obs.get(self.name)
        self._info = self.world.infos.get(self.name)

    async def step(self, request: pb.StepRequest, out: StepAnswer,
                   large: Mapping[int, large_tensors.Decoded] | None = None) -> None:
        """Answer one StepRequest into ``out`` (may wait for the other agents); ``large`` as
        :meth:`~dmrpc_gym.server.worlds.gym_world.GymAgent.step`."""
        plan = self.interface.plan(request.requested_observations)
        world = self.world
        reward = raw = 0.0                   # raw: the env's own reward, of its own type
        discount, info, ends = 1.0, None, (False, False)
        if not self.running:
            await world.start_sequence(self)
            out.state, info = _RUNNING, self._info
        elif not world.running or world.episode != self.episode or self.name not in world.live:
            self.running = False
            out.state = _INTERRUPTED
        else:
            action = self.interface.actions(request.actions, large)
            try:
                result = await world.act(self, action)
            except DmRpcError:
                if not (world.running and world.episode == self.episode):
                    self.running = False
                raise
            if result is None:
                self.running = False
                out.state = _INTERRUPTED
            else:
                self._obs, raw, terminated, truncated, info = result
                reward, ends = float(raw), (terminated, truncated)
                self.episode_return += reward
                self.last_reward = reward
                out.state, discount = sequence_state(terminated, truncated or self.name not in world.live)
                self.running = out.state == _RUNNING
        exact = exact_step(raw, *ends, self.interface.scalar_kinds.of(self._obs) if plan.env else None) \
            if plan.exact else None      # a foreign client never asks: no work for it
        if plan.rgb:
            await self.interface.answer(plan, out, self._obs, reward, discount, world.lane, self._render, info, exact)
        elif plan.items:
            self.interface.encode(plan, out, self._obs, reward, discount, None, info, exact)

    async def reset(self, settings: Mapping[str, pb.Tensor]) -> pb.ActionObservationSpecs:
        """ResetRequest: settings ``seed`` only; a running agent ends the episode for everyone."""
        kwargs = unpack_settings(settings, "reset")
        seed = pop_seed(kwargs, "reset")
        refuse_unknown(kwargs, "reset", f"an agent of world {self.world.name!r}", [SEED])
        world = self.world
        in_current = world.running and world.episode == self.episode and self.name in world.live
        joins_current = world.running and self.name in world.live and not in_current
        if seed is not None:
            if joins_current and seed == world.episode_seed:
                pass  # the episode this agent is about to start already used this seed
            elif joins_current:
                world.seed = seed
                world.abort()
            else:
                world.seed = seed
        if self.running:
            self.running = False
            if in_current:
                world.abort()
        return self.interface.specs

    def leave(self) -> None:
        self.world.release(self)

    def properties(self) -> list[Property]:
        world = self.world
        return [
            *fidelity_properties(self.interface, world.env, lambda: current_frame(
                world.env, world.lane, f"{world.factory.name} (world {world.name!r})", world.factory.render_failure)),
            Property("world_name", pb.STRING, "the world this connection is joined to",
                     read=lambda: self.world.name),
            Property(AGENT, pb.STRING, "the agent this connection plays", read=lambda: self.name),
            Property("episode_return", pb.DOUBLE, "sum of this agent's rewards in its current sequence",
                     read=lambda: self.episode_return),
            *self.world.properties(),
        ]
