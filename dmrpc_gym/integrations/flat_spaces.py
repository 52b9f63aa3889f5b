"""Wrappers over dmrpc_gym envs; ``FlatSpaces`` is the flat-spaces view SB3 and RLlib take.

Stable-Baselines3 takes a narrower set of spaces than a dm_env_rpc world
offers: one-level Dicts, Discrete/MultiDiscrete starting at 0, 1-D vectors or
images, Box actions in [-1, 1], and no Dict actions. The transforms here map
each space kind to its SB3 form with one small function per kind; they are
public so vectorized code can reuse them. Every value function keeps leading
(batch) axes, so one function serves a single env and a vector of envs.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Iterator

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

__all__ = ["FlatSpaces", "FlatSpacesVector", "sb3_observation_transform", "sb3_action_transform", "sb3_spaces"]

#: A value map between a space and its SB3 form (leading batch axes are kept).
Transform = Callable[[Any], Any]
KeyPath = tuple  # keys (Dict) and indices (Tuple) from the root space to a leaf

#: Integer Box actions with more values than float32 resolves in [-1, 1] are not rescaled.
_MAX_RESCALED_INT_RANGE = 2 ** 24


# -- walking composite spaces ------------------------------------------------------
def _leaves(space: spaces.Space, path: KeyPath = ()) -> Iterator[tuple[KeyPath, spaces.Space]]:
    """Each non-composite sub-space with its path; a non-composite space is its own leaf."""
    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            yield from _leaves(sub, path + (key,))
    elif isinstance(space, spaces.Tuple):
        for index, sub in enumerate(space.spaces):
            yield from _leaves(sub, path + (index,))
    else:
        yield path, space


def _dotted(path: KeyPath) -> str:
    return ".".join(str(part) for part in path)


def _get(value: Any, path: KeyPath) -> Any:
    for part in path:
        value = value[part]
    return value


def _assemble(space: spaces.Space, values: dict[KeyPath, Any], path: KeyPath = ()) -> Any:
    """The value of ``space`` (Dict/Tuple nesting as in the space) from its leaves' values."""
    if isinstance(space, spaces.Dict):
        return {key: _assemble(sub, values, path + (key,)) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_assemble(sub, values, path + (i,)) for i, sub in enumerate(space.spaces))
    return values[path]


def _batch(x: np.ndarray, event_shape: tuple) -> tuple:
    """The leading (batch) axes of ``x`` in front of one value of shape ``event_shape``."""
    return x.shape[:x.ndim - len(event_shape)]


def _reshaper(old: tuple, new: tuple) -> Transform:
    def reshape(x):
        x = np.asarray(x)
        return x.reshape(_batch(x, old) + new)
    return reshape


def _identity(x: Any) -> Any:
    return x


def _flat_shape(shape: tuple) -> tuple:
    return (int(np.prod(shape, dtype=np.int64)),)


# -- observations: one function per space kind -----------------------------------------
def _box_observation(space: spaces.Box) -> tuple[spaces.Space, Transform]:
    """1-D vectors and 3-D images stay; a scalar becomes ``(1,)``, other ranks are flattened."""
    if len(space.shape) in (1, 3):
        return space, _identity
    shape = _flat_shape(space.shape)
    new = spaces.Box(space.low.reshape(shape), space.high.reshape(shape), shape, space.dtype)
    return new, _reshaper(space.shape, shape)


def _discrete_observation(space: spaces.Discrete) -> tuple[spaces.Space, Transform]:
    start = int(space.start)

    def shift(x):
        return (np.asarray(x).astype(np.int64) - start)[()]
    return spaces.Discrete(int(space.n)), shift


def _multi_discrete_observation(space: spaces.MultiDiscrete) -> tuple[spaces.Space, Transform]:
    shape = _flat_shape(space.shape)
    start = space.start.astype(np.int64)

    def shift(x):
        x = np.asarray(x)
        return (x.astype(np.int64) - start).reshape(_batch(x, space.shape) + shape)
    return spaces.MultiDiscrete(space.nvec.reshape(shape).astype(np.int64)), shift


def _multi_binary_observation(space: spaces.MultiBinary) -> tuple[spaces.Space, Transform]:
    shape = _flat_shape(space.shape)

    def flat(x):
        x = np.asarray(x)
        return x.astype(np.int8).reshape(_batch(x, space.shape) + shape)
    return spaces.MultiBinary(shape[0]), flat


