"""The machinery of the differential fidelity suite (tests/fidelity/test_fidelity.py, issue 29 item 5).

A served env must be the local env. Each :class:`Case` names an env as a user serves it
(``dmrpc-gym serve TARGET``) and as a user builds it locally, with the same arguments; a
*player* drives either side through one API family (gymnasium, PettingZoo parallel, PettingZoo
AEC, dm_env) and records what it returns; :func:`differences` compares two records exactly.

- :func:`script` runs the local env: it draws the actions from the local action space, seeded,
  and decides when a new episode starts; it returns the operations it did (:class:`Run`).
- :func:`replay` does the same operations on the served env, whatever that env answers, so that
  the first differing field is what a comparison shows.
- :class:`Servers` keeps one ``dmrpc-gym serve`` subprocess per case (the next case's started
  in the background while this one's tests run), all on port 0.
"""
from __future__ import annotations

import collections
import concurrent.futures
import copy
import dataclasses
import importlib
import os
import threading
from collections.abc import Mapping
from typing import Any, Callable, Iterable

import gymnasium as gym
import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")                  # headless MuJoCo / dm_control frames
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")   # pygame's banner is no server output
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

from processes import ServedProcess  # noqa: E402  (tests/ is on sys.path: pytest's rootdir import mode)

#: ``reset(seed=...)`` of gymnasium and PettingZoo envs; the dm_control task RNG (``random``).
SEED, RANDOM = 5, 7
#: Seeds the action spaces (or, for dm_env specs, the generator) the actions are drawn from.
ACTION_SEED = 11
#: The checks, in the order they run for one env.
CHECKS = ("spaces", "steps", "frames", "second_world")


@dataclasses.dataclass(frozen=True)
class Case:
    """One env of the suite.

    ``kind`` is the API both sides are read through: ``gym``, ``parallel`` (PettingZoo),
    ``aec`` (PettingZoo turn-based) or ``dm_env``. ``settings`` are the world settings and the
    local env's arguments at once. A run stops after ``episodes`` episode ends or ``max_steps``
    steps; ``reseed`` seeds every reset (``SEED + episode``), for an env whose unseeded reset is
    random. ``xfail`` maps a check (or ``"*"``) to why the env cannot pass it.
    """
    family: str
    name: str
    target: str
    kind: str
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    episodes: int = 2
    max_steps: int = 60
    renders: bool = True
    frame_ops: int = 3
    reseed: bool = False
    xfail: Mapping[str, str] = dataclasses.field(default_factory=dict)
    note: str = ""

    @property
    def id(self) -> str:
        return f"{self.family}:{self.name}"

    def checks(self) -> tuple[str, ...]:
        return tuple(c for c in CHECKS if c != "frames" or self.renders)

    def why_not(self, check: str) -> str | None:
        return self.xfail.get(check, self.xfail.get("*"))


# -- players: one API family's reset / step / render, recorded ----------------------------------

class GymPlayer:
    """gymnasium: ``reset(seed=...)``, ``step(action)``, actions from the seeded action space."""

    @staticmethod
    def reset(env: Any, seed: int | None) -> dict:
        obs, info = env.reset(seed=seed)
        return {"obs": obs, "info": info}

    @staticmethod
    def step(env: Any, action: Any) -> tuple[dict, bool]:
        obs, reward, terminated, truncated, info = env.step(action)
        record = {"obs": obs, "reward": reward, "terminated": terminated, "truncated": truncated, "info": info}
        return record, bool(terminated or truncated)

    @staticmethod
    def sampler(env: Any) -> Callable[[Any], Any]:
        space = copy.deepcopy(env.action_space)
        space.seed(ACTION_SEED)
        return lambda _env: space.sample()

    @staticmethod
    def render(env: Any) -> Any:
        return env.render()


