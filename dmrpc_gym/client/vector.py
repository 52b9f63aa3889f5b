"""``DmRpcVectorEnv``: N dm_env_rpc connections as a gymnasium ``VectorEnv``, every step in flight at once.

It stands on the fan-out engine (:class:`~dmrpc_gym.client.fanout.Batch`), as
does the Stable-Baselines3 flavour
(:class:`~dmrpc_gym.integrations.sb3.vec_env.DmRpcSB3VecEnv`).

dm_env_rpc starts the next sequence on the step after a finished one and
ignores that step's actions: that is gymnasium's ``NEXT_STEP`` autoreset, so
``DmRpcVectorEnv`` declares it.

>>> import gymnasium as gym, dmrpc_gym
>>> envs = gym.make_vec("dmrpc/Catch-v0", num_envs=2, vectorization_mode="vector_entry_point")
>>> obs, infos = envs.reset(seed=3)
>>> obs.shape, envs.action_space
((2, 10, 10), MultiDiscrete([3 3], start=[-1 -1]))
>>> obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 1], np.int8))
>>> envs.close()

"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from dmrpc_gym.client.fanout import RESTART, Batch
from dmrpc_gym.client.shared_rows import SharedRows, rows_of

__all__ = ["DmRpcVectorEnv", "batch_observations", "merge_infos", "seeds_for"]


_ARRAY_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def batch_observations(space: gym.Space, items: Sequence[Any], rows: dict[int, np.ndarray] | None = None) -> Any:
    """Stack single-env observations of ``space`` into fresh batched arrays (Dict/Tuple too).

    The same value as gymnasium's ``concatenate`` into ``create_empty_array``, with
    a fast path for the array spaces. ``rows``: a shared region's ``[N, *shape]`` arrays
    (:class:`~dmrpc_gym.client.shared_rows.SharedRows`): items that are their rows, in order,
    come back as that array itself (a view: ``copy=False``).

    >>> batch_observations(gym.spaces.Dict({"x": gym.spaces.Discrete(3)}), [{"x": 1}, {"x": 2}])
    {'x': array([1, 2])}
    """
    if isinstance(space, _ARRAY_SPACES):
        if rows:
            view = rows_of(items, rows)
            if view is not None and view.dtype == space.dtype:
                return view
        return np.array(items, dtype=space.dtype)
    if isinstance(space, gym.spaces.Dict):
        return {key: batch_observations(sub, [item[key] for item in items], rows) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(batch_observations(sub, [item[j] for item in items], rows) for j, sub in enumerate(space.spaces))
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


def seeds_for(seed: int | Sequence[int | None] | None, num_envs: int) -> list[int | None]:
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
        address: the server's ``"host:port"`` (or ``"unix:PATH"``), or a list of servers to fail
            over along, given whole to every sub-env (:class:`~dmrpc_gym.client.env.DmRpcEnv`); or
        addresses: several servers, used in turn (sub-env ``i`` on ``addresses[i % len]``).
        max_episode_steps: truncate episodes on the client after this many steps.
        batch_size: how many sub-envs :meth:`recv` returns (default: all of them).
        share_connections: the sub-envs of one server share one HTTP/2 connection, a stream
            each (default); False: a connection per sub-env.
        shared_memory: with a dmrpc_gym server on the same host, large tensors travel through shared
            memory (True, the default): one region for all sub-envs, each large observation one
            ``[num_envs, *shape]`` array of it (:mod:`~dmrpc_gym.client.shared_rows`); False: in the messages.
        copy: True (the default): the observations returned are arrays of the caller's own (one copy
            out of the region); False: where the sub-envs share a region, views of it, valid until
            the next step (as gymnasium's ``copy=False``); where they share none, copies still, and a
            warning says why, once.
        **env_kwargs: :class:`~dmrpc_gym.client.env.DmRpcEnv` arguments (``world_settings``,
            ``join_settings``, ``reset_settings``, ``observations``, ``actions``, ``nested``,
            ``reward``, ``discount``, ``seed_setting``, ``render_mode``, ``render_observation``,
            ``connect_timeout``, ``step_timeout``, ``credentials``, ``grpc_metadata``, ``channel``,
            ``tls``, ``token``, ``compression``, ``max_message_size``).

    Each sub-env creates its own world and joins it. Autoreset is ``NEXT_STEP``:
    the step after a sub-env finished returns its next first observation with
    reward 0.0 and both flags False, and ignores its action. ``infos`` are
    merged the gymnasium way (a key ``k`` with mask ``infos["_k"]``); each sub-env's
    dm_env_rpc state and discount are ``get_attr("state")`` / ``get_attr("last_discount")``.
    ``reset(seed=s)`` seeds sub-env ``i`` with ``s + i``; ``options["reset_mask"]``
    resets only some sub-envs.

    **Async batches**, as EnvPool's: :meth:`send` steps some sub-envs without
    waiting, and :meth:`recv` returns the first ``batch_size`` sub-envs whose
    answers came, with their ids, so a slow world holds up only itself. Autoreset
    is the same ``NEXT_STEP`` per sub-env: the ``send`` after a sub-env finished
    starts its next episode (its action ignored), and that ``recv`` returns the
    first observation with reward 0.0 and both flags False. ``recv`` with nothing
    in flight, and ``send`` to a sub-env already in flight, are errors; ``step``
    is refused while ``send`` left steps in flight.

    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> envs = DmRpcVectorEnv(3, embedded_server("catch").address)
    >>> obs, infos = envs.reset(seed=0)
    >>> obs.shape, sorted(infos)
    ((3, 10, 10), ['_ball', '_paddle', 'ball', 'paddle'])
    >>> envs.close()
    """

    metadata = {"render_modes": ["rgb_array"], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int | None = None, address: str | Sequence[str] | None = None, *,
                 addresses: Sequence[str] | None = None, max_episode_steps: int | None = None,
                 batch_size: int | None = None, copy: bool = True, **env_kwargs: Any):
        self._batch = Batch(num_envs, address, addresses=addresses, max_episode_steps=max_episode_steps,
                            **env_kwargs)
        batch = self._batch
        self.copy = bool(copy)
        self._shared = SharedRows(batch.envs)
        self._rows = None if self.copy else self._shared.rows
        if not self.copy and not self._rows:
            warnings.warn(f"DmRpcVectorEnv(copy=False): the observations are copies here, not views of shared memory "
                          f"({self._shared.why})", stacklevel=2)
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
        if batch_size is None:
            batch_size = self.num_envs
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or not 1 <= batch_size <= self.num_envs:
            self.close_extras()
            raise ValueError(f"batch_size must be within 1..num_envs ({self.num_envs}), got {batch_size!r}")
        self.batch_size = int(batch_size)

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every sub-env (or those in ``options["reset_mask"]``), all at once."""
        seeds = seeds_for(seed, self.num_envs)
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
        return batch_observations(self.single_observation_space, self._obs, self._rows), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env; a sub-env that finished last step starts its next episode instead."""
        every = list(range(self.num_envs))
        jobs = self._jobs("step", actions, every, "sub-envs")
        flying = list(self._batch.in_flight)
        if flying:
            raise RuntimeError(f"sub-envs {flying} have steps in flight from send(): recv() them first")
        return self._gather(every, self._batch.step(jobs))[:5]

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Step the sub-envs ``env_ids`` (default: all) without waiting; ``actions`` holds one
        action per id, in their order. A sub-env that finished starts its next episode instead."""
        ids = list(range(self.num_envs)) if env_ids is None else [int(i) for i in np.asarray(env_ids).ravel()]
        bad = [i for i in ids if not 0 <= i < self.num_envs]
        if bad or len(set(ids)) != len(ids):
            raise ValueError(f"env_ids must be distinct sub-env indices within 0..{self.num_envs - 1}, got {ids}")
        self._batch.submit(self._jobs("send", actions, ids, "env_ids"))

    def _jobs(self, call: str, actions: Any, ids: list[int], named: str) -> dict[int, Any]:
        """Sub-env ``ids[k]`` -> ``actions``' row ``k``, or RESTART for a sub-env that finished."""
        obs = self._obs
        for i in ids:                           # (a loop, not any(): a vector step's calls are counted)
            if obs[i] is None:
                raise RuntimeError(f"{call}() before reset(): call reset() first (it starts every sub-env's episode)")
        if isinstance(actions, np.ndarray) and actions.ndim and isinstance(self.action_space, _ARRAY_SPACES):
            items = actions                     # one row per sub-env (what iterate() yields)
        else:
            space = self.action_space if len(ids) == self.num_envs else batch_space(self.single_action_space, len(ids))
            items = list(iterate(space, actions))
        if len(items) != len(ids):
            raise ValueError(f"{len(items)} actions given for {len(ids)} {named}")
        return {i: RESTART if self._autoreset[i] else items[k] for k, i in enumerate(ids)}

    def recv(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any], np.ndarray]:
        """The first ``batch_size`` sub-envs in flight whose answers came (all of them, when fewer
        are in flight): ``(obs, rewards, terminations, truncations, infos, env_ids)``, row ``k``
        of each being sub-env ``env_ids[k]``."""
        flying = self._batch.in_flight
        if not flying:
            raise RuntimeError("recv() with no step in flight: send() actions first")
        ids = self._batch.first_ready(list(flying), min(self.batch_size, len(flying)))
        results = self._batch.receive({i: flying[i] for i in ids})
        return self._gather(ids, results)

    @property
    def in_flight(self) -> list[int]:
        """The sub-envs with a step sent and not yet returned by :meth:`recv`, in the order sent."""
        return list(self._batch.in_flight)

    def _gather(self, ids: list[int], results: dict) -> tuple:
        """Batched arrays of sub-envs ``ids``'s step results (their observations and flags kept)."""
        observations, rewards, terminated, truncated, infos = [], [], [], [], []
        for k, i in enumerate(ids):              # (one pass: a vector step's calls are counted)
            obs, reward, ended, cut, info = results[i]
            self._obs[i] = obs
            self._autoreset[i] = ended or cut
            observations.append(obs)
            rewards.append(reward)
            terminated.append(ended)
            truncated.append(cut)
            if info:
                infos.append((k, info))
        return (batch_observations(self.single_observation_space, observations, self._rows), np.array(rewards, dtype=np.float64),
                np.array(terminated, dtype=np.bool_), np.array(truncated, dtype=np.bool_),
                merge_infos(infos, len(ids)), np.array(ids, dtype=np.int64))

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
        self._shared.close()          # (views of it still held, by the caller or as the latest observations: kept)

    def __del__(self):
        try:
            self.close_extras()
        except Exception:
            pass
