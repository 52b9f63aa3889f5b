"""Vectorized stepping: N dm_env_rpc connections with every step in flight at once.

``DmRpcVectorEnv`` is a ``gymnasium.vector.VectorEnv`` and ``DmRpcSB3VecEnv`` a
Stable-Baselines3 ``VecEnv``; both stand on one :class:`Batch` of
:class:`~dmrpc_gym.client.env.DmRpcEnv` sub-envs (one connection, one world and one
agent each). A batched step checks every action first, then sends every
sub-env's request before it reads any answer, so N sub-envs cost about one
round trip of latency and the server works on all of them at once.

dm_env_rpc starts the next sequence on the step after a finished one and
ignores that step's actions: that is gymnasium's ``NEXT_STEP`` autoreset, so
``DmRpcVectorEnv`` declares it. The SB3 ``VecEnv`` resets within the step, as
SB3 expects: every finished sub-env gets its restarting step right away (all
in flight at once) and its last observation goes to
``info["terminal_observation"]``.

>>> import gymnasium as gym, dmrpc_gym
>>> envs = gym.make_vec("dmrpc/Catch-v0", num_envs=2, vectorization_mode="vector_entry_point")
>>> obs, infos = envs.reset(seed=3)
>>> obs.shape, envs.action_space
((2, 10, 10), MultiDiscrete([3 3], start=[-1 -1]))
>>> obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 1], np.int8))
>>> envs.close()

The SB3 flavour (``sb3_compat=True`` gives the spaces SB3 can train on):

>>> from dmrpc_gym.app.embedded import embedded_server
>>> from dmrpc_gym.client.vector import DmRpcSB3VecEnv
>>> venv = DmRpcSB3VecEnv(2, embedded_server("catch").address, seed_setting="seed", sb3_compat=True)
>>> venv.seed(5)
[5, 6]
>>> venv.reset().shape
(2, 100)
>>> obs, rewards, dones, infos = venv.step(np.array([0, 2]))
>>> venv.close()
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Iterable, Mapping, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from dmrpc_gym.client.env import DmRpcEnv
from dmrpc_gym.protocol.errors import DmRpcError

# DmRpcSB3VecEnv is reached by attribute (built on first use), so `import *` never pulls in SB3.
__all__ = ["Batch", "Restart", "RESTART", "DmRpcVectorEnv", "batch_observations", "merge_infos"]

#: One sub-env's ``(observation, reward, terminated, truncated, info)``.
StepResult = tuple[Any, float, bool, bool, dict]


_ARRAY_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def batch_observations(space: gym.Space, items: Sequence[Any]) -> Any:
    """Stack single-env observations of ``space`` into fresh batched arrays (Dict/Tuple too).

    The same value as gymnasium's ``concatenate`` into ``create_empty_array``, with
    a fast path for the array spaces.

    >>> batch_observations(gym.spaces.Dict({"x": gym.spaces.Discrete(3)}), [{"x": 1}, {"x": 2}])
    {'x': array([1, 2])}
    """
    if isinstance(space, _ARRAY_SPACES):
        return np.array(items, dtype=space.dtype)
    if isinstance(space, gym.spaces.Dict):
        return {key: batch_observations(sub, [item[key] for item in items]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(batch_observations(sub, [item[j] for item in items]) for j, sub in enumerate(space.spaces))
    return concatenate(space, items, create_empty_array(space, n=len(items), fn=np.empty))


def merge_infos(infos: Sequence[tuple[int, dict]], num_envs: int) -> dict[str, Any]:
    """Sub-env infos (``(index, info)`` pairs) merged as gymnasium's ``VectorEnv._add_info`` does.

    Every key gets an array over the sub-envs (numbers: their type; arrays:
    stacked; dicts: merged recursively; anything else: an object array) and a
    ``_key`` bool mask of the sub-envs that had it.

    >>> merge_infos([(0, {"discount": 1.0}), (2, {"discount": 0.5})], 3)
    {'discount': array([1. , 0. , 0.5]), '_discount': array([ True, False,  True])}
    """
    out: dict[str, Any] = {}
    keys: dict[str, None] = {}
    for _, info in infos:
        keys.update(dict.fromkeys(info))
    every = len(infos) == num_envs     # then the indices are 0..n-1 in order (as the vector envs pass them)
    for key in keys:
        present = [(i, info[key]) for i, info in infos if key in info]
        first = present[0][1]
        full = every and len(present) == num_envs
        if key == "final_obs" or not (isinstance(first, (dict, np.ndarray, np.number))
                                      or type(first) in (int, float, bool)):
            array = np.empty(num_envs, dtype=object)
            for i, value in present:
                array[i] = value
        elif isinstance(first, dict):
            array = merge_infos(present, num_envs)
        elif full and not isinstance(first, np.ndarray):
            array = np.array([value for _, value in present], dtype=type(first))
        else:
            shape = first.shape if isinstance(first, np.ndarray) else ()
            array = np.zeros((num_envs, *shape), dtype=first.dtype if shape or
                             isinstance(first, np.ndarray) else type(first))
            for i, value in present:
                array[i] = value
        if full:
            mask = np.ones(num_envs, dtype=np.bool_)
        else:
            mask = np.zeros(num_envs, dtype=np.bool_)
            mask[[i for i, _ in present]] = True
        out[key], out[f"_{key}"] = array, mask
    return out


def _with_index(err: Exception, index: int) -> Exception:
    """The same kind of error, saying which sub-env it came from."""
    if isinstance(err, DmRpcError):
        request = f"{err.request} of sub-env {index}" if err.request else f"sub-env {index}"
        return DmRpcError(err.code, err.message, err.details, request=request)
    if isinstance(err, (ConnectionError, TimeoutError)):
        return type(err)(f"sub-env {index}: {err}")
    return err


class Batch:
    """N ``DmRpcEnv`` sub-envs stepped together: the machinery both vector envs share.

    Args:
        num_envs: how many sub-envs (default: one per address).
        address: the server every sub-env connects to, or
        addresses: a list of servers, used in turn (sub-env ``i`` uses ``addresses[i % len]``).
        max_episode_steps: truncate an episode on the client after this many steps.
        **env_kwargs: :class:`~dmrpc_gym.client.env.DmRpcEnv` arguments, the same for every sub-env.

    Requests are pipelined: :meth:`submit` sends every sub-env's request, and
    :meth:`receive` reads every answer. Answers left unread by an error or an
    interrupt are read (and dropped) before the next submit, so every
    connection stays in step.

    >>> from dmrpc_gym.app.embedded import embedded_server
    >>> batch = Batch(2, embedded_server("catch").address)
    >>> [obs.shape for obs, info in batch.reset([0, 1], seeds=[None, None])]
    [(10, 10), (10, 10)]
    >>> batch.close()
    """

    def __init__(self, num_envs: int | None = None, address: str | None = None, *,
                 addresses: Sequence[str] | None = None, max_episode_steps: int | None = None,
                 **env_kwargs: Any):
        if address is not None and addresses is not None:
            raise ValueError("give address= or addresses=, not both")
        if addresses is not None:
            targets = [str(a) for a in addresses]
            if not targets:
                raise ValueError("addresses= is empty; expected at least one 'host:port'")
        else:
            targets = [address]
        if num_envs is None:
            num_envs = len(targets)
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, not {num_envs!r}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be None or a positive int, not {max_episode_steps!r}")
        self.num_envs = int(num_envs)
        self.max_episode_steps = max_episode_steps
        self.env_kwargs = dict(env_kwargs)
        self.envs: list[DmRpcEnv] = []
        self.closed = False
        # Per sub-env: the kinds ("reset"/"step") of submitted requests not yet read.
        self._owed: list[deque] = [deque() for _ in range(self.num_envs)]
        self._elapsed = [0] * self.num_envs
        self._unsettled = False     # answers may be left unread: read them before the next exchange
        try:
            for i in range(self.num_envs):
                self.envs.append(DmRpcEnv(targets[i % len(targets)], **env_kwargs))
        except BaseException:
            self.close()
            raise
        first = self.envs[0]
        self.observation_space = first.observation_space
        self.action_space = first.action_space
        for i, env in enumerate(self.envs[1:], 1):
            for kind, ours, theirs in (("observation", env.observation_space, self.observation_space),
                                       ("action", env.action_space, self.action_space)):
                if ours != theirs:
                    self.close()
                    raise RuntimeError(f"sub-env {i} ({env.connection.address}) has {kind} space {ours}; "
                                       f"sub-env 0 ({first.connection.address}) has {theirs}")

    # -- pipelined exchanges -------------------------------------------------------
    def submit(self, jobs: Mapping[int, Any]) -> dict[int, bool]:
        """Send one step per sub-env in ``jobs`` (index -> action, or a :class:`Restart`).

        Every action is checked before anything is sent (a ``ValueError`` names
        the sub-env). A ``Restart`` starts a new sequence: a ResetRequest when the
        sub-env is running or has reset settings, then a step with no actions.
        Returns the plan :meth:`receive` needs (index -> restarted?).
        """
        self._check_open()
        if self._unsettled:
            self._settle()
        self._unsettled = True
        requests = {}
        for i, action in jobs.items():
            agent = self.envs[i].agent
            try:
                requests[i] = agent.step_request(None if isinstance(action, Restart) else action)
            except ValueError as err:
                raise ValueError(f"sub-env {i}: {err}") from None
        for i, request in requests.items():
            env, owed = self.envs[i], self._owed[i]
            try:
                job = jobs[i]
                if isinstance(job, Restart) and env.agent.submit_reset(
                        env.reset_settings if job.settings is None else job.settings):
                    owed.append("reset")
                env.connection.submit(request)
            except Exception as err:
                raise _with_index(err, i) from None
            owed.append("step")
        return {i: isinstance(jobs[i], Restart) for i in requests}

    def receive(self, plan: Mapping[int, bool]) -> dict[int, StepResult]:
        """Read the answers to :meth:`submit`'s requests: index -> 5-tuple.

        A restarted sub-env answers with its first observation, reward 0.0 and
        both flags False. Every answer is read even when one fails; then the
        first error is raised (naming its sub-env).
        """
        results: dict[int, StepResult] = {}
        error = None
        for i, restarted in plan.items():
            try:
                result = self._read(i)
            except Exception as err:
                error = error or _with_index(err, i)
                continue
            if restarted:
                self._elapsed[i] = 0
                obs, _, _, _, info = result
                result = (obs, 0.0, False, False, info)
            else:
                self._elapsed[i] += 1
                if self.max_episode_steps is not None and self._elapsed[i] >= self.max_episode_steps \
                        and not result[2]:
                    result = result[:3] + (True,) + result[4:]
            results[i] = result
        if error is not None:
            raise error
        self._unsettled = any(self._owed)
        return results

    def step(self, jobs: Mapping[int, Any]) -> dict[int, StepResult]:
        """:meth:`submit` then :meth:`receive`."""
        return self.receive(self.submit(jobs))

    def reset(self, indices: Iterable[int], seeds: Sequence[int | None],
              options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None
              ) -> list[tuple[Any, dict]]:
        """Reset the sub-envs ``indices`` (``seeds[i]`` each), pipelined: ``[(obs, info)]``.

        Same semantics as ``DmRpcEnv.reset``: ``options["settings"]`` adds reset
        settings, ``options["world_settings"]`` first resets the world, and the
        seed travels as the ``seed_setting`` reset setting when one is named.
        ``options`` is one mapping for all, or a sequence of one per sub-env.
        """
        self._check_open()
        if self._unsettled:
            self._settle()
        indices = list(indices)
        jobs = {}
        for i in indices:
            env = self.envs[i]
            opts = (options[i] if isinstance(options, (list, tuple)) else options) or {}
            try:
                settings = env.prepare_reset(seeds[i], opts)
            except Exception as err:
                raise _with_index(err, i) from None
            jobs[i] = Restart(settings)
        results = self.step(jobs)
        return [(results[i][0], results[i][4]) for i in indices]

    def _read(self, i: int) -> StepResult:
        """Read sub-env ``i``'s owed answers; the last is its step."""
        agent, owed = self.envs[i].agent, self._owed[i]
        while owed:
            kind = owed.popleft()
            if kind == "reset":
                agent.receive_reset()
            elif not owed:
                return agent.receive_step()
            else:
                agent.receive_step()
        raise RuntimeError(f"sub-env {i} has no step in flight")

    def _settle(self) -> None:
        """Read and drop answers a failed or interrupted exchange left behind."""
        try:
            for i, owed in enumerate(self._owed):
                agent = self.envs[i].agent
                while owed:
                    kind = owed.popleft()
                    try:
                        if kind == "reset":
                            agent.receive_reset()
                        else:
                            agent.receive_step()
                    except DmRpcError:
                        pass
                    except Exception as err:
                        owed.clear()
                        raise _with_index(err, i) from None
        finally:
            self._unsettled = any(self._owed)

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this vector env is closed")

    # -- the rest ------------------------------------------------------------------
    def render(self) -> tuple:
        """Every sub-env's latest frame (``None`` without ``render_mode``)."""
        return tuple(env.render() for env in self.envs)

    def close(self) -> None:
        """Close every sub-env at once (each bounded in time). Idempotent; never hangs."""
        if self.closed:
            return
        self.closed = True
        envs = list(self.envs)
        # A hung server costs each sub-env a bounded wait; closing in parallel keeps it one
        # wait. At interpreter exit no thread can start (Thread.start would block): close in turn.
        if len(envs) <= 1 or not threading.main_thread().is_alive():
            for env in envs:
                env.close()
            return
        threads = [threading.Thread(target=env.close, name="dmrpc-close", daemon=True) for env in envs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10.0)