class ParallelPlayer:
    """PettingZoo parallel: every live agent acts each step; an episode ends when none is left."""

    @staticmethod
    def reset(env: Any, seed: int | None) -> dict:
        obs, infos = env.reset(seed=seed)
        return {"obs": obs, "infos": infos, "agents": list(env.agents)}

    @staticmethod
    def step(env: Any, actions: Any) -> tuple[dict, bool]:
        obs, rewards, terminations, truncations, infos = env.step(actions)
        record = {"obs": obs, "rewards": rewards, "terminations": terminations,
                  "truncations": truncations, "infos": infos, "agents": list(env.agents)}
        return record, not env.agents

    @staticmethod
    def sampler(env: Any) -> Callable[[Any], Any]:
        spaces = {}
        for i, agent in enumerate(env.possible_agents):
            spaces[agent] = copy.deepcopy(env.action_space(agent))
            spaces[agent].seed(ACTION_SEED + i)
        return lambda live: {agent: spaces[agent].sample() for agent in live.agents}

    @staticmethod
    def render(env: Any) -> Any:
        return env.render()


class AecPlayer:
    """PettingZoo AEC (turn-based): one ``step`` is ``last()`` then the selected agent's action
    (drawn under its ``action_mask``; ``None`` once it is done)."""

    @staticmethod
    def reset(env: Any, seed: int | None) -> dict:
        env.reset(seed=seed)
        return AecPlayer._seen(env)

    @staticmethod
    def _seen(env: Any) -> dict:
        if not env.agents:
            return {"agents": []}
        obs, reward, terminated, truncated, info = env.last()
        return {"agent": env.agent_selection, "obs": obs, "reward": reward, "terminated": terminated,
                "truncated": truncated, "info": info, "agents": list(env.agents),
                "rewards": dict(env.rewards)}

    @staticmethod
    def step(env: Any, action: Any) -> tuple[dict, bool]:
        env.step(action)
        return AecPlayer._seen(env), not env.agents

    @staticmethod
    def sampler(env: Any) -> Callable[[Any], Any]:
        spaces = {}
        for i, agent in enumerate(env.possible_agents):
            spaces[agent] = copy.deepcopy(env.action_space(agent))
            spaces[agent].seed(ACTION_SEED + i)

        def sample(live: Any) -> Any:
            obs, _, terminated, truncated, _ = live.last()
            if terminated or truncated:
                return None
            mask = obs.get("action_mask") if isinstance(obs, Mapping) else None
            return spaces[live.agent_selection].sample(mask=None if mask is None else mask.astype(np.int8))
        return sample

    @staticmethod
    def render(env: Any) -> Any:
        return env.render()


class DmEnvPlayer:
    """dm_env: TimeSteps (step type, reward, discount, observation); actions drawn from the spec."""

    @staticmethod
    def reset(env: Any, seed: int | None) -> dict:
        return DmEnvPlayer._timestep(env.reset())

    @staticmethod
    def _timestep(ts: Any) -> dict:
        return {"step_type": ts.step_type, "reward": ts.reward, "discount": ts.discount,
                "observation": ts.observation}

    @staticmethod
    def step(env: Any, action: Any) -> tuple[dict, bool]:
        ts = env.step(action)
        return DmEnvPlayer._timestep(ts), ts.last()

    @staticmethod
    def sampler(env: Any) -> Callable[[Any], Any]:
        rng = np.random.default_rng(ACTION_SEED)
        spec = env.action_spec()
        return lambda _env: draw(spec, rng)

    @staticmethod
    def render(env: Any) -> Any:
        raise NotImplementedError("dm_env frames are read through DmFramesPlayer")


class DmFramesPlayer(DmEnvPlayer):
    """dm_control frames: the local env's ``physics.render`` (the size and camera the server
    renders with), the served env's through its gymnasium view (``render_mode="rgb_array"``)."""

    @staticmethod
    def reset(env: Any, seed: int | None) -> dict:
        if isinstance(env, gym.Env):
            env.reset()
        else:
            env.reset()
        return {}

    @staticmethod
    def step(env: Any, action: Any) -> tuple[dict, bool]:
        if isinstance(env, gym.Env):
            _, _, terminated, truncated, _ = env.step(action)
            return {}, terminated or truncated
        return {}, env.step(action).last()

    @staticmethod
    def render(env: Any) -> Any:
        if isinstance(env, gym.Env):
            return env.render()
        from dmrpc_gym.server.envs.dm_env_gym import RENDER_SIZE
        return env.physics.render(*RENDER_SIZE, camera_id=0)


