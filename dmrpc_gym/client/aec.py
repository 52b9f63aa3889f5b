"""``DmRpcAECEnv``: a turn-based world of a dmrpc_gym server as a PettingZoo ``AECEnv``.

A dmrpc_gym server serves PettingZoo's turn-based games (AEC envs that are not
parallelizable: tic-tac-toe, connect four, chess...) turn by turn, one
connection per agent, each agent's step answered at its turn
(:mod:`dmrpc_gym.server.worlds.aec_world`). This env is the other end. Its agents'
connections are joined as :class:`~dmrpc_gym.client.parallel.DmRpcParallelEnv`
joins them (one world, shared HTTP/2 connections). Every agent whose turn it is
not has a step in flight; after a move the env reads the answer that comes
next, the one of the agent whose turn has come. Each answer carries the game's
table (:mod:`dmrpc_gym.protocol.turns`), so ``agent_selection``, ``last()``,
``observe()``, ``agents``, ``rewards``, ``_cumulative_rewards``,
``terminations``, ``truncations`` and ``infos`` are the served env's own, and
the observations carry their ``action_mask`` as the env makes it.

>>> import dmrpc_gym
>>> from dmrpc_gym.server import Server
>>> with Server("pettingzoo.classic.tictactoe_v3:env") as server:
...     env = dmrpc_gym.aec_env(server.address)
...     env.reset(seed=0)
...     first = env.agent_selection
...     observation, reward, terminated, truncated, info = env.last()
...     env.step(4)                                  # the centre
...     after = env.agent_selection, env.last()[0]["action_mask"].tolist()
...     env.close()
>>> first, observation["action_mask"].tolist(), after
('player_1', [1, 1, 1, 1, 1, 1, 1, 1, 1], ('player_2', [1, 1, 1, 1, 0, 1, 1, 1, 1]))
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np
from pettingzoo import AECEnv

from dmrpc_gym.client.agent import RemoteAgent, State
from dmrpc_gym.client.agents import AgentsArg
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.env_facts import parallel_metadata
from dmrpc_gym.client.exchanges import first_ready, named_failure
from dmrpc_gym.client.parallel import DmRpcParallelEnv
from dmrpc_gym.client.properties import Properties
from dmrpc_gym.client.seeding import AUTO
from dmrpc_gym.protocol.info import unpack_info
from dmrpc_gym.protocol.turns import TABLE_KEYS, TURN_UID
from dmrpc_gym.protocol.wire import pb

__all__ = ["DmRpcAECEnv", "aec_env"]


class _TurnAgent(RemoteAgent):
    """A :class:`RemoteAgent` that also asks for the turn's table, kept apart as ``table``."""

    table: dict[str, Any] | None = None

    def _apply_specs(self, specs: pb.ActionObservationSpecs) -> None:
        super()._apply_specs(specs)
        if TURN_UID not in self.requested:
            self.requested.append(TURN_UID)
            self._requests.clear()

    def _stepped(self, response: pb.StepResponse, large: dict) -> tuple:
        observations = response.observations
        self.table = None
        if TURN_UID in observations:
            self.table = unpack_info(observations[TURN_UID].strings.array[0])
            del observations[TURN_UID]
        return super()._stepped(response, large)


class _Seats(DmRpcParallelEnv):
    """The agents' joined connections: the parallel env's machinery, with turn agents."""

    agent_class = _TurnAgent

    def _check_turns(self, connection: Connection, address: str) -> None:
        if connection.server_software is None or "agent_selection" not in Properties(connection):
            raise ValueError(f"world {self.world_name!r} at {address} is not a turn-based world of a "
                             "dmrpc_gym server (a PettingZoo AEC env served turn by turn); "
                             "dmrpc_gym.parallel_env() reads worlds whose agents step together")


