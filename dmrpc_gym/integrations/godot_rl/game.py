"""One Godot RL Agents game: launched, connected and driven over the protocol, its process always ended.

:class:`GodotRLGame` listens on a port the OS picked, starts the game pointed at it
(``--port``, ``--env_seed``, ``--action_repeat``, ``--speedup``), accepts its connection,
sends the handshake, reads ``env_info`` and then exchanges ``reset``, ``action`` / ``step``,
``call`` and ``close``. It reads both message forms: one space dict shared by every agent
(the Godot 3 plugin) or a list, one per agent (newer plugins), with or without ``info``
and ``agent_policy_names``. The envs of :mod:`dmrpc_gym.integrations.godot_rl` are built on it.

The game's process is a :class:`~dmrpc_gym.integrations.godot.launch.GameProcess` (its own
process group, the tail of its output kept, killed at interpreter exit), as for GymGodot games.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Sequence

from gymnasium import spaces

from dmrpc_gym.integrations.godot.launch import GameProcess, exchange_failure, find_godot, stop_at_exit
from dmrpc_gym.integrations.godot_rl.spaces import (action_space, decode_observation, encode_action,
                                                    observation_space)
from dmrpc_gym.integrations.godot_rl.wire import GodotRLProtocolError, Link, Listener

__all__ = ["GodotRLGame", "GodotRLWarning", "game_command", "LOSSES", "HANDSHAKE"]

#: The handshake sent first (the game does not answer it).
HANDSHAKE = {"type": "handshake", "major_version": "0", "minor_version": "7"}

#: What the protocol cannot carry, said once per game by name (a :class:`GodotRLWarning`).
LOSSES = ("the protocol has one `done` flag: it is reported as `terminated`, never `truncated`, "
          "so a time limit in the game looks like a terminal state",
          "there is no terminal observation: the game resets an agent itself when it sends `done`, "
          "so the observation that comes with `done` already belongs to the agent's next episode",
          "Godot's JSON rounds floats (observations and rewards) to about 6 decimals",
          "a game may reset an agent by itself without sending `done`; such an episode boundary is not seen")


class GodotRLWarning(UserWarning):
    """What a Godot RL Agents game cannot tell its Python side (see :data:`LOSSES`), said once per game."""


_said: set[str] = set()


def _say_losses(name: str) -> None:
    if name in _said:
        return
    _said.add(name)
    warnings.warn(f"Godot RL Agents game {name}: " + "; ".join(LOSSES), GodotRLWarning, stacklevel=4)


def game_command(path: str | os.PathLike, godot: str | os.PathLike | Sequence[str] | None = None) -> list[str]:
    """The command that runs the game at ``path``: a Godot project folder (holding ``project.godot``)
    run by the Godot executable (see :func:`~dmrpc_gym.integrations.godot.launch.find_godot`) with
    ``--fixed-fps 60``, or an exported game (an executable file) with ``--headless --disable-render-loop``.
    ``FileNotFoundError`` naming what is wrong.

    >>> game_command("/no/such/game")
    Traceback (most recent call last):
    ...
    FileNotFoundError: Godot RL Agents game '/no/such/game' does not exist; expected a Godot project folder (holding project.godot) or an exported game's executable
    """
    where = Path(path).expanduser()
    if where.is_dir():
        if not (where / "project.godot").is_file():
            raise FileNotFoundError(f"Godot RL Agents game folder {str(where)!r} holds no project.godot; "
                                    "expected a Godot project folder or an exported game's executable")
        # --fixed-fps: each physics frame lasts 1/60 s of game time but runs as fast as the CPU allows.
        return [*find_godot(godot), "--path", str(where.resolve()), "--fixed-fps", "60"]
    if where.is_file():
        if not os.access(where, os.X_OK):
            raise FileNotFoundError(f"Godot RL Agents game {str(where)!r} is not executable (chmod +x it)")
        # As godot-rl starts one: no window (Godot 4's --headless; Godot 3 passes it on to the game), no drawing.
        return [str(where.resolve()), "--headless", "--disable-render-loop"]
    raise FileNotFoundError(f"Godot RL Agents game {str(path)!r} does not exist; expected a Godot project "
                            "folder (holding project.godot) or an exported game's executable")


def _per_agent(value: Any, n: int, what: str) -> list:
    """A space given once for all agents (a dict) or per agent (a list of n)."""
    if isinstance(value, dict):
        return [value] * n
    if isinstance(value, list) and len(value) == n:
        return value
    raise GodotRLProtocolError(f"env_info's {what} must be one object (shared by all agents) or a list of "
                               f"{n} (one per agent); got {str(value)[:200]!r}")


class GodotRLGame:
    """A Godot RL Agents game, started and connected; the protocol's messages as methods.

    Args:
        path: a Godot project folder (run by ``godot``, default ``godot3-server``) or an
            exported game's executable.
        seed: the game's seed (``--env_seed``; None: the game's default).
        action_repeat: physics frames per action (``--action_repeat``; None: the game's default, 8).
        speedup: physics speed (``--speedup``; None: the game's default).
        godot: the Godot executable for a project folder (a path, name or command list).
        host: where to listen (``"0.0.0.0"``: every interface, for a game in another container).
        connect_timeout: seconds the game has to start and connect.
        step_timeout: seconds each answer may take (None: no limit).
        extra_args: more command-line arguments for the game.

    Attributes: ``agents`` (the agents' names, ``f"{policy}_{i}"`` or ``agent_{i}``),
    ``observation_spaces`` / ``action_spaces`` (a ``Dict`` each, by name), ``port``, ``process``.
    Failing to start is an error naming the path, the port and the game's last output lines,
    the process ended; a game that dies or stops answering later fails that call (and every
    later one) with its output, never a hang. :meth:`close` always returns.
    """

    def __init__(self, path: str | os.PathLike, *, seed: int | None = None, action_repeat: int | None = None,
                 speedup: float | None = None, godot: str | os.PathLike | Sequence[str] | None = None,
                 host: str = "127.0.0.1", connect_timeout: float = 60.0, step_timeout: float | None = 60.0,
                 extra_args: Sequence[str] = ()) -> None:
        for name, value in (("action_repeat", action_repeat), ("speedup", speedup)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ValueError(f"{name} must be a positive number or None; got {value!r}")
        if action_repeat is not None and int(action_repeat) != action_repeat:
            raise ValueError(f"action_repeat must be a positive int (physics frames per action); got {action_repeat!r}")
        if seed is not None and (isinstance(seed, bool) or int(seed) != seed or seed < 0):
            raise ValueError(f"seed must be a non-negative int or None; got {seed!r}")
        self.path = str(path)
        self.command = game_command(path, godot)
        self.seed = None if seed is None else int(seed)
        self.action_repeat, self.speedup = action_repeat, speedup
        self.host, self.connect_timeout, self.step_timeout = host, connect_timeout, step_timeout
        self.extra_args = [str(arg) for arg in extra_args]
        self._game: GameProcess | None = None
        self._link: Link | None = None
        self._listener: Listener | None = None
        self._broken: str | None = None
        self.port = 0
        self.fresh = False         # no message but the opening ones since the game started
        stop_at_exit(self)
        self._start()

    # -- starting ---------------------------------------------------------------------------------

    def _start(self) -> None:
        try:
            self._listener = Listener(self.host)
            self.port = self._listener.port
            args = [*self.command, f"--port={self.port}"]
            if self.seed is not None:
                args.append(f"--env_seed={self.seed}")
            if self.action_repeat is not None:
                args.append(f"--action_repeat={int(self.action_repeat)}")
            if self.speedup is not None:
                args.append(f"--speedup={self.speedup:g}")
            self._game = GameProcess(args + self.extra_args)
            try:
                self._link = self._listener.accept(self.connect_timeout, alive=lambda: self._game.alive)
            except (ConnectionError, TimeoutError) as exc:
                said = self._game.describe()
                self._game.stop(grace=0.0)
                raise type(exc)(f"Godot RL Agents game {self.path!r} (port {self.port}): {exc}; {said}\n"
                                "(the game's process was ended)") from None
            self._broken = None
            self._link.send(HANDSHAKE)
            self._link.send({"type": "env_info"})
            self._read_env_info(self._receive("env_info", ("n_agents", "observation_space", "action_space")))
            self.fresh = True
            _say_losses(self.path)
        except BaseException:
            self.close()
            raise

    def _read_env_info(self, info: dict) -> None:
        n = info["n_agents"]
        if isinstance(n, bool) or not isinstance(n, (int, float)) or n != int(n) or n < 1:
            raise GodotRLProtocolError(f"env_info's n_agents {n!r} is not a positive int")
        n = int(n)
        policies = info.get("agent_policy_names")
        if policies is not None and (not isinstance(policies, list) or len(policies) != n):
            raise GodotRLProtocolError(f"env_info's agent_policy_names {policies!r} is not a list of {n} names")
        names = [f"{policies[i]}_{i}" if policies is not None else f"agent_{i}" for i in range(n)]
        observations = _per_agent(info["observation_space"], n, "observation_space")
        actions = _per_agent(info["action_space"], n, "action_space")
        obs_spaces = {name: observation_space(o, f"env_info's observation_space of {name}")
                      for name, o in zip(names, observations)}
        act_spaces = {name: action_space(a, f"env_info's action_space of {name}") for name, a in zip(names, actions)}
        if getattr(self, "agents", None) is not None and (
                names != self.agents or obs_spaces != self.observation_spaces or act_spaces != self.action_spaces):
            raise GodotRLProtocolError(f"the game's agents or spaces changed when it was started again "
                                       f"(now {names}; were {self.agents})")
        self.agents: list[str] = names
        self.observation_spaces: dict[str, spaces.Dict] = obs_spaces
        self.action_spaces: dict[str, spaces.Dict] = act_spaces

    def restart(self, seed: int | None) -> None:
        """Start the game again with ``seed`` (a Godot RL Agents game reads its seed only when it starts)."""
        self._stop()
        self.seed = seed
        self._start()

    # -- the conversation ---------------------------------------------------------------------------

    @property
    def process(self) -> Any:
        """The running game's ``subprocess.Popen`` (None before it starts)."""
        return None if self._game is None else self._game.process

    def _fail(self, exc: Exception, doing: str) -> Exception:
        """End the game after a failed exchange; the error to raise, with the game's output."""
        error, self._broken = exchange_failure(self._game, exc, doing,
                                               f"Godot RL Agents game {self.path!r} (port {self.port}), ", self._stop)
        return error

    def _receive(self, kind: str, keys: Sequence[str]) -> dict:
        if self._link is None:
            raise ConnectionError(self._broken or f"Godot RL Agents game {self.path!r} is closed")
        try:
            message = self._link.receive(self.step_timeout)
            if message.get("type") != kind:
                raise GodotRLProtocolError(f"expected a {kind!r} message, got {str(message)[:200]!r}")
            missing = [key for key in keys if key not in message]
            if missing:
                raise GodotRLProtocolError(f"the game's {kind!r} message lacks {', '.join(map(repr, missing))}")
            return message
        except (ConnectionError, TimeoutError, GodotRLProtocolError) as exc:
            raise self._fail(exc, kind) from None

    def send(self, message: dict) -> None:
        """Send one message (the vector env sends to every game before it reads any answer)."""
        if self._link is None:
            raise ConnectionError(self._broken or f"Godot RL Agents game {self.path!r} is closed")
        self.fresh = False
        try:
            self._link.send(message)
        except ConnectionError as exc:
            raise self._fail(exc, message.get("type", "send")) from None

    def _per_agent_list(self, message: dict, key: str, kind: str) -> list:
        value = message[key]
        if not isinstance(value, list) or len(value) != len(self.agents):
            raise self._fail(GodotRLProtocolError(
                f"the game's {key!r} is not a list of {len(self.agents)} (one per agent): {str(value)[:200]!r}"), kind)
        return value

    def _observations(self, message: dict, kind: str) -> dict[str, dict]:
        values = self._per_agent_list(message, "obs", kind)
        try:
            return {name: decode_observation(self.observation_spaces[name], value, f"agent {name!r}")
                    for name, value in zip(self.agents, values)}
        except GodotRLProtocolError as exc:
            raise self._fail(exc, kind) from None

    def reset_answer(self) -> dict[str, dict]:
        """Every agent's first observation, from the game's answer to ``reset``."""
        return self._observations(self._receive("reset", ("obs",)), "reset")

    def reset(self) -> dict[str, dict]:
        """The protocol's ``reset``: every agent's first observation."""
        self.send({"type": "reset"})
        return self.reset_answer()

    def action_message(self, actions: dict[str, Any]) -> dict:
        """The ``action`` message for every agent's action (by name; ``ValueError`` naming a bad one)."""
        missing = [name for name in self.agents if name not in actions]
        if missing:
            raise ValueError(f"no action for agent(s) {', '.join(missing)} (agents: {', '.join(self.agents)})")
        return {"type": "action", "action": [encode_action(self.action_spaces[name], actions[name], f"agent {name!r}")
                                             for name in self.agents]}

    def step_answer(self) -> tuple[dict, dict, dict, dict]:
        """``(observations, rewards, dones, infos)`` by agent, from the game's ``step`` message."""
        message = self._receive("step", ("obs", "reward", "done"))
        observations = self._observations(message, "step")
        rewards, dones = self._per_agent_list(message, "reward", "step"), self._per_agent_list(message, "done", "step")
        infos = self._per_agent_list(message, "info", "step") if "info" in message else [{}] * len(self.agents)
        for name, reward, done, info in zip(self.agents, rewards, dones, infos):
            if isinstance(reward, bool) or not isinstance(reward, (int, float)):
                raise self._fail(GodotRLProtocolError(f"agent {name!r}'s reward {reward!r} is not a number"), "step")
            if not isinstance(done, (bool, int)) or done not in (0, 1):
                raise self._fail(GodotRLProtocolError(f"agent {name!r}'s done {done!r} is not a boolean"), "step")
            if not isinstance(info, dict):
                raise self._fail(GodotRLProtocolError(f"agent {name!r}'s info {info!r} is not an object"), "step")
        return (observations, dict(zip(self.agents, map(float, rewards))), dict(zip(self.agents, map(bool, dones))),
                {name: dict(info) for name, info in zip(self.agents, infos)})

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict]:
        """Send every agent's action; ``(observations, rewards, dones, infos)`` after ``action_repeat`` frames."""
        self.send(self.action_message(actions))
        return self.step_answer()

    def call(self, method: str) -> list:
        """The protocol's ``call``: ``method`` called on every agent in the game, their returns as a list."""
        if not isinstance(method, str) or not method:
            raise ValueError(f"method must be a non-empty string; got {method!r}")
        self.send({"type": "call", "method": method})
        returns = self._receive("call", ("returns",))["returns"]
        if not isinstance(returns, list):
            raise self._fail(GodotRLProtocolError(f"the game's call returns {returns!r} are not a list"), "call")
        return returns

    # -- ending -----------------------------------------------------------------------------------

    def _stop(self, grace: float = 0.0) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.close()
        if self._game is not None:
            self._game.stop(grace=grace)
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def close(self) -> None:
        """Send ``close`` and make sure the game has ended; idempotent, always returns."""
        if self._link is not None and self._game is not None and self._game.alive:
            try:
                self._link.send({"type": "close"})
            except Exception:  # noqa: BLE001 - a gone game is what close wants anyway
                pass
            self._stop(grace=2.0)
        self._stop()
        self._broken = self._broken or f"Godot RL Agents game {self.path!r} is closed"

    def close_at_exit(self) -> None:
        """Called at interpreter exit for a game still running then."""
        self._stop()

    def __del__(self) -> None:
        try:
            self._stop()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass
