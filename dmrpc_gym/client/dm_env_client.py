"""A dm_env_rpc world as a ``dm_env.Environment``, on our own fast connection.

:func:`connect_dm_env` wraps a :class:`~dmrpc_gym.client.env.DmRpcEnv` (so TLS,
tokens, timeouts, compression and seeds work as there) and gives dm_env's view:

- ``observation_spec()`` nests the dotted observation names again (``a.b`` ->
  ``{"a": {"b": ...}}``); the ``reward``, ``discount`` and render observations
  are not part of it. A single observation named ``observation`` (how a server
  names a bare spec) is the bare value; any other name is a key, even alone. So
  with actions: ``action`` alone is bare, other names are dict keys;
- ``reward_spec()`` / ``discount_spec()`` are the ``reward`` / ``discount``
  observations' specs when the world has them (else dm_env's defaults);
- from a dmrpc_gym server serving a dm_env, the specs are the served env's own
  (class, name, shape, dtype, bounds and their shape; :mod:`dmrpc_gym.spaces.described`),
  and observations come in their structure and dtypes;
- from any other server, specs keep the TensorSpec's dtype and per-element bounds: a
  bounded integer scalar from 0 is a ``DiscreteArray``, strings a ``StringArray``,
  integer bounds spanning the whole dtype an unbounded ``Array``;
- TimeSteps follow the dm_env_rpc states as the official ``DmEnvAdaptor`` reads
  them: the start of a sequence is FIRST (no reward, no discount), RUNNING is
  MID, TERMINATED and INTERRUPTED are LAST; reward and discount are the
  ``reward`` / ``discount`` observations as they came (dtype kept), else 0.0 and
  1.0 (0.0 for TERMINATED); from a dmrpc_gym server serving a dm_env, of the env's own
  types (dm_control's and bsuite's Python floats), which the server says. ``step()`` after a LAST step (or before any) starts
  a new sequence, as dm_env requires.
"""
from __future__ import annotations

from typing import Any, Mapping

import dm_env
import gymnasium as gym
import numpy as np
from dm_env import specs as dm_specs

from dmrpc_gym.client.agent import State
from dmrpc_gym.client.env import DmRpcEnv
from dmrpc_gym.protocol.fidelity import exact_reward as exact_scalar
from dmrpc_gym.protocol.specs import SpecChecker
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.spaces.described import dm_spec_from_description

__all__ = ["connect_dm_env", "RemoteDmEnv", "dm_env_spec"]

REWARD, DISCOUNT = "reward", "discount"


def dm_env_spec(checker: SpecChecker) -> dm_specs.Array:
    """The dm_env spec stating what a TensorSpec (read as a :class:`SpecChecker`) states.

    >>> spec = pb.TensorSpec(name="move", dtype=pb.INT32)
    >>> spec.min.int32s.array.append(0); spec.max.int32s.array.append(2)
    >>> dm_env_spec(SpecChecker(spec))
    DiscreteArray(shape=(), dtype=int32, name=move, minimum=0, maximum=2, num_values=3)
    """
    name, dtype = checker.name, checker.dtype
    shape = tuple(checker.shape)
    if checker.data_type == pb.STRING:
        return dm_specs.StringArray(shape, name=name)
    lo, hi = checker.minimum, checker.maximum
    if dtype.kind in "iu" and lo is not None and hi is not None and \
            (lo <= np.iinfo(dtype).min).all() and (hi >= np.iinfo(dtype).max).all():
        lo = hi = None     # the dtype's whole range: no bounds (how an unbounded integer Array is served)
    if lo is None and hi is None:
        return dm_specs.Array(shape, dtype, name=name)
    if dtype.kind in "iu" and shape == () and lo is not None and hi is not None and lo == 0:
        return dm_specs.DiscreteArray(int(hi) + 1, dtype=dtype, name=name)
    if lo is None:
        lo = np.array(-np.inf if dtype.kind == "f" else np.iinfo(dtype).min, dtype)
    if hi is None:
        hi = np.array(np.inf if dtype.kind == "f" else np.iinfo(dtype).max, dtype)
    return dm_specs.BoundedArray(shape, dtype, lo, hi, name=name)