_OBSERVATION_KINDS = {
    spaces.Box: _box_observation,
    spaces.Discrete: _discrete_observation,
    spaces.MultiDiscrete: _multi_discrete_observation,
    spaces.MultiBinary: _multi_binary_observation,
}


def _kind(space: spaces.Space, table: dict) -> Callable | None:
    for cls, fn in table.items():
        if isinstance(space, cls):
            return fn
    return None


def _observation_plan(space: spaces.Space) -> tuple[spaces.Space, Transform, dict[str, KeyPath]]:
    """``(sb3_space, transform, dropped)``; ``dropped`` maps dotted names to their paths."""
    kept: dict[str, tuple[KeyPath, spaces.Space, Transform]] = {}
    dropped: dict[str, KeyPath] = {}
    for path, leaf in _leaves(space):
        name = _dotted(path)
        if name in kept or name in dropped:
            raise ValueError(f"observation name {name!r} occurs twice once nested keys are dotted")
        kind = _kind(leaf, _OBSERVATION_KINDS)
        if kind is None:
            dropped[name] = path
            warnings.warn(f"observation {name or '(bare)'!r} has no Stable-Baselines3 form ({leaf}); "
                          "FlatSpaces leaves it out of the observation", stacklevel=3)
            continue
        new, fn = kind(leaf)
        kept[name] = (path, new, fn)
    if not kept:
        raise ValueError(f"no observation of {space} has a Stable-Baselines3 form; expected at least one "
                         "Box, Discrete, MultiDiscrete or MultiBinary")
    if len(kept) == 1:
        ((path, new, fn),) = kept.values()
        return new, (lambda obs: fn(_get(obs, path))), dropped
    items = [(name, path, fn) for name, (path, _, fn) in kept.items()]
    new_space = spaces.Dict({name: new for name, (_, new, _) in kept.items()})

    def to_sb3(obs):
        return {name: fn(_get(obs, path)) for name, path, fn in items}
    return new_space, to_sb3, dropped


def sb3_observation_transform(space: spaces.Space) -> tuple[spaces.Space, Transform]:
    """The SB3 form of an observation space, and the function mapping values into it.

    Nested Dicts/Tuples become one Dict with dotted keys (``"pos.x"``, ``"pair.0"``);
    a single remaining observation is a bare space. Box: scalars become ``(1,)``,
    ranks other than 1 and 3 are flattened. Discrete/MultiDiscrete start at 0
    (int64, MultiDiscrete 1-D). MultiBinary is 1-D. Text and other kinds are
    left out with a warning.

    >>> from gymnasium import spaces
    >>> space, fn = sb3_observation_transform(spaces.Dict(
    ...     {"pos": spaces.Dict({"x": spaces.Box(-1, 1, ())}), "cell": spaces.Discrete(3, start=-1)}))
    >>> space
    Dict('cell': Discrete(3), 'pos.x': Box(-1.0, 1.0, (1,), float32))
    >>> fn({"pos": {"x": np.float32(0.5)}, "cell": np.int64(-1)})
    {'cell': np.int64(0), 'pos.x': array([0.5], dtype=float32)}
    """
    new, fn, _ = _observation_plan(space)
    return new, fn


# -- actions: one function per space kind -------------------------------------------------
def _box_action(space: spaces.Box) -> tuple[spaces.Space, Transform]:
    """Bounded elements are rescaled to [-1, 1] float32; unbounded ones pass through.

    Back in the env's form, values are clipped to the bounds, rounded for integer
    dtypes, and cast to the original dtype.
    """
    low, high = space.low.astype(np.float64), space.high.astype(np.float64)
    bounded = np.isfinite(low) & np.isfinite(high)
    integer = np.issubdtype(space.dtype, np.integer)
    if integer and not np.all(high - low <= _MAX_RESCALED_INT_RANGE):
        return space, _identity
    if not bounded.any():
        return space, _identity
    new = spaces.Box(np.where(bounded, -1.0, low).astype(np.float32),
                     np.where(bounded, 1.0, high).astype(np.float32), space.shape, np.float32)
    half_range = np.where(bounded, (high - low) / 2.0, 1.0)
    offset = np.where(bounded, low + half_range, 0.0)

    def to_env(a):
        x = np.asarray(a, dtype=np.float64) * half_range + offset
        if integer:
            x = np.rint(x)
        return np.asarray(np.clip(x, low, high), dtype=space.dtype)
    return new, to_env


def _discrete_action(space: spaces.Discrete) -> tuple[spaces.Space, Transform]:
    start, dtype = int(space.start), space.dtype

    def to_env(a):
        return (np.asarray(a).astype(np.int64) + start).astype(dtype)[()]
    return spaces.Discrete(int(space.n)), to_env


