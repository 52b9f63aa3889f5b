"""``DmRpcSB3VecEnv``: N dm_env_rpc connections as a Stable-Baselines3 ``VecEnv``, no subprocesses.

SB3 resets within the step: every finished sub-env gets its restarting step
right away (all in flight at once, through the fan-out engine
:class:`~dmrpc_gym.client.fanout.Batch`) and its last observation goes to
``info["terminal_observation"]``. A finished episode's return, length and
time go to ``info["episode"]`` as SB3's ``Monitor`` puts them, so SB3 logs
``ep_rew_mean`` / ``ep_len_mean`` with no ``VecMonitor``.

>>> venv = DmRpcSB3VecEnv(2, "catch", flat_spaces=True)
>>> venv.seed(5)
[5, 6]
>>> venv.reset().shape
(2, 100)
>>> obs, rewards, dones, infos = venv.step(np.array([0, 2]))
>>> venv.close()
"""
from __future__ import annotations

import time
import warnings
from typing import Any, Sequence

import numpy as np
from gymnasium.error import ResetNeeded
from gymnasium.vector.utils import batch_space, iterate
from stable_baselines3.common.vec_env import VecEnv

from dmrpc_gym.worlds.embedded import resolve_address
from dmrpc_gym.client.env import DmRpcEnv
from dmrpc_gym.client.fanout import RESTART, Batch
from dmrpc_gym.client.vector import batch_observations
from dmrpc_gym.integrations.flat_spaces import sb3_action_transform, sb3_observation_transform

__all__ = ["DmRpcSB3VecEnv"]


class DmRpcSB3VecEnv(VecEnv):
    """N dm_env_rpc connections as a Stable-Baselines3 ``VecEnv``, without subprocesses.

    Takes :class:`~dmrpc_gym.client.vector.DmRpcVectorEnv`'s arguments, plus ``flat_spaces=True`` for
    the spaces SB3 can train on (the transforms of :class:`~dmrpc_gym.integrations.flat_spaces.FlatSpaces`;
    ``sb3_compat=``, its former name, still works and warns). A
    finished sub-env restarts within the step (all restarts in flight at
    once); its last observation is ``info["terminal_observation"]`` and
    ``info["TimeLimit.truncated"]`` says whether it was cut short.
    ``step_async`` sends the actions, ``step_wait`` reads the answers.
    ``address`` may name a bundled world (``"catch"``) on the embedded server.

    With ``reconnect=True`` a training run outlives a server that restarts.
    SB3 resets a sub-env within the step, so a sub-env whose connection is lost
    mid-episode ends that episode there, cut short: ``done`` with
    ``info["TimeLimit.truncated"]``, reward 0.0, its last observation as
    ``terminal_observation`` and the error in ``info["connection_lost"]``; its
    restart connects again (``DmRpcEnv.restore``, within ``connect_timeout``),
    with a warning.
    """

    def __init__(self, num_envs: int | None = None, address: str | None = None, *,
                 addresses: Sequence[str] | None = None, max_episode_steps: int | None = None,
                 flat_spaces: bool = False, sb3_compat: bool | None = None, **env_kwargs: Any):
        if sb3_compat is not None:
            warnings.warn("DmRpcSB3VecEnv(sb3_compat=...) is deprecated: use flat_spaces=, the same switch",
                          DeprecationWarning, stacklevel=2)
            flat_spaces = flat_spaces or sb3_compat
        address = None if address is None else resolve_address(address)
        addresses = None if addresses is None else [resolve_address(a) for a in addresses]
        self._batch = Batch(num_envs, address, addresses=addresses,
                            max_episode_steps=max_episode_steps, **env_kwargs)
        self.envs = self._batch.envs
        n = self._batch.num_envs
        self._env_observation_space = self._batch.observation_space
        self._env_actions = batch_space(self._batch.action_space, n)
        obs_space, act_space = self._batch.observation_space, self._batch.action_space
        self._to_sb3 = self._to_env = None
        if flat_spaces:
            obs_space, self._to_sb3 = sb3_observation_transform(obs_space)
            act_space, self._to_env = sb3_action_transform(act_space)
        self._plan: dict[int, bool] | None = None
        self._lost: dict[int, BaseException] | None = None
        self._last: list[Any] = [None] * n
        self._was_reset = False         # step before reset() is refused, as a local env's OrderEnforcing does
        self._start = time.time()
        self._returns = np.zeros(n, dtype=np.float64)
        self._lengths = np.zeros(n, dtype=np.int64)
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
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._last = [obs for obs, _ in results]
        self._was_reset = True
        return self._batched(self._last)

    def step_async(self, actions: np.ndarray) -> None:
        if not self._was_reset:
            raise ResetNeeded("DmRpcSB3VecEnv: call reset() before step() (as a local env's OrderEnforcing asks)")
        if self._to_env is not None:
            actions = self._to_env(np.asarray(actions))
        items = list(iterate(self._env_actions, actions))
        if len(items) != self.num_envs:
            raise ValueError(f"{len(items)} actions given for {self.num_envs} sub-envs")
        self._lost = {} if self._batch.reconnect else None
        self._plan = self._batch.submit(dict(enumerate(items)), self._lost)

    def step_wait(self):
        if self._plan is None:
            raise RuntimeError("step_wait() without step_async()")
        plan, self._plan = self._plan, None
        results = self._batch.receive(plan, self._lost)
        for i, err in (self._lost or {}).items():       # the episode ends where the connection did
            results[i] = (self._last[i], 0.0, False, True, {"connection_lost": str(err)})
        obs = [results[i][0] for i in range(self.num_envs)]
        rewards = np.array([results[i][1] for i in range(self.num_envs)], dtype=np.float32)
        dones = np.zeros(self.num_envs, dtype=np.bool_)
        self._returns += [results[i][1] for i in range(self.num_envs)]
        self._lengths += 1
        infos = []
        for i in range(self.num_envs):
            _, _, terminated, truncated, info = results[i]
            dones[i] = terminated or truncated
            info["TimeLimit.truncated"] = bool(truncated and not terminated)
            if dones[i]:
                info["terminal_observation"] = self._obs(obs[i])
                info["episode"] = {"r": float(self._returns[i]), "l": int(self._lengths[i]),
                                   "t": round(time.time() - self._start, 6)}
                self._returns[i], self._lengths[i] = 0.0, 0
            infos.append(info)
        self._restart(np.flatnonzero(dones).tolist(), obs)
        self._last = obs
        return self._batched(obs), rewards, dones, infos

    def _restart(self, finished: list[int], obs: list[Any]) -> None:
        """Start the next episode of the ``finished`` sub-envs (all in flight at once), into ``obs``;
        with ``reconnect``, one whose connection is lost connects again first (three tries)."""
        for _ in range(3):
            if not finished:
                return
            lost = {} if self._batch.reconnect else None
            for i in finished:
                if lost is not None and self.envs[i].connection.failure is not None:
                    self._batch.restore(i)
            restarted = self._batch.step({i: RESTART for i in finished}, lost)
            for i in restarted:
                obs[i], self.reset_infos[i] = restarted[i][0], restarted[i][4]
            finished = list(lost or ())
        if finished:
            raise ConnectionError(f"sub-envs {finished} lost their connection on three restarts in a row")

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