PLAYERS = {"gym": GymPlayer, "parallel": ParallelPlayer, "aec": AecPlayer, "dm_env": DmEnvPlayer}


def draw(spec: Any, rng: np.random.Generator) -> Any:
    """A random action within a dm_env spec (or nest of specs), of its dtype and shape."""
    from dm_env import specs
    if isinstance(spec, Mapping):
        return {k: draw(v, rng) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(draw(v, rng) for v in spec)
    if isinstance(spec, specs.DiscreteArray):
        return np.asarray(rng.integers(spec.num_values, size=spec.shape), spec.dtype)[()]
    dtype = np.dtype(spec.dtype)
    if isinstance(spec, specs.BoundedArray):
        low, high = np.broadcast_to(spec.minimum, spec.shape), np.broadcast_to(spec.maximum, spec.shape)
        if dtype.kind == "f":
            return rng.uniform(low, high, spec.shape).astype(dtype)
        return rng.integers(low, high, spec.shape, endpoint=True).astype(dtype)
    return rng.standard_normal(spec.shape).astype(dtype) if dtype.kind == "f" else np.zeros(spec.shape, dtype)


# -- running -----------------------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    """What one side did: the operations (``("reset", seed)`` / ``("step", action)``), the
    records they gave (an ``{"error": ...}`` record ends a run that raised), the episode ends."""
    ops: list[tuple[str, Any]]
    records: list[dict]
    ends: int = 0


def script(player: Any, env: Any, case: Case, render: bool = False, ops_limit: int | None = None) -> Run:
    """Run the local env: seeded reset, seeded actions, a new episode after each end, until
    ``case.episodes`` ends or ``case.max_steps`` steps (or ``ops_limit`` operations)."""
    sample = player.sampler(env)
    run = Run([("reset", SEED)], [player.reset(env, SEED)])
    steps = 0
    while steps < case.max_steps and (ops_limit is None or len(run.ops) < ops_limit):
        if render:
            run.records[-1]["frame"] = player.render(env)
        action = sample(env)
        record, ended = player.step(env, action)
        run.ops.append(("step", action))
        run.records.append(record)
        steps += 1
        if ended:
            run.ends += 1
            if run.ends == case.episodes or (ops_limit is not None and len(run.ops) >= ops_limit):
                break
            seed = SEED + run.ends if case.reseed else None
            run.ops.append(("reset", seed))
            run.records.append(player.reset(env, seed))
    if render:
        run.records[-1]["frame"] = player.render(env)
    return run


def replay(player: Any, env: Any, ops: Iterable[tuple[str, Any]], render: bool = False) -> list[dict]:
    """Do ``ops`` on the served env, whatever it answers; an error ends the records."""
    records: list[dict] = []
    for op, arg in ops:
        try:
            record = player.reset(env, arg) if op == "reset" else player.step(env, arg)[0]
            if render:
                record["frame"] = player.render(env)
        except Exception as exc:  # noqa: BLE001 - the served env's failure is the finding
            records.append({"error": f"{type(exc).__name__}: {exc}"})
            break
        records.append(record)
    return records


# -- building ----------------------------------------------------------------------------------

def local_env(case: Case, render_mode: str | None = None) -> Any:
    """The env as a user builds it, with the case's settings as its arguments."""
    settings = dict(case.settings)
    if case.kind == "gym":
        return gym.make(case.name, render_mode=render_mode, **settings)
    if case.kind in ("parallel", "aec"):
        module_name, _, attribute = case.target.partition(":")
        module = importlib.import_module(module_name)
        make = module.parallel_env if case.kind == "parallel" else getattr(module, attribute or "env")
        return make(render_mode=render_mode, **settings)
    if case.family == "dm_control":
        from dm_control import suite
        domain, task = case.name.split("-", 1)
        return suite.load(domain, task, task_kwargs=settings)
    if case.family == "bsuite":
        import bsuite
        from bsuite import sweep
        return bsuite.load(case.name.split("/")[0], {**sweep.SETTINGS[case.name], **settings})
    raise ValueError(f"no local builder for {case}")


def remote_env(case: Case, address: str, render_mode: str | None = None) -> Any:
    """The env read back through the public API from the server at ``address``."""
    import dmrpc_gym
    settings = dict(case.settings)
    if case.kind == "gym":
        return gym.make("dmrpc/Remote-v0", address=address, world_settings=settings, render_mode=render_mode)
    if case.kind == "parallel":
        return dmrpc_gym.parallel_env(address=address, world_settings=settings, render_mode=render_mode)
    if case.kind == "aec":
        return dmrpc_gym.aec_env(address=address, world_settings=settings, render_mode=render_mode)
    if render_mode is not None:     # dm_env has no render(): frames through the gymnasium view
        return gym.make("dmrpc/Remote-v0", address=address, world_settings=settings, render_mode=render_mode)
    return dmrpc_gym.connect_dm_env(address, settings)


def close(*envs: Any) -> None:
    for env in envs:
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


# -- servers -----------------------------------------------------------------------------------

class Served:
    """A ``dmrpc-gym serve TARGET --port 0`` subprocess whose output is read on (so that a
    talkative server never blocks on a full pipe) and kept for failure messages."""

    def __init__(self, target: str):
        self.process = ServedProcess(0, target)
        self.address = self.process.address
        self.output: collections.deque[str] = collections.deque(maxlen=200)
        popen = self.process.processes[-1]
        self._reader = threading.Thread(target=self._read, args=(popen,), daemon=True)
        self._reader.start()

    def _read(self, popen: Any) -> None:
        try:
            for line in popen.stdout:
                self.output.append(line.rstrip())
        except (ValueError, OSError):
            pass

    def alive(self) -> bool:
        return self.process.processes[-1].poll() is None

    def tail(self, lines: int = 15) -> str:
        return "\n".join(list(self.output)[-lines:])

    def close(self) -> None:
        for popen in self.process.processes:
            if popen.poll() is None:
                popen.kill()
            popen.wait(10)
        self._reader.join(5)
        self.process.close()


class Servers:
    """One server per case, in the order the tests use them: the next case's server starts in
    the background while this one's tests run, and a case's server ends when a later case's
    starts being used (at most two at a time)."""

    def __init__(self, order: list[Case]):
        self.order = list({case.id: case for case in order}.values())
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fidelity-serve")
        self._started: dict[str, concurrent.futures.Future] = {}
        self._current: str | None = None

    def _start(self, case: Case) -> concurrent.futures.Future:
        if case.id not in self._started:
            self._started[case.id] = self._pool.submit(Served, case.target)
        return self._started[case.id]

    def get(self, case: Case) -> Served:
        future = self._start(case)
        if case.id != self._current:
            for key in [k for k in self._started if k not in (case.id,)]:
                if self._position(key) < self._position(case.id):
                    self._stop(key)
            self._current = case.id
            index = self._position(case.id)
            if index + 1 < len(self.order):
                self._start(self.order[index + 1])
        return future.result()

    def _position(self, key: str) -> int:
        return next((i for i, c in enumerate(self.order) if c.id == key), -1)

    def _stop(self, key: str) -> None:
        future = self._started.pop(key)
        try:
            future.result().close()
        except Exception:  # noqa: BLE001 - a server that never started has nothing to stop
            pass

    def close(self) -> None:
        for key in list(self._started):
            self._stop(key)
        self._pool.shutdown(wait=True)