def _multi_discrete_action(space: spaces.MultiDiscrete) -> tuple[spaces.Space, Transform]:
    shape = _flat_shape(space.shape)
    start = space.start.astype(np.int64)

    def to_env(a):
        a = np.asarray(a).astype(np.int64)
        return (a.reshape(_batch(a, shape) + space.shape) + start).astype(space.dtype)
    return spaces.MultiDiscrete(space.nvec.reshape(shape).astype(np.int64)), to_env


def _multi_binary_action(space: spaces.MultiBinary) -> tuple[spaces.Space, Transform]:
    shape = _flat_shape(space.shape)

    def to_env(a):
        a = np.asarray(a)
        return a.astype(np.int8).reshape(_batch(a, shape) + space.shape)
    return spaces.MultiBinary(shape[0]), to_env


_ACTION_KINDS = {
    spaces.Box: _box_action,
    spaces.Discrete: _discrete_action,
    spaces.MultiDiscrete: _multi_discrete_action,
    spaces.MultiBinary: _multi_binary_action,
}


def _leaf_action(path: KeyPath, leaf: spaces.Space) -> tuple[spaces.Space, Transform]:
    kind = _kind(leaf, _ACTION_KINDS)
    if kind is None:
        raise ValueError(f"action {_dotted(path) or '(bare)'!r} has no Stable-Baselines3 form ({leaf}); "
                         "expected Box, Discrete, MultiDiscrete or MultiBinary")
    return kind(leaf)


def _joined_space(parts: list[spaces.Space]) -> spaces.Space:
    """One SB3 space holding the parts side by side: Box, MultiDiscrete or MultiBinary."""
    if all(isinstance(p, spaces.Box) for p in parts):
        return spaces.Box(np.concatenate([p.low.reshape(-1) for p in parts]),
                          np.concatenate([p.high.reshape(-1) for p in parts]),
                          dtype=np.result_type(*(p.dtype for p in parts)))
    if all(isinstance(p, (spaces.Discrete, spaces.MultiDiscrete)) for p in parts):
        return spaces.MultiDiscrete(np.concatenate(
            [np.atleast_1d(p.n if isinstance(p, spaces.Discrete) else p.nvec) for p in parts]).astype(np.int64))
    if all(isinstance(p, spaces.MultiBinary) for p in parts):
        return spaces.MultiBinary(sum(p.shape[0] for p in parts))
    raise ValueError("SB3 takes one action array; these actions mix kinds that cannot share one: "
                     f"{[type(p).__name__ for p in parts]} (expected all Box, all Discrete/MultiDiscrete, "
                     "or all MultiBinary)")


def sb3_action_transform(space: spaces.Space) -> tuple[spaces.Space, Transform]:
    """The SB3 form of an action space, and the function mapping its values back to the env's.

    Bounded Box -> [-1, 1] float32 (back: clipped, rounded for integers, original
    dtype); unbounded Box elements pass through. Discrete/MultiDiscrete start at 0
    (MultiDiscrete 1-D). MultiBinary is 1-D. A Dict/Tuple of several actions
    becomes one array: their SB3 forms side by side (all Box, all
    Discrete/MultiDiscrete, or all MultiBinary), split back into the nested value.

    >>> from gymnasium import spaces
    >>> space, to_env = sb3_action_transform(spaces.Box(0.0, 10.0, (2,)))
    >>> space
    Box(-1.0, 1.0, (2,), float32)
    >>> to_env(np.array([-1.0, 0.5], dtype=np.float32))
    array([0. , 7.5], dtype=float32)
    >>> space, to_env = sb3_action_transform(spaces.Dict(
    ...     {"move": spaces.Discrete(3, start=-1), "fire": spaces.Discrete(2)}))
    >>> space, to_env(np.array([0, 1]))
    (MultiDiscrete([2 3]), {'fire': np.int64(0), 'move': np.int64(0)})
    """
    leaves = list(_leaves(space))
    if not leaves:
        raise ValueError(f"the action space {space} holds no action")
    if len(leaves) == 1 and not leaves[0][0]:
        return _leaf_action((), space)
    plans = [(path, *_leaf_action(path, leaf)) for path, leaf in leaves]
    if len(plans) == 1:
        ((path, new, fn),) = plans
        return new, lambda a: _assemble(space, {path: fn(a)})
    joined = _joined_space([new for _, new, _ in plans])
    sizes = [int(np.prod(new.shape, dtype=np.int64)) for _, new, _ in plans]
    cuts = np.cumsum(sizes)[:-1]

    def to_env(a):
        a = np.asarray(a)
        batch = _batch(a, joined.shape)
        pieces = np.split(a, cuts, axis=-1)
        return _assemble(space, {path: fn(piece.reshape(batch + new.shape))
                                 for (path, new, fn), piece in zip(plans, pieces)})
    return joined, to_env