def _nest(flat: Mapping[str, Any]) -> Any:
    """``{"a.b": x, "c": y}`` as ``{"a": {"b": x}, "c": y}`` (a single ``observation``: the value itself)."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        *path, leaf = name.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


class RemoteDmEnv(dm_env.Environment):
    """A dm_env_rpc world as a ``dm_env.Environment`` (see the module doc); made by :func:`connect_dm_env`.

    >>> from dmrpc_gym.server import Server
    >>> from dmrpc_gym.worlds.catch import Catch
    >>> with Server(Catch) as server:
    ...     env = connect_dm_env(server.address, {"seed": 1})
    ...     first = env.reset()
    ...     step = env.step({"paddle": np.int8(1)})
    ...     env.close()
    >>> first.step_type, first.observation["board"].shape, step.step_type, env.action_spec()["paddle"].dtype
    (<StepType.FIRST: 0>, (10, 10), <StepType.MID: 1>, dtype('int8'))
    """

    def __init__(self, address: str | None = None, world_settings: Mapping[str, Any] | None = None,
                 join_settings: Mapping[str, Any] | None = None, **options: Any):
        for reserved in ("nested", "observations", "reward", "discount"):
            if reserved in options:
                raise TypeError(f"connect_dm_env() sets {reserved}= itself: the dm_env view has every "
                                f"observation, nested, and reads the 'reward' / 'discount' observations")
        self.env = DmRpcEnv(address, world_settings=world_settings, join_settings=join_settings,
                            nested=True, **options)
        agent = self._agent = self.env._agent     # the env's agent, whose latest observations a step reads
        checkers = agent.specs.observations.checkers
        names = [*agent.obs_names, *agent.extra_names]
        specs = {n: dm_env_spec(checkers[n]) for n in names}
        # A single observation named "observation" is a bare value (how a bare spec is served);
        # any other name is a key, even alone (as DmEnvAdaptor gives it).
        self._wrap_obs = names[0] if not isinstance(agent.observation_space, gym.spaces.Dict) \
            and names != ["observation"] else None
        self._observation_spec = specs[names[0]] if names == ["observation"] else _nest(specs)
        self._extras = list(agent.extra_names)
        action_checkers = agent.specs.actions.checkers
        action_specs = {n: dm_env_spec(action_checkers[n]) for n in agent.act_names}
        self._unwrap_action = agent.act_names[0] if not isinstance(agent.action_space, gym.spaces.Dict) \
            and agent.act_names != ["action"] else None
        self._action_spec = action_specs["action"] if agent.act_names == ["action"] else _nest(action_specs)
        self._reward_spec = dm_env_spec(checkers[REWARD]) if REWARD in checkers else \
            dm_specs.Array((), np.float64, name=REWARD)
        self._discount_spec = dm_env_spec(checkers[DISCOUNT]) if DISCOUNT in checkers else \
            dm_specs.BoundedArray((), np.float64, 0.0, 1.0, name=DISCOUNT)
        exact = agent.exact.described.get("dm_env") if agent.exact is not None else None
        if exact is not None:       # the served dm_env's own specs (a dmrpc_gym server)
            own = {k: dm_spec_from_description(v) for k, v in exact.items()}
            self._observation_spec, self._action_spec = own["observation"], own["action"]
            self._reward_spec, self._discount_spec = own["reward"], own["discount"]
            self._wrap_obs, self._extras, self._unwrap_action = None, [], None
        self._exact = exact is not None
        self._fresh = True

    def _observation(self, obs: Any, info: Mapping[str, Any]) -> Any:
        if self._exact:
            return _shaped_like(self._observation_spec, obs)
        if self._wrap_obs is not None:
            obs = _nest({self._wrap_obs: obs})
        if self._extras:     # observations with no gymnasium space travel in info: put them back
            flat = dict(_flatten(obs))
            flat.update({n: info[n] for n in self._extras if n in info})
            return _nest(flat)
        return obs

    def reset(self) -> dm_env.TimeStep:
        obs, info = self.env.reset()
        self._fresh = False
        return dm_env.TimeStep(dm_env.StepType.FIRST, None, None, self._observation(obs, info))

    def step(self, action: Any) -> dm_env.TimeStep:
        if self._fresh:
            return self.reset()
        if self._unwrap_action is not None and isinstance(action, Mapping):
            action = dict(_flatten(action)).get(self._unwrap_action, action)
        obs, exact_reward, terminated, truncated, info = self.env.step(action)
        named = self._agent.last_observations
        reward = named.get(REWARD)
        reward = 0.0 if reward is None else reward[()]
        discount = named.get(DISCOUNT)
        discount = (0.0 if self.env.state == State.TERMINATED else 1.0) if discount is None else discount[()]
        if self._exact:         # the served dm_env's own types: Python floats unless the step says
            said = self._agent.exact.said
            reward = exact_reward
            discount = exact_scalar(discount, said["discount"]) if "discount" in said else float(discount)
        self._fresh = terminated or truncated
        kind = dm_env.StepType.LAST if self._fresh else dm_env.StepType.MID
        return dm_env.TimeStep(kind, reward, discount, self._observation(obs, info))

    def observation_spec(self) -> Any:
        """The observation specs, nested again from dotted names (a served dm_env's own, exactly)."""
        return self._observation_spec

    def action_spec(self) -> Any:
        """The action spec (a lone action's bare spec, else a dict of them)."""
        return self._action_spec

    def reward_spec(self) -> dm_specs.Array:
        """The spec of the ``reward`` observation (a float64 scalar when the world has none)."""
        return self._reward_spec

    def discount_spec(self) -> dm_specs.Array:
        """The spec of the ``discount`` observation (a float64 scalar in [0, 1] when the world has none)."""
        return self._discount_spec

    def close(self) -> None:
        """Leave the world (destroying it if this env created it). Idempotent; never hangs."""
        self.env.close()


def _shaped_like(spec: Any, value: Any) -> Any:
    """``value`` in the containers of the spec nest ``spec`` (a dm_env's ``OrderedDict`` order kept)."""
    if isinstance(spec, Mapping):
        return type(spec)((k, _shaped_like(s, value[k])) for k, s in spec.items())
    if isinstance(spec, (list, tuple)):
        return type(spec)(_shaped_like(s, v) for s, v in zip(spec, value))
    return value


def _flatten(nest: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(nest, Mapping):
        return [item for k, v in nest.items() for item in _flatten(v, f"{prefix}{k}.")]
    return [(prefix[:-1], nest)]


def connect_dm_env(address: str | None = None, world_settings: Mapping[str, Any] | None = None,
                   join_settings: Mapping[str, Any] | None = None, **options: Any) -> RemoteDmEnv:
    """A ``dm_env.Environment`` for a world on the dm_env_rpc server at ``address``.

    ``world_settings`` create a world (``world_name=`` joins one instead); ``options`` are
    :class:`~dmrpc_gym.client.env.DmRpcEnv`'s (``tls``, ``token``, ``connect_timeout``,
    ``step_timeout``, ``compression``, ``actions``, ...).
    """
    return RemoteDmEnv(address, world_settings, join_settings, **options)
