"""A ``dm_env.Environment`` seen as a gymnasium Env, so the server's gym worlds can serve it.

The spaces keep what dm_env states exactly, so that the TensorSpecs the server
sends are the env's own (see :func:`space_of`):

- ``BoundedArray`` -> ``Box`` with its per-element minimum / maximum and its dtype;
- ``DiscreteArray`` -> ``Discrete(num_values)`` of its dtype (integer bounds 0..n-1);
- ``StringArray`` (a scalar) -> :class:`~dmrpc_gym.spaces.text.PrintableText` (any printable text);
- ``Array`` -> an unbounded ``Box`` of its dtype (integers: the dtype's own range;
  bools: ``MultiBinary``);
- nested dicts -> nested ``Dict`` (dotted spec names on the wire).

Seeds: a reset's seed goes to the env's ``seed(n)`` method if it has one, else to
a dm_control task's or a bsuite env's random state (as their ``random=`` /
``seed=`` arguments set it); any other env says once that it is not seeded.

Steps: ``reset`` is the FIRST TimeStep; a LAST step with discount 0 is
``terminated``, a LAST step with any other discount is ``truncated`` (dm_env's
convention: a time limit). The env's discount of the last step is kept in
:attr:`DmEnvGym.discount` for the server's ``discount`` observation.

>>> import dm_env, numpy as np
>>> from dm_env import specs
>>> space_of(specs.BoundedArray((2,), np.float64, [0.0, -1.0], [1.0, 1.0]))
Box([ 0. -1.], 1.0, (2,), float64)
>>> space = space_of({"a": specs.DiscreteArray(3, dtype=np.int32), "t": specs.StringArray(())})
>>> space["a"], type(space["t"]).__name__
(Discrete(3, dtype=int32), 'PrintableText')
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces as gs

from dmrpc_gym.server.running import render_threads
from dmrpc_gym.spaces.text import PrintableText

log = logging.getLogger("dmrpc_gym.server")

__all__ = ["DmEnvGym", "space_of", "is_dm_env", "RENDER_SIZE"]

#: ``(height, width)`` of dm_control frames (``physics.render``).
RENDER_SIZE = (240, 320)


def is_dm_env(env: Any) -> bool:
    """Whether ``env`` is a ``dm_env.Environment`` (an instance or a subclass)."""
    try:
        import dm_env
    except ImportError:  # pragma: no cover - dm_env is a dependency
        return False
    if isinstance(env, type):
        return issubclass(env, dm_env.Environment)
    return isinstance(env, dm_env.Environment)


def space_of(spec: Any, where: str = "the spec") -> gs.Space:
    """The gymnasium space holding exactly the values of a dm_env spec (or nest of specs)."""
    from dm_env import specs
    if isinstance(spec, Mapping):
        return gs.Dict({str(k): space_of(v, f"{where}[{k!r}]") for k, v in spec.items()})
    if isinstance(spec, (list, tuple)):
        return gs.Tuple([space_of(v, f"{where}[{i}]") for i, v in enumerate(spec)])
    if isinstance(spec, specs.StringArray):
        if tuple(spec.shape) != ():
            raise TypeError(f"{where}: string arrays of shape {tuple(spec.shape)} cannot be served; "
                            f"only string scalars can")
        return PrintableText()
    if isinstance(spec, specs.DiscreteArray):
        return gs.Discrete(int(spec.num_values), dtype=spec.dtype)
    if not isinstance(spec, specs.Array):
        raise TypeError(f"{where}: {type(spec).__name__} is no dm_env spec")
    dtype, shape = np.dtype(spec.dtype), tuple(spec.shape)
    if dtype == np.bool_:
        return gs.MultiBinary(list(shape) if shape else [1]) if shape else gs.Discrete(2)
    if isinstance(spec, specs.BoundedArray):
        low = np.broadcast_to(spec.minimum, shape).astype(dtype)
        high = np.broadcast_to(spec.maximum, shape).astype(dtype)
        return gs.Box(low, high, shape, dtype)
    if dtype.kind == "f":
        return gs.Box(-np.inf, np.inf, shape, dtype)
    info = np.iinfo(dtype)
    return gs.Box(info.min, info.max, shape, dtype)


class DmEnvGym(gym.Env):
    """A dm_env as a gymnasium Env (see the module doc); ``render()`` is dm_control's ``physics.render``.

    Args:
        env: the ``dm_env.Environment``.
        render_mode: ``"rgb_array"`` to render frames, when the env has a dm_control ``physics``.
        name: names the env in what is logged.
        built_seed: the seed the env was built with (a factory taking ``seed``, as bsuite's): a first
            reset with that seed leaves the env's random state as its construction made it.

    >>> import dm_env
    >>> from dm_env import specs
    >>> class Coin(dm_env.Environment):
    ...     def reset(self): return dm_env.restart(np.zeros(1))
    ...     def step(self, action): return dm_env.truncation(1.0, np.ones(1), discount=0.5)
    ...     def observation_spec(self): return specs.Array((1,), np.float64)
    ...     def action_spec(self): return specs.DiscreteArray(2)
    >>> env = DmEnvGym(Coin())
    >>> env.reset()[0], env.step(1)[1:4], env.discount
    (array([0.]), (1.0, False, True), 0.5)
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, env: Any, render_mode: str | None = None, name: str = "the dm_env",
                 built_seed: int | None = None):
        self.dm_env = env
        self.name = name
        self._built_seed = built_seed     # the seed its factory was built with: its first reset's
        self.observation_space = space_of(env.observation_spec(), "observation_spec()")
        self.action_space = space_of(env.action_spec(), "action_spec()")
        #: The env's own reward and discount specs.
        self.reward_spec, self.discount_spec = env.reward_spec(), env.discount_spec()
        physics = getattr(env, "physics", None)
        self.render_mode = render_mode if render_mode == "rgb_array" and callable(
            getattr(physics, "render", None)) else None
        #: The size of :meth:`render`'s frames, known without rendering one.
        self.frame_shape = (*RENDER_SIZE, 3) if self.render_mode else None
        #: The discount of the last step (1.0 after a reset).
        self.discount = 1.0
        self._said_seed = False

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if seed is not None and seed == self._built_seed:
            seed = None                   # built with it: seeded as the env's own factory seeds it
        self._built_seed = None
        if seed is not None and not self._seed(seed) and not self._said_seed:
            self._said_seed = True
            log.warning("%s: this dm_env has no seed() method nor a dm_control task, seed %d is not "
                        "used (give the env its randomness through its own settings)", self.name, seed)
        timestep = self.dm_env.reset()
        self.discount = 1.0
        return timestep.observation, {}

    def _seed(self, seed: int) -> bool:
        """Seed the env's next sequences: its ``seed(n)`` method, or a dm_control task's or bsuite env's random state."""
        if callable(getattr(self.dm_env, "seed", None)):
            self.dm_env.seed(seed)
            return True
        task = getattr(self.dm_env, "task", None)
        if isinstance(getattr(task, "_random", None), np.random.RandomState):
            task._random = np.random.RandomState(seed)   # what suite.load's task_kwargs={"random": seed} sets
            return True
        if isinstance(getattr(self.dm_env, "_rng", None), np.random.RandomState):
            self.dm_env._rng = np.random.RandomState(seed)   # what a bsuite env's seed= sets
            return True
        return False

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        timestep = self.dm_env.step(action)
        discount = 1.0 if timestep.discount is None else timestep.discount
        self.discount = discount
        last = timestep.last()
        terminated = bool(last and discount == 0)
        reward = 0.0 if timestep.reward is None else timestep.reward   # of its own type (protocol.fidelity)
        return timestep.observation, reward, terminated, bool(last and not terminated), {}

    def render(self) -> np.ndarray | None:
        """A frame (the server renders every env on a thread of its own: dm_control's OpenGL context
        stays current on the thread that made it; :mod:`~dmrpc_gym.server.running.render_threads`)."""
        if self.render_mode is None:
            return None
        return self.dm_env.physics.render(*RENDER_SIZE, camera_id=0)

    def close(self) -> None:
        """Close the env; a dm_control physics frees its rendering context here, on its render
        thread (if it rendered), not later in a garbage collector's thread."""
        self.dm_env.close()
        free = getattr(getattr(self.dm_env, "physics", None), "free", None)
        if callable(free):
            render_threads.call(self, free, start=False)
