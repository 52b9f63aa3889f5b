"""What one agent sees: its specs, and the conversions between its spaces and tensors.

An :class:`AgentInterface` is built once per (observation space, action space,
render shape) and shared by every agent with those spaces. It holds the
``ActionObservationSpecs`` sent on JoinWorld and Reset, decodes and checks the
actions of a StepRequest, and encodes the requested observations of a
StepResponse. Names: a Dict space's (dotted) keys; any other space is
``observation`` / ``action`` (``observation.0``... for a Tuple). UIDs: actions
1..n in the order of :func:`dmrpc_gym.spaces.specs_from_space`; observations
1..m likewise, then
``reward``, ``discount`` and, when the env renders ``rgb_array``, ``RGB``.

Actions missing from a StepRequest (all actions are optional in dm_env_rpc)
take a default: zero, moved into the action's bounds (``""`` for text).

>>> import gymnasium as gym
>>> face = AgentInterface(gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(3))
>>> {uid: s.name for uid, s in face.specs.observations.items()}
{1: 'observation', 2: 'reward', 3: 'discount'}
>>> {uid: s.name for uid, s in face.specs.actions.items()}
{1: 'action'}
>>> from dmrpc_gym.protocol import tensors
>>> face.actions({1: tensors.pack(np.int64(2))}), face.actions({})
(np.int64(2), np.int64(0))
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

import numpy as np
from gymnasium import spaces as gym_spaces
from gymnasium.spaces import Space

from dmrpc_gym import spaces
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.fidelity import ENV_KEY, EXACT_UID
from dmrpc_gym.protocol.protowire import remember
from dmrpc_gym.protocol.info import DROPPED, INFO_UID, dropped_keys, info_tensor_bytes, pack_info, unpack_info
from dmrpc_gym.server.serving import status
from dmrpc_gym.server.running.workers import Lane, rendered
from dmrpc_gym.spaces.described import describe_dm_spec, describe_space, translation_losses
from dmrpc_gym.spaces.scalars import ScalarKinds
from dmrpc_gym.protocol.spec_table import SpecTable
from dmrpc_gym.protocol.specs import SpecChecker
from dmrpc_gym.protocol.wire import pb

log = logging.getLogger("dmrpc_gym.server")

__all__ = ["sequence_state", "AgentInterface", "StepAnswer", "spec_names", "OBSERVATION", "ACTION", "REWARD",
           "DISCOUNT", "RGB", "KIND_ENV", "KIND_REWARD", "KIND_DISCOUNT", "KIND_RGB", "KIND_INFO", "KIND_EXACT"]

#: Spec name of a bare (non-Dict) observation space, and of a bare action space.
OBSERVATION, ACTION = "observation", "action"
#: Names of the observations the server adds.
REWARD, DISCOUNT, RGB = "reward", "discount", "RGB"

#: The kind of each item of an observation plan (what the general and the steady answers write for it).
KIND_ENV, KIND_REWARD, KIND_DISCOUNT, KIND_RGB, KIND_INFO, KIND_EXACT = range(6)
_PLAN_CACHE = 64


def _prefix(space: Space, name: str) -> str:
    """Dict keys are spec names as they are; any other space is named ``name`` (``name.0``... for a Tuple)."""
    return "" if isinstance(space, gym_spaces.Dict) else name


def spec_names(env: Any) -> Mapping[str, str]:
    """What the env names its bare spaces' tensors: ``metadata["spec_names"]`` (keys ``observation``
    and ``action``), else those two words."""
    return (getattr(env, "metadata", None) or {}).get("spec_names") or {}


def _default(checker: SpecChecker) -> np.ndarray:
    """Zero moved into the bounds: the value of an action a StepRequest leaves out."""
    if checker.dtype.kind == "U":
        return np.full(checker.shape, "", np.str_)
    shape = tuple(1 if d < 0 else d for d in checker.shape)
    value = np.zeros(shape, checker.dtype)
    if checker.minimum is not None:
        value = np.maximum(value, checker.minimum).astype(checker.dtype)
    if checker.maximum is not None:
        value = np.minimum(value, checker.maximum).astype(checker.dtype)
    return value


class StepAnswer(large_tensors.Pieces):
    """A StepResponse written by hand: ``state``, and the pieces of its ``observations`` map.

    The server writes every step answer this way (no message object, large
    observations sent from their own memory).

    >>> answer = StepAnswer()
    >>> answer.state = pb.RUNNING
    >>> answer.add_double(3, 0.5)
    >>> response = pb.EnvironmentResponse.FromString(b"".join(answer.message()))
    >>> pb.EnvironmentStateType.Name(response.step.state), response.step.observations[3].doubles.array[:]
    ('RUNNING', [0.5])
    """

    __slots__ = ("state",)

    def __init__(self):
        super().__init__(large_tensors.OBSERVATIONS)
        self.state = 0

    def message(self) -> list:
        """The serialized ``EnvironmentResponse``, as pieces."""
        return self.envelope(large_tensors.STEP_TAG, b"\x08" + tensors.varint(self.state) if self.state else b"")


class _Plan:
    """The checked, de-duplicated list of requested observations of one StepRequest form."""

    __slots__ = ("items", "env", "rgb", "exact")

    def __init__(self, items: tuple, env: bool, rgb: bool):
        self.items, self.env, self.rgb = items, env, rgb
        #: The step's exact extras are asked for (only our clients ask): worth working out.
        self.exact = any(item[1] == KIND_EXACT for item in items)


class AgentInterface:
    """Specs of one agent and the codecs between its spaces and tensors.

    Args:
        observation_space / action_space: the env's (or the PettingZoo agent's) spaces.
        rgb_shape: ``(H, W, 3)`` to offer the ``RGB`` observation, or None.
        who: names the env in error messages.
        scalar_specs: the env's own ``reward`` / ``discount`` specs (scalars) in place of the
            defaults (DOUBLE; discount within [0, 1]).
        dm_specs: a dm_env's own specs (``observation``, ``action``, ``reward``, ``discount``),
            described with the spaces (:meth:`description`).
        names: the names of bare spaces' tensors (``observation`` / ``action`` keys; by default
            those words), as an env's ``metadata["spec_names"]`` gives them (:func:`spec_names`).

    Raises ``FAILED_PRECONDITION`` when a space has no TensorSpec, or when an
    observation is named like one the server adds.

    >>> import gymnasium as gym
    >>> face = AgentInterface(gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, ())}), gym.spaces.Discrete(2),
    ...                       rgb_shape=(4, 4, 3))
    >>> [spec.name for spec in face.specs.observations.values()]
    ['x', 'reward', 'discount', 'RGB']
    >>> face.plan([2, 2, 1]).items
    ((2, 1, 'reward', 2), (1, 0, 'x', 1))
    """

    def __init__(self, observation_space: Space, action_space: Space,
                 rgb_shape: tuple[int, int, int] | None = None, who: str = "the env",
                 scalar_specs: Mapping[str, pb.TensorSpec] | None = None,
                 dm_specs: Mapping[str, Any] | None = None, names: Mapping[str, str] | None = None):
        self.observation_space = observation_space
        self.dm_specs = dm_specs
        self._description: str | None = None
        #: How the env's observations hold their scalars (told to our client in a step's exact extras).
        self.scalar_kinds = ScalarKinds(observation_space)
        self.action_space = action_space
        self.rgb_shape = rgb_shape
        try:
            names = names or {}
            self._names = {OBSERVATION: _prefix(observation_space, names.get(OBSERVATION, OBSERVATION)),
                           ACTION: _prefix(action_space, names.get(ACTION, ACTION))}
            self.obs_codec = spaces.ValueCodec(observation_space, self._names[OBSERVATION])
            self._act_codec = spaces.ValueCodec(action_space, self._names[ACTION])
        except (TypeError, ValueError) as exc:
            raise status.failed_precondition(f"{who} cannot be served: {exc}") from None
        specs = pb.ActionObservationSpecs()
        for uid, spec in enumerate(self._act_codec.specs.values(), 1):
            specs.actions[uid].CopyFrom(spec)
        self._actions = SpecTable(specs.actions, "action")
        self._defaults = {c.name: _default(c) for c in self._actions.by_uid.values()}
        self._observations: dict[int, tuple[int, int, str, int]] = {}
        env_specs = self.obs_codec.specs
        extra = {REWARD: pb.TensorSpec(name=REWARD, dtype=pb.DOUBLE),
                 DISCOUNT: pb.TensorSpec(name=DISCOUNT, dtype=pb.DOUBLE)}
        extra[DISCOUNT].min.doubles.array.append(0.0)
        extra[DISCOUNT].max.doubles.array.append(1.0)
        extra.update(scalar_specs or {})
        if rgb_shape is not None:
            extra[RGB] = pb.TensorSpec(name=RGB, dtype=pb.UINT8, shape=rgb_shape)
        clash = sorted(set(env_specs) & set(extra))
        if clash:
            raise status.failed_precondition(
                f"{who} cannot be served: its observation {clash[0]!r} has the name of an "
                f"observation the server adds ({', '.join(extra)})")
        kinds = {REWARD: KIND_REWARD, DISCOUNT: KIND_DISCOUNT, RGB: KIND_RGB}
        for uid, (name, spec) in enumerate([*env_specs.items(), *extra.items()], 1):
            specs.observations[uid].CopyFrom(spec)
            self._observations[uid] = (uid, kinds.get(name, KIND_ENV), name, spec.dtype)
        self.specs = specs
        # info: asked for only by our clients, listed in no spec (see dmrpc_gym.protocol.info).
        self._observations[INFO_UID] = (INFO_UID, KIND_INFO, "info", pb.STRING)
        self._observations[EXACT_UID] = (EXACT_UID, KIND_EXACT, "exact", pb.STRING)   # protocol.fidelity
        self._who, self._dropped = who, set()
        self._plans: dict[tuple[int, ...], _Plan] = {}
        self._observation_table = SpecTable(specs.observations, "observation")

    def description(self, facts: Mapping[str, Any] | None = None) -> str:
        """The exact spaces (and dm_env specs) as text (:mod:`dmrpc_gym.spaces.described`), with the
        names their tensors travel under (``names``: a bare space's; ``""`` for a Dict) and ``facts``,
        what the env says of itself (:mod:`~dmrpc_gym.server.worlds.env_facts`), made once."""
        if self._description is None:
            described: dict[str, Any] = {"observation": describe_space(self.observation_space),
                                         "action": describe_space(self.action_space), "names": self._names}
            if self.dm_specs is not None:
                described["dm_env"] = {k: describe_dm_spec(v) for k, v in self.dm_specs.items()}
            if facts is not None:
                described[ENV_KEY] = dict(facts)
            self._description = pack_info(described)
        return self._description

    def losses(self) -> list[str]:
        """What foreign clients cannot read back of these spaces (:func:`translation_losses`)."""
        return [*translation_losses(self.observation_space, self._names[OBSERVATION] or ""),
                *translation_losses(self.action_space, self._names[ACTION] or "")]

    def uid(self, name: str) -> int:
        """The UID of observation ``name`` (``ValueError`` when there is none)."""
        return self._observation_table.uid(name)

    # -- actions -----------------------------------------------------------------

    def actions(self, given: Mapping[int, pb.Tensor], large: Mapping[int, large_tensors.Decoded] | None = None) -> Any:
        """The env action for a StepRequest's ``actions``; ``INVALID_ARGUMENT`` naming a bad one.

        The tensor's payload must be the spec's dtype exactly; shape and bounds are
        checked per element. Actions not given take their default. ``large``: the
        request's tensors read outside protobuf (:func:`~dmrpc_gym.protocol.large_tensors.split`).
        """
        try:
            arrays = self._actions.unpack(given, check=True, large=large)
        except ValueError as exc:
            raise status.invalid_argument(str(exc)) from None
        if len(arrays) < len(self._defaults):
            for name, default in self._defaults.items():
                if name not in arrays:
                    arrays[name] = default.copy()
        return self._act_codec.unflatten(arrays)

    # -- observations ------------------------------------------------------------------

    def plan(self, requested: Any) -> _Plan:
        """Check a StepRequest's ``requested_observations`` (cached per distinct list no longer than
        the observations: a list with repeats past that is checked each time, never kept)."""
        key = tuple(requested)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        items, seen = [], set()
        for uid in key:
            if uid in seen:
                continue
            seen.add(uid)
            entry = self._observations.get(uid)
            if entry is None:
                raise status.invalid_argument(
                    f"no observation has UID {uid} (observations: {self._observation_table.listing})")
            items.append(entry)
        plan = _Plan(tuple(items), any(e[1] == KIND_ENV for e in items), any(e[1] == KIND_RGB for e in items))
        if len(key) <= len(self._observations):      # kept: at most _PLAN_CACHE keys this long
            remember(self._plans, key, plan, _PLAN_CACHE)
        return plan

    def encode(self, plan: _Plan, out: large_tensors.Pieces, observation: Any, reward: float, discount: float,
               render: Callable[[], Any] | None, info: Mapping[str, Any] | None = None,
               exact: Mapping[str, Any] | None = None) -> None:
        """Write the planned observations as the entries of a StepResponse's ``observations`` map (``out``);
        ``info`` and ``exact`` (:func:`~dmrpc_gym.protocol.fidelity.exact_step`) go as their hidden
        observations when asked for and not empty."""
        flat = None
        if plan.env:
            try:
                flat = self.obs_codec.flatten(observation)
            except (ValueError, TypeError) as exc:
                raise status.internal(f"the env's observation does not fit its space: {exc}") from None
        for uid, kind, name, dt in plan.items:
            if kind == KIND_ENV:
                try:
                    out.add(uid, flat[name], dt)
                except KeyError:
                    raise status.internal(f"the env's observation has no value for {name!r}") from None
                except (ValueError, TypeError) as exc:
                    raise status.internal(f"the env's observation {name!r} does not fit its spec: {exc}") from None
            elif kind == KIND_REWARD:
                out.add_double(uid, reward) if dt == pb.DOUBLE else out.add(uid, reward, dt)
            elif kind == KIND_DISCOUNT:
                out.add_double(uid, discount) if dt == pb.DOUBLE else out.add(uid, discount, dt)
            elif kind == KIND_INFO:
                if info:
                    out.add_bytes(uid, self.info_tensor(info))
            elif kind == KIND_EXACT:
                if exact:
                    out.add_bytes(uid, info_tensor_bytes(pack_info(exact)))
            else:
                out.add(uid, self._frame(render), pb.UINT8)

    async def answer(self, plan: _Plan, out: StepAnswer, observation: Any, reward: float, discount: float,
                     lane: Lane, render: Callable[[], Any] | None, info: Mapping[str, Any] | None = None,
                     exact: Mapping[str, Any] | None = None) -> None:
        """Write ``out``'s planned observations; a frame asked for is rendered on the env's ``lane`` first.

        Callers skip it (calling :meth:`encode` themselves) when ``plan.rgb`` is false: an await
        is a measurable part of a small step.
        """
        if plan.rgb:
            render = await rendered(lane, render)
        self.encode(plan, out, observation, reward, discount, render, info, exact)

    def info_tensor(self, info: Mapping[str, Any]) -> bytes:
        """The serialized Tensor that carries ``info`` (see :mod:`dmrpc_gym.protocol.info`)."""
        return info_tensor_bytes(self._info_text(info))

    def _info_text(self, info: Mapping[str, Any]) -> str:
        """``info`` as it travels; a key whose value cannot cross is logged once (the client says so too)."""
        text = pack_info(info)
        if DROPPED in text:
            for key in set(dropped_keys(unpack_info(text))) - self._dropped:
                self._dropped.add(key)
                log.warning("%s: info[%r] cannot cross the wire (numbers, strings, numpy arrays and "
                            "dicts / lists of them can); the client is told it was left out", self._who, key)
        return text

    def _frame(self, render: Callable[[], Any] | None) -> np.ndarray:
        if render is None:
            raise status.internal("no frame to render")
        try:
            frame = np.asarray(render())
        except Exception as exc:  # noqa: BLE001 - the env's error is the answer
            raise status.internal(f"render() raised {type(exc).__name__}: {exc}") from None
        if frame.ndim == 3 and frame.shape[2] == 4:
            frame = frame[:, :, :3]
        if frame.dtype != np.uint8 or frame.shape != self.rgb_shape:
            raise status.internal(f"render() returned {frame.dtype} {frame.shape}; the RGB spec "
                                  f"is uint8 {self.rgb_shape}")
        return frame


def sequence_state(terminated: bool, truncated: bool) -> tuple[int, float]:
    """An env's step flags as dm_env_rpc's ``(state, discount)``.

    >>> sequence_state(True, False) == (pb.TERMINATED, 0.0)
    True
    """
    if terminated:
        return pb.TERMINATED, 0.0
    return (pb.INTERRUPTED if truncated else pb.RUNNING), 1.0