def sb3_spaces(observation_space: spaces.Space, action_space: spaces.Space) -> tuple[spaces.Space, spaces.Space]:
    """The SB3 forms of an observation and an action space (see the two transforms)."""
    return sb3_observation_transform(observation_space)[0], sb3_action_transform(action_space)[0]


class FlatSpaces(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """The flat-spaces view of an env (typically a ``DmRpcEnv``): what SB3 and RLlib take.

    Observations and actions take the forms of :func:`sb3_observation_transform`
    and :func:`sb3_action_transform`; observations SB3 cannot take are left out
    and their values are put in ``info`` under their dotted names. Rewards are
    Python floats. Use it as ``wrapper_class`` of SB3's ``make_vec_env``::

        make_vec_env("dmrpc/Catch-v0", n_envs=4, wrapper_class=FlatSpaces)

    ``SB3Compat``, its former name, still works and warns (``DeprecationWarning``).

    >>> import gymnasium as gym, dmrpc_gym
    >>> env = FlatSpaces(gym.make("dmrpc/Catch-v0"))
    >>> env.observation_space.shape, env.action_space
    ((100,), Discrete(3))
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(2)   # Catch's action +1
    >>> type(reward), obs.shape
    (<class 'float'>, (100,))
    >>> env.close()
    """

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self.observation_space, self._to_sb3, self._dropped = _observation_plan(env.observation_space)
        self.action_space, self._to_env = sb3_action_transform(env.action_space)

    # The transforms are closures, so a copy is made by wrapping the (re-created) env again.
    def __getstate__(self) -> dict:
        return {"env": self.env}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["env"])

    def _observe(self, obs: Any, info: dict) -> Any:
        for name, path in self._dropped.items():
            info.setdefault(name, _get(obs, path))
        return self._to_sb3(obs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self._observe(obs, info), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(self._to_env(action))
        return self._observe(obs, info), float(reward), bool(terminated), bool(truncated), info


def deprecated_name(module: str, name: str) -> Any:
    """``SB3Compat``, the former name of :class:`FlatSpaces`: the class itself, with a
    ``DeprecationWarning`` naming its replacement (``tests/integrations/test_wrappers.py`` checks both)."""
    if name != "SB3Compat":
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn("SB3Compat is deprecated: use dmrpc_gym.integrations.flat_spaces.FlatSpaces, the same class "
                  "(also in dmrpc_gym.integrations.sb3)", DeprecationWarning, stacklevel=3)
    return FlatSpaces


def __getattr__(name: str) -> Any:
    return deprecated_name(__name__, name)


class FlatSpacesVector(gym.vector.VectorWrapper):
    """:class:`FlatSpaces` for a vector env (a ``DmRpcVectorEnv``): the same view, batched.

    Observations left out are put in ``infos`` under their dotted names (with
    the ``_name`` mask gymnasium's vector infos use).

    >>> from dmrpc_gym.client.vector import DmRpcVectorEnv
    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> envs = FlatSpacesVector(DmRpcVectorEnv(2, embedded_server("catch").address))
    >>> envs.single_observation_space.shape, envs.action_space
    ((100,), MultiDiscrete([3 3]))
    >>> obs, infos = envs.reset(seed=0)
    >>> obs.shape, envs.step([0, 2])[0].shape
    ((2, 100), (2, 100))
    >>> envs.close()
    """

    def __init__(self, env: gym.vector.VectorEnv):
        super().__init__(env)
        self.single_observation_space, self._to_flat, self._dropped = _observation_plan(env.single_observation_space)
        self.single_action_space, self._to_env = sb3_action_transform(env.single_action_space)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def _observe(self, obs: Any, infos: dict) -> Any:
        for name, path in self._dropped.items():
            infos.setdefault(name, _get(obs, path))
            infos.setdefault(f"_{name}", np.ones(self.num_envs, bool))
        return self._to_flat(obs)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._observe(obs, infos), infos

    def step(self, actions: Any):
        obs, rewards, terminations, truncations, infos = self.env.step(self._to_env(actions))
        return self._observe(obs, infos), rewards, terminations, truncations, infos