class Restart:
    """A :meth:`Batch.submit` job: start the sub-env's next sequence.

    ``settings`` are the ResetRequest settings (``None``: the sub-env's ``reset_settings``).

    >>> Restart({"seed": 3}).settings
    {'seed': 3}
    """

    __slots__ = ("settings",)

    def __init__(self, settings: Mapping[str, Any] | None = None):
        self.settings = settings

    def __repr__(self) -> str:
        return f"Restart({self.settings!r})"


#: Restart with the sub-env's own ``reset_settings`` (what autoreset does).
RESTART = Restart()


def _reset_mask(options: dict, num_envs: int) -> np.ndarray | None:
    """Pop and check gymnasium 1.x's ``options["reset_mask"]``."""
    if "reset_mask" not in options:
        return None
    mask = options.pop("reset_mask")
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        raise TypeError(f"options['reset_mask'] must be a numpy bool array, not {mask!r}")
    if mask.shape != (num_envs,):
        raise ValueError(f"options['reset_mask'] must have shape ({num_envs},), not {mask.shape}")
    if not mask.any():
        raise ValueError("options['reset_mask'] must have at least one True value")
    return mask


def _seeds(seed: int | Sequence[int | None] | None, num_envs: int) -> list[int | None]:
    """gymnasium's convention: ``None`` -> no seeds, ``s`` -> ``s, s+1, ...``, or one per sub-env."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, (int, np.integer)):
        return [int(seed) + i for i in range(num_envs)]
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"{len(seeds)} seeds given for {num_envs} sub-envs; expected one per sub-env")
    return seeds


class DmRpcVectorEnv(VectorEnv):
    """N dm_env_rpc connections as a gymnasium ``VectorEnv``, every step in flight at once.

    Args:
        num_envs: how many sub-envs (default: one per address).
        address: the server's ``"host:port"``; or
        addresses: several servers, used in turn.
        max_episode_steps: truncate episodes on the client after this many steps.
        **env_kwargs: :class:`~dmrpc_gym.client.env.DmRpcEnv` arguments (``world_settings``,
            ``join_settings``, ``reset_settings``, ``observations``, ``actions``, ``nested``,
            ``reward``, ``discount``, ``seed_setting``, ``render_mode``, ``render_observation``,
            ``connect_timeout``, ``step_timeout``, ``credentials``, ``metadata``, ``channel``).

    Each sub-env creates its own world and joins it. Autoreset is ``NEXT_STEP``:
    the step after a sub-env finished returns its next first observation with
    reward 0.0 and both flags False, and ignores its action. ``infos`` are
    merged the gymnasium way (``infos["discount"]`` with mask ``infos["_discount"]``).
    ``reset(seed=s)`` seeds sub-env ``i`` with ``s + i``; ``options["reset_mask"]``
    resets only some sub-envs.

    >>> from dmrpc_gym.app.embedded import embedded_server
    >>> envs = DmRpcVectorEnv(3, embedded_server("catch").address, seed_setting="seed")
    >>> obs, infos = envs.reset(seed=0)
    >>> obs.shape, sorted(infos)
    ((3, 10, 10), ['_discount', '_state', 'discount', 'state'])
    >>> envs.close()
    """

    metadata = {"render_modes": ["rgb_array"], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int | None = None, address: str | None = None, *,
                 addresses: Sequence[str] | None = None, max_episode_steps: int | None = None,
                 **env_kwargs: Any):
        self._batch = Batch(num_envs, address, addresses=addresses, max_episode_steps=max_episode_steps,
                            **env_kwargs)
        batch = self._batch
        self.num_envs = batch.num_envs
        self.envs = batch.envs
        self.metadata = {**type(self).metadata, "render_fps": self.envs[0].metadata.get("render_fps")}
        self.render_mode = env_kwargs.get("render_mode")
        self.single_observation_space = batch.observation_space
        self.single_action_space = batch.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._obs: list[Any] = [None] * self.num_envs
        self._autoreset = np.zeros(self.num_envs, dtype=np.bool_)

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every sub-env (or those in ``options["reset_mask"]``), all at once."""
        seeds = _seeds(seed, self.num_envs)
        options = dict(options or {})
        mask = _reset_mask(options, self.num_envs)
        if mask is not None and any(obs is None for obs, m in zip(self._obs, mask) if not m):
            raise RuntimeError("options['reset_mask'] leaves out sub-envs that were never reset; "
                               "call reset() without a mask first")
        super().reset(seed=int(seed) if isinstance(seed, (int, np.integer)) else None)
        indices = list(range(self.num_envs)) if mask is None else np.flatnonzero(mask).tolist()
        merged = []
        for i, (obs, info) in zip(indices, self._batch.reset(indices, seeds, options)):
            self._obs[i] = obs
            self._autoreset[i] = False
            merged.append((i, info))
        infos = merge_infos(merged, self.num_envs)
        return batch_observations(self.single_observation_space, self._obs), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env; a sub-env that finished last step starts its next episode instead."""
        if isinstance(actions, np.ndarray) and actions.ndim and isinstance(self.action_space, _ARRAY_SPACES):
            items = actions                     # one row per sub-env (what iterate() yields)
        else:
            items = list(iterate(self.action_space, actions))
        if len(items) != self.num_envs:
            raise ValueError(f"{len(items)} actions given for {self.num_envs} sub-envs")
        results = self._batch.step({i: RESTART if self._autoreset[i] else items[i]
                                    for i in range(self.num_envs)})
        ordered = [results[i] for i in range(self.num_envs)]
        self._obs = [r[0] for r in ordered]
        rewards = np.array([r[1] for r in ordered], dtype=np.float64)
        terminated = np.array([r[2] for r in ordered], dtype=np.bool_)
        truncated = np.array([r[3] for r in ordered], dtype=np.bool_)
        infos = merge_infos(list(enumerate(r[4] for r in ordered)), self.num_envs)
        self._autoreset = terminated | truncated
        return (batch_observations(self.single_observation_space, self._obs), rewards, terminated,
                truncated, infos)

    def render(self) -> tuple:
        """Every sub-env's latest frame (uint8 HxWx3 in ``rgb_array`` mode)."""
        return self._batch.render()

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """Call (or read, when not callable) ``name`` on every sub-env."""
        out = []
        for env in self.envs:
            value = getattr(env, name)
            out.append(value(*args, **kwargs) if callable(value) else value)
        return tuple(out)

    def get_attr(self, name: str) -> tuple:
        """``name`` of every sub-env."""
        return tuple(getattr(env, name) for env in self.envs)

    def set_attr(self, name: str, values: Any) -> None:
        """Set ``name`` on every sub-env: one value each (list/tuple) or the same for all."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"{len(values)} values given for {self.num_envs} sub-envs")
        for env, value in zip(self.envs, values):
            setattr(env, name, value)

    def close_extras(self, **kwargs: Any) -> None:
        self._batch.close()

    def __del__(self):
        try:
            self._batch.close()
        except Exception:
            pass


# -- Stable-Baselines3 ---------------------------------------------------------------

def _sb3_class():
    """Build ``DmRpcSB3VecEnv`` on first use, so SB3 stays an optional dependency."""
    from stable_baselines3.common.vec_env import VecEnv

    class DmRpcSB3VecEnv(VecEnv):
        """N dm_env_rpc connections as a Stable-Baselines3 ``VecEnv``, without subprocesses.

        Takes :class:`DmRpcVectorEnv`'s arguments, plus ``sb3_compat=True`` for
        the spaces SB3 can train on (the transforms of :class:`dmrpc_gym.integrations.sb3.flat_spaces.SB3Compat`). A
        finished sub-env restarts within the step (all restarts in flight at
        once); its last observation is ``info["terminal_observation"]`` and
        ``info["TimeLimit.truncated"]`` says whether it was cut short.
        ``step_async`` sends the actions, ``step_wait`` reads the answers.
        """

        def __init__(self, num_envs: int | None = None, address: str | None = None, *,
                     addresses: Sequence[str] | None = None, max_episode_steps: int | None = None,
                     sb3_compat: bool = False, **env_kwargs: Any):
            self._batch = Batch(num_envs, address, addresses=addresses,
                                max_episode_steps=max_episode_steps, **env_kwargs)
            self.envs = self._batch.envs
            n = self._batch.num_envs
            self._env_observation_space = self._batch.observation_space
            self._env_actions = batch_space(self._batch.action_space, n)
            obs_space, act_space = self._batch.observation_space, self._batch.action_space
            self._to_sb3 = self._to_env = None
            if sb3_compat:
                from dmrpc_gym.integrations.sb3.flat_spaces import sb3_action_transform, sb3_observation_transform
                obs_space, self._to_sb3 = sb3_observation_transform(obs_space)
                act_space, self._to_env = sb3_action_transform(act_space)
            self._plan: dict[int, bool] | None = None
            super().__init__(n, obs_space, act_space)

        # -- observations and actions through the optional SB3 transforms ---------
        def _obs(self, obs: Any) -> Any:
            """One sub-env's observation, or a batch of them, in SB3's form."""
            return obs if self._to_sb3 is None else self._to_sb3(obs)

        def _batched(self, items: Sequence[Any]) -> Any:
            return self._obs(batch_observations(self._env_observation_space, items))

        def reset(self):
            indices = range(self.num_envs)
            results = self._batch.reset(indices, self._seeds, self._options)
            self.reset_infos = [info for _, info in results]
            self._reset_seeds()
            self._reset_options()
            self._plan = None
            return self._batched([obs for obs, _ in results])

        def step_async(self, actions: np.ndarray) -> None:
            if self._to_env is not None:
                actions = self._to_env(np.asarray(actions))
            items = list(iterate(self._env_actions, actions))
            if len(items) != self.num_envs:
                raise ValueError(f"{len(items)} actions given for {self.num_envs} sub-envs")
            self._plan = self._batch.submit(dict(enumerate(items)))

        def step_wait(self):
            if self._plan is None:
                raise RuntimeError("step_wait() without step_async()")
            plan, self._plan = self._plan, None
            results = self._batch.receive(plan)
            obs = [results[i][0] for i in range(self.num_envs)]
            rewards = np.array([results[i][1] for i in range(self.num_envs)], dtype=np.float32)
            dones = np.zeros(self.num_envs, dtype=np.bool_)
            infos = []
            for i in range(self.num_envs):
                _, _, terminated, truncated, info = results[i]
                dones[i] = terminated or truncated
                info["TimeLimit.truncated"] = bool(truncated and not terminated)
                if dones[i]:
                    info["terminal_observation"] = self._obs(obs[i])
                infos.append(info)
            finished = np.flatnonzero(dones).tolist()
            if finished:
                restarted = self._batch.step({i: RESTART for i in finished})
                for i in finished:
                    obs[i], self.reset_infos[i] = restarted[i][0], restarted[i][4]
            return self._batched(obs), rewards, dones, infos

        def close(self) -> None:
            self._batch.close()

        def get_images(self) -> Sequence[np.ndarray | None]:
            return list(self._batch.render())

        def _targets(self, indices) -> list[DmRpcEnv]:
            return [self.envs[i] for i in self._get_indices(indices)]

        def get_attr(self, attr_name: str, indices=None) -> list[Any]:
            return [getattr(env, attr_name) for env in self._targets(indices)]

        def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
            for env in self._targets(indices):
                setattr(env, attr_name, value)

        def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
            return [getattr(env, method_name)(*method_args, **method_kwargs) for env in self._targets(indices)]

        def env_is_wrapped(self, wrapper_class: type, indices=None) -> list[bool]:
            # The sub-envs are bare DmRpcEnvs: wrapped by nothing.
            return [isinstance(env, wrapper_class) for env in self._targets(indices)]

        def __del__(self):
            try:
                self._batch.close()
            except Exception:
                pass

    DmRpcSB3VecEnv.__module__ = __name__
    return DmRpcSB3VecEnv


_lazy: dict[str, Callable[[], type]] = {"DmRpcSB3VecEnv": _sb3_class}


def __getattr__(name: str) -> Any:
    if name in _lazy:
        value = _lazy[name]()
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
