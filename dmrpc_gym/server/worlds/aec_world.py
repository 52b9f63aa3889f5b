"""Turn-based PettingZoo worlds: one AEC env whose agents, joined connections, act in turn.

PettingZoo's ``classic`` games (tic-tac-toe, connect four, chess, go...) are AEC
envs that ``aec_to_parallel`` cannot take (``metadata["is_parallelizable"]``
false or missing); a server serves them turn by turn. CreateWorld, JoinWorld
(the join setting ``agent``), seeds, Reset, ResetWorld, leaving, properties and
the waits' ``timeout`` are those of :mod:`~dmrpc_gym.server.worlds.parallel_world`.

**The turn protocol**, for any dm_env_rpc client with one connection per agent:

- A StepRequest is answered when it is its agent's turn (``env.agent_selection``),
  with ``env.last()`` for it: the observation as its space has it (a Dict with
  ``observation`` and ``action_mask`` keys is two tensors), ``reward`` (what the
  agent got since its last turn: PettingZoo's ``_cumulative_rewards``), the info,
  and the state: TERMINATED (discount 0) when ``last()`` says terminated,
  INTERRUPTED when truncated, else RUNNING. Until its turn comes, a step waits;
  after the world's ``timeout`` with no move by anyone, DEADLINE_EXCEEDED.
- **Start**: an agent's first step (its actions are not used) joins the episode in
  progress or, once every agent is joined, starts one (``env.reset``). It is
  answered RUNNING at the agent's first turn.
- **Move**: each next step carries the agent's action. It is the agent's turn (it
  was answered at it), so ``env.step(action)`` runs at once; the step is answered
  at the agent's next turn. An illegal move is the env's to judge, as locally
  (PettingZoo's wrappers end the game with a penalty). A step after one that
  failed while waiting (DEADLINE_EXCEEDED) moves nothing: it waits for the turn.
- **End**: a TERMINATED or INTERRUPTED answer ends the agent's sequence. The world
  then takes its dead step (``env.step(None)``, which PettingZoo asks of a finished
  agent) for it, so that the next agent's turn does not wait for a request that, in
  dm_env_rpc, would start a new sequence. Its next step waits for the next episode.
  (An agent whose first turn finds it finished is answered RUNNING, as a sequence
  starts, and TERMINATED / INTERRUPTED at its next step, with no move made.)
- A waiting step is answered INTERRUPTED when the episode is aborted (a running
  agent's Reset or leave, a ResetWorld) or its agent leaves ``env.agents`` without
  a turn.

A dmrpc_gym client also asks for the turn's table (:mod:`dmrpc_gym.protocol.turns`):
``agent_selection`` and every agent's rewards, flags, infos and observation, so
that its AEC env shows what the local one shows. The world's ``agent_selection``
property says whose turn it is (``''`` between episodes).

>>> from pettingzoo.classic import tictactoe_v3
>>> world = AECWorld("demo", Factory("pettingzoo.classic.tictactoe_v3:env"), {}, 0, tictactoe_v3.env(), 5.0)
>>> async def opening():
...     first, second = [await world.join({}) for _ in world.possible]
...     out = StepAnswer()
...     waiting = asyncio.ensure_future(second.step(pb.StepRequest(), out))   # not its turn yet
...     await first.step(pb.StepRequest(), StepAnswer())                      # player_1's first turn
...     await asyncio.sleep(0.01)
...     before = waiting.done()
...     move = pb.StepRequest(actions={1: tensors.pack(np.int64(4))})         # the centre
...     moving = asyncio.ensure_future(first.step(move, StepAnswer()))        # answered at its next turn
...     await waiting                                                          # player_2's turn has come
...     moving.cancel()
...     return first.name, before, world.selected, pb.EnvironmentStateType.Name(out.state)
>>> asyncio.run(opening())
('player_1', False, 'player_2', 'RUNNING')
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping

import numpy as np

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.info import info_tensor_bytes, pack_info
from dmrpc_gym.protocol.turns import TABLE_KEYS, TURN_UID
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server.serving import status
from dmrpc_gym.server.envs.factories import Factory
from dmrpc_gym.server.worlds.interface import StepAnswer, sequence_state
from dmrpc_gym.server.worlds.parallel_agent import ParallelAgent
from dmrpc_gym.server.worlds.parallel_world import ParallelWorld
from dmrpc_gym.server.worlds.properties import Property

__all__ = ["AECWorld", "AECAgent"]

_RUNNING, _INTERRUPTED = pb.RUNNING, pb.INTERRUPTED


# -- env calls, on the world's lane ---------------------------------------------------------

def _reset(env: Any, seed: int | None) -> tuple[dict, dict, list]:
    """``env.reset``: an AEC env returns nothing; its observations are read turn by turn."""
    env.reset(seed=seed)
    return {}, {}, list(env.agents)


def _move(env: Any, action: Any) -> tuple[str, list]:
    env.step(action)
    return env.agent_selection, list(env.agents)


def _table(env: Any, turn: int, observed: Mapping[str, Any] | None) -> dict[str, Any]:
    """The game as a PettingZoo user sees it (:mod:`dmrpc_gym.protocol.turns`); with every agent's
    observation when ``observed`` (those already made) is given."""
    table: dict[str, Any] = {"turn": turn, "agent_selection": env.agent_selection, "agents": list(env.agents)}
    for key, attribute in TABLE_KEYS.items():
        table[key] = dict(getattr(env, attribute))
    if observed is not None:
        table["observations"] = {a: observed[a] if a in observed else env.observe(a) for a in env.agents}
    return table


def _answer(env: Any, turn: int, table: bool, first: bool) -> tuple[tuple, bool, str, list]:
    """``env.last()`` for the agent whose turn it is (and the table); a finished agent's dead
    step after, unless this answer starts its sequence."""
    obs, reward, terminated, truncated, info = env.last()
    record = _table(env, turn, {env.agent_selection: obs}) if table else None
    ends = bool(terminated or truncated) and not first
    if ends:
        env.step(None)
        if record is not None:
            record["after"] = _table(env, turn + 1, None)
    result = (obs, float(reward), bool(terminated), bool(truncated), info, record)
    return result, ends, env.agent_selection, list(env.agents)


class AECAgent(ParallelAgent):
    """One joined connection of a turn-based world: its steps wait for its turns."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self._finished = False   # its sequence's first answer found it terminated or truncated
        self.answered: tuple[int, int] | None = None   # (episode, env.step calls) of its latest answer

    async def step(self, request: pb.StepRequest, out: StepAnswer,
                   large: Mapping[int, large_tensors.Decoded] | None = None) -> None:
        """Answer one StepRequest into ``out`` at this agent's turn (see the module doc)."""
        world: AECWorld = self.world  # type: ignore[assignment]
        requested = request.requested_observations
        table = TURN_UID in requested
        plan = self.interface.plan([uid for uid in requested if uid != TURN_UID] if table else requested)
        first = not self.running
        try:
            if first:
                await world.start_sequence(self)
                result = await world.turn(self, True, table)
            elif not (world.running and world.episode == self.episode):
                result = None
            elif self._finished or self.answered != (world.episode, world.rounds):
                result = await world.turn(self, False, table)     # no move before its turn is answered
            else:
                result = await world.move(self, self.interface.actions(request.actions, large), table)
        except DmRpcError:
            if not (world.running and world.episode == self.episode):
                self.running = False
            raise
        reward, discount, info, record = 0.0, 1.0, None, None
        if result is None:
            self.running, out.state = False, _INTERRUPTED
        else:
            self._obs, reward, terminated, truncated, info, record = result
            self.episode_return += reward
            self.last_reward = reward
            self._finished = first and (terminated or truncated)
            out.state, discount = (_RUNNING, 1.0) if first else sequence_state(terminated, truncated)
            self.running = out.state == _RUNNING
        if self._obs is None:     # interrupted before any turn: a placeholder fills the observation
            self._obs = self.interface.observation_space.sample()
        if plan.rgb:
            await self.interface.answer(plan, out, self._obs, reward, discount, world.lane, self._render, info)
        elif plan.items:
            self.interface.encode(plan, out, self._obs, reward, discount, None, info)
        if record is not None:
            out.add_bytes(TURN_UID, info_tensor_bytes(pack_info(record)))