class DmRpcAECEnv(AECEnv):
    """A turn-based world of a dmrpc_gym server as a PettingZoo ``AECEnv`` (see the module doc).

    Args:
        address: the server (or a list to fail over along); this and ``world_settings``, ``world_name``, ``agents``,
            ``reset_settings``, ``seed_setting``, ``connect_timeout``, ``step_timeout``,
            ``grpc_metadata``, ``tls``, ``token``, ``compression``, ``max_message_size``,
            ``keepalive``, ``share_connections`` and ``shared_memory`` are as for
            :class:`~dmrpc_gym.client.parallel.DmRpcParallelEnv`.
        render_mode: ``"rgb_array"``: ``render()`` returns the frame of the current state.

    ``reset(options={"settings": {...}})`` sends reset settings. A move waits for the next
    agent's turn, at most ``step_timeout`` (and the server's ``--timeout`` with no move, 30 s
    by default, bounds how long an agent's step waits for its turn: a game is played without
    long pauses). ``ValueError`` at construction when the world is not turn-based (or not a
    dmrpc_gym server's: the game's table comes from it).

    >>> from dmrpc_gym.server import Server
    >>> with Server("pettingzoo.classic.connect_four_v3:env") as server:
    ...     env = DmRpcAECEnv(server.address)
    ...     env.reset(seed=1)
    ...     for agent in env.agent_iter(4):
    ...         env.step(0)                              # both players pile up in column 0
    ...     spaces = env.observation_space("player_0")["action_mask"], env.action_space("player_0")
    ...     env.close()
    >>> spaces
    (Box(0, 1, (7,), int8), Discrete(7))
    """

    metadata = {"render_modes": ["rgb_array"], "name": "dmrpc_aec_v0", "is_parallelizable": False}

    def __init__(self, address: str | Sequence[str], *, world_settings: Mapping[str, Any] | None = None,
                 world_name: str | None = None, agents: AgentsArg | None = None,
                 reset_settings: Mapping[str, Any] | None = None, seed_setting: str | None = AUTO,
                 render_mode: str | None = None, connect_timeout: float | None = 10.0,
                 step_timeout: float | None = None, grpc_metadata: Any = None, tls: Any = None,
                 token: str | None = None, compression: str | None = None, max_message_size: int | None = None,
                 keepalive: float | None = None, share_connections: bool = True, shared_memory: bool = True):
        super().__init__()
        self._seats = seats = _Seats(
            address, world_settings=world_settings, world_name=world_name, agents=agents,
            reset_settings=reset_settings, seed_setting=seed_setting, render_mode=render_mode,
            connect_timeout=connect_timeout, step_timeout=step_timeout, grpc_metadata=grpc_metadata, tls=tls,
            token=token, compression=compression, max_message_size=max_message_size, keepalive=keepalive,
            share_connections=share_connections, shared_memory=shared_memory)
        self.render_mode = render_mode
        self.possible_agents = list(seats.possible_agents)
        self.action_spaces = {a: seats.action_spaces[a] for a in self.possible_agents}     # shared as served
        self.observation_spaces = {a: seats.observation_spaces[a] for a in self.possible_agents}
        self.metadata = parallel_metadata(seats._facts() or {}, type(self).metadata)
        self.agents: list[str] = []
        self.rewards, self._cumulative_rewards, self.terminations, self.truncations, self.infos = {}, {}, {}, {}, {}
        self.agent_selection = None     # type: ignore[assignment]  (set by reset)
        self._observations: dict[str, Any] = {}
        self._pending: list[str] = []          # agents with a step in flight, in the order sent
        self._read: dict[str, dict] = {}       # tables of answers read ahead, by agent
        self._turn = -1                        # the turn of the table shown
        self._after: dict | None = None        # the table once the selected agent's dead step is taken
        self._hand: str | None = None          # the agent answered last (no step in flight)

    def observation_space(self, agent: str):
        """``agent``'s observation space (the same object on every call)."""
        return self.observation_spaces[agent]

    def action_space(self, agent: str):
        """``agent``'s action space (the same object on every call)."""
        return self.action_spaces[agent]

    def observe(self, agent: str) -> Any:
        """``agent``'s observation now (a copy), as the served env's ``observe`` made it."""
        return copy.deepcopy(self._observations.get(agent))

    # -- the wire ------------------------------------------------------------------------
    def _submit(self, name: str, request: tuple | None = None) -> None:
        agent = self._seats.remote[name]
        try:
            agent.connection.submit(*(request or agent.step_request(None)))
        except Exception as err:  # noqa: BLE001 - named, and the env is unusable after it
            raise self._failed(name, err) from err
        self._pending.append(name)

    def _receive(self, name: str) -> None:
        """Read ``name``'s answer; its table (if any) is kept in ``_read``."""
        self._pending.remove(name)
        agent = self._seats.remote[name]
        try:
            agent.receive_step()
        except Exception as err:  # noqa: BLE001 - named, and the env is unusable after it
            raise self._failed(name, err) from err
        if agent.table is not None:
            self._read[name] = agent.table

    def _failed(self, name: str, err: Exception) -> BaseException:
        seats = self._seats
        seats._unhealthy.add(name)
        seats._failure = f"agent {name!r} failed: {err}"
        return named_failure(err, name, "step")

    def _take(self, turn: int, who: str | None = None) -> None:
        """Read answers until the one of ``turn`` (``who``'s, when known): whose turn has come."""
        seats = self._seats
        while True:
            found = next((n for n, t in self._read.items() if t["turn"] == turn and who in (None, n)), None)
            if found is not None:
                break
            waiting = [n for n in self._pending if who in (None, n)]
            if not waiting:         # every sequence ended without another turn (an aborted episode)
                self._apply(self._over(turn))
                return
            for name in first_ready({n: seats.connections[n] for n in waiting}, 1, seats.step_timeout):
                self._receive(name)
        table = self._read.pop(found)
        self._apply(table)
        self._hand, self._after = found, table.get("after")

    def _over(self, turn: int) -> dict[str, Any]:
        """The table of a game that ended with no turn left to tell it."""
        return {"turn": turn, "agent_selection": self.agent_selection, "agents": [], **{key: {} for key in TABLE_KEYS}}

    def _apply(self, table: dict[str, Any]) -> None:
        self._turn = table["turn"]
        self.agent_selection = table["agent_selection"]
        self.agents = list(table["agents"])
        for key, attribute in TABLE_KEYS.items():
            setattr(self, attribute, dict(table[key]))
        if "observations" in table:
            self._observations = table["observations"]

    def _usable(self) -> _Seats:
        self._seats._check_usable()
        return self._seats

    def _end_episode(self, settings: Mapping[str, Any]) -> set[str]:
        """End the episode on the server: a running agent's Reset aborts it, and every step in
        flight is answered (INTERRUPTED). Returns the agents that sent ``settings`` with it."""
        seats, remote = self._seats, self._seats.remote
        sent: set[str] = set()
        while True:
            hand = [n for n in self.possible_agents if n not in self._pending and remote[n].state == State.RUNNING]
            if hand:
                seats._exchange("reset", {n: (lambda a=remote[n]: a.submit_reset(settings) or True,
                                              remote[n].receive_reset) for n in hand})
                sent.update(hand)
            if not self._pending:
                break
            for name in list(self._pending):
                self._receive(name)
        self._read.clear()
        return sent

    # -- PettingZoo API ----------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        """Start a new game: the episode in progress ends, ``seed`` (and ``options["settings"]``)
        reach the server, and every agent asks for its first turn; the first one comes."""
        seats = self._usable()
        settings = seats._seeds.settings(seats.reset_settings, dict(options or {}), seed)
        sent = self._end_episode(settings)
        remote = seats.remote
        seats._exchange("reset", {n: (lambda a=remote[n]: a.submit_reset(settings), remote[n].receive_reset)
                                  for n in self.possible_agents if n not in sent})
        for name in self.possible_agents:
            self._submit(name)
        self._take(0)

    def step(self, action: Any) -> None:
        """``agent_selection``'s move (``None`` for a finished agent, as PettingZoo asks); returns
        once the next agent's turn has come (or the game is over)."""
        seats = self._usable()
        if not self.agents:
            raise RuntimeError("the game is over (no agent is left): call reset()")
        name = self.agent_selection
        if not (self.terminations[name] or self.truncations[name]):
            request = seats.remote[name].step_request(action)    # a bad action: ValueError, nothing sent
            self._submit(name, request)
            self._take(self._turn + 1)
            return
        if action is not None:
            raise ValueError("when an agent is dead, the only valid action is None")
        if seats.remote[name].state == State.RUNNING:     # its first turn found it finished
            self._submit(name)
            self._take(self._turn, who=name)
        self._apply(self._after or self._over(self._turn + 1))     # the world took its dead step
        if self.agents:
            self._take(self._turn, who=self.agent_selection)

    def render(self) -> np.ndarray | None:
        """The frame of the current state in ``rgb_array`` mode (None without a render_mode)."""
        if self.render_mode is None:
            return None
        name = self._hand if self._hand is not None and self._hand not in self._pending else None
        if name is None:
            raise RuntimeError("render() needs a reset() first")
        return self._seats.remote[name].current_frame(self.render_mode)

    def close(self) -> None:
        """End the game, leave and destroy the world this env created. Idempotent; never hangs."""
        seats = self._seats
        if seats._closed:
            return
        if self._pending and seats._failure is None:
            try:
                for connection in seats.connections.values():
                    connection.shorten_timeout(seats.abandon_timeout)
                self._end_episode({})
            except Exception:  # noqa: BLE001 - closing is best effort: those connections just close
                pass
        seats._unhealthy.update(self._pending)
        seats.close()


def aec_env(address: str | Sequence[str], *, world_settings: Mapping[str, Any] | None = None,
            world_name: str | None = None, agents: AgentsArg | None = None, **kwargs: Any) -> DmRpcAECEnv:
    """A turn-based world of a dmrpc_gym server (``dmrpc-gym serve pettingzoo.classic.tictactoe_v3:env``)
    as a PettingZoo ``AECEnv`` (see :class:`DmRpcAECEnv`).

    >>> from dmrpc_gym.server import Server
    >>> with Server("pettingzoo.classic.tictactoe_v3:env") as server:
    ...     env = aec_env(server.address, agents=["player_1", "player_2"])
    ...     env.possible_agents
    ...     env.close()
    ['player_1', 'player_2']
    """
    return DmRpcAECEnv(address, world_settings=world_settings, world_name=world_name, agents=agents, **kwargs)