class AECWorld(ParallelWorld):
    """A PettingZoo AEC env whose agents are joined connections, acting in turn (see the module doc).

    The constructor is :class:`~dmrpc_gym.server.worlds.parallel_world.ParallelWorld`'s.
    """

    kind = "aec"
    agent_class = AECAgent
    env_reset = staticmethod(_reset)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.selected: str | None = None   # env.agent_selection of the running episode

    async def _reset_env(self) -> None:
        await super()._reset_env()
        self.selected = self.env.agent_selection if self.running else None

    async def _play(self, what: str, fn: Callable, *args: Any) -> Any:
        """``fn(env, *args)`` on the lane; if it raises, the episode ends with that error for everyone."""
        episode = self.episode
        try:
            return await self.lane.quick(fn, self.env, *args)
        except Exception as exc:  # noqa: BLE001 - the env's error is the answer
            message = f"{self.factory.name}: {what} raised {type(exc).__name__}: {exc}; the episode ended"
            if self.running and self.episode == episode:
                self.failure = (episode, message)
                self.running, self.live = False, set()
                self._notify()
            raise status.internal(message) from None

    def _moved(self, selected: str, agents: list) -> None:
        self.rounds += 1
        self.selected, self.live = selected, set(agents)
        self.running = bool(self.live)
        self._notify()

    async def turn(self, agent: "AECAgent", first: bool, table: bool) -> tuple | None:
        """Wait for ``agent``'s turn in its episode and answer it: ``(obs, reward, terminated,
        truncated, info, table)``; None when its episode ended for it before."""
        episode = agent.episode
        while True:
            if self.failure is not None and self.failure[0] == episode:
                raise status.internal(self.failure[1])
            if not self.running or self.episode != episode or agent.name not in self.live:
                return None
            if self.selected == agent.name:
                break
            await self._wait(lambda: f"agent {self.selected!r} to move (agent {agent.name!r} waits for its turn)")
        generation = self.generation
        result, ends, selected, agents = await self._play("last", _answer, self.rounds, table, first)
        if generation != self.generation:
            return None
        agent.answered = (self.episode, self.rounds)
        if ends:
            self._moved(selected, agents)
        return result

    async def move(self, agent: "AECAgent", action: Any, table: bool) -> tuple | None:
        """``agent``'s move (its turn), then its next turn's answer, as :meth:`turn`."""
        generation = self.generation
        selected, agents = await self._play("step", _move, action)
        if generation != self.generation:
            return None
        self._moved(selected, agents)
        return await self.turn(agent, False, table)

    def properties(self) -> list[Property]:
        return [*super().properties(),
                Property("agent_selection", pb.STRING, "the agent whose turn it is ('' between episodes)",
                         read=lambda: (self.selected or "") if self.running else "")]
