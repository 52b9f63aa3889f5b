"""One agent of a dm_env_rpc world, seen from the client: the piece every env shares.

A ``RemoteAgent`` owns one joined connection. It turns the specs the server
sent into gymnasium spaces, a space-shaped action into a StepRequest, and a
StepResponse into ``(observation, reward, terminated, truncated, info)``.
``DmRpcEnv`` holds one, ``DmRpcVectorEnv`` and ``DmRpcParallelEnv`` hold
several and keep all their steps in flight at once (``submit_step`` / ``receive_step``).

From a dmrpc_gym server the spaces, values and ``info`` are the served env's own and
frames are rendered when asked for (:mod:`dmrpc_gym.protocol.fidelity`); dm_env_rpc's
``state`` and the step's discount are apart from ``info``: :attr:`RemoteAgent.state`, ``last_discount``.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from dmrpc_gym import spaces as _spaces
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.region_refs import large_specs
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.fidelity import EXACT_UID, FIDELITY_FEATURE, FRAME_PROPERTY
from dmrpc_gym.protocol.info import DROPPED, INFO_FEATURE, INFO_UID, dropped_keys, unpack_info, without_dropped
from dmrpc_gym.client.connection import Connection, settings_tensors
from dmrpc_gym.client.fidelity import NOTHING_SAID, ExactSpaces, exactly
from dmrpc_gym.client.scalars import RewardFn, Scalar
from dmrpc_gym.client.states import State
from dmrpc_gym.client.steady_step import action_key, steady_step
from dmrpc_gym.client.properties import Properties
from dmrpc_gym.protocol.spec_table import SpecManager
from dmrpc_gym.protocol.wire import pb

__all__ = ["State", "RemoteAgent", "RewardFn", "select"]


def select(names: Sequence[str], wanted: str | Sequence[str] | None, kind: str) -> tuple[list[str], bool]:
    """The chosen names, and whether a bare (non-Dict) space was asked for.

    ``None`` keeps every name; a ``str`` picks one bare space; a list a Dict subset.
    """
    if wanted is None:
        return list(names), len(names) == 1
    chosen = [wanted] if isinstance(wanted, str) else list(wanted)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise ValueError(f"unknown {kind} {unknown}; the server offers {sorted(names)}")
    return chosen, isinstance(wanted, str)


_STATES = {int(s): s for s in State}
_TERMINATED, _INTERRUPTED = State.TERMINATED, State.INTERRUPTED      # (a step reads them: globals, not lookups)
_MEMO = 256                  # remembered StepRequests per agent, for integer actions and small numeric arrays
# Scalar reward/discount observations of these types are read straight from their Tensor.
_QUICK_DTYPES = (pb.FLOAT, pb.DOUBLE, pb.INT32, pb.INT64, pb.UINT32, pb.UINT64)


class RemoteAgent:
    """A joined dm_env_rpc connection with gymnasium spaces and step/reset logic.

    Args:
        connection: an open :class:`Connection`.
        world_name: the world to join.
        join_settings: JoinWorld settings (Python values, arrays or Tensors).
        observations / actions: ``None`` (all; for observations, all but ``reward``, ``discount``,
            the ones ``reward=`` / ``discount=`` name and the render observation, whatever
            callables read them), a name (one bare space) or a list (Dict subset, any name).
        nested: turn dotted names into nested Dicts.
        reward / discount: an observation name, a callable ``(obs, state)`` (multi-agent:
            ``(obs, state, agent)``), or ``None`` (0.0 / 1.0).
        render_observation: the observation ``render()`` shows on a foreign server (default: ``"RGB"``
            if offered); a dmrpc_gym server renders on demand instead.
        render: request the render observation every step (foreign servers: there is no other way).
        agent: this agent's name, passed to 3-argument reward/discount callables.

    >>> from dmrpc_gym.server import Server
    >>> from dmrpc_gym.worlds.catch import Catch
    >>> with Server(Catch) as server, Connection(server.address) as conn:
    ...     agent = RemoteAgent(conn, conn.send(pb.CreateWorldRequest()).world_name)
    ...     obs, info = agent.reset({"seed": 1})
    ...     obs, reward, terminated, truncated, info = agent.step(np.int8(0))
    ...     agent.action_space, obs.shape, agent.state, agent.last_discount
    (Discrete(3, start=-1, dtype=int8), (10, 10), <State.RUNNING: 1>, 1.0)
    """

    def __init__(self, connection: Connection, world_name: str, join_settings: Mapping[str, Any] | None = None, *,
                 observations: str | Sequence[str] | None = None,
                 actions: str | Sequence[str] | None = None, nested: bool = False,
                 reward: RewardFn = "reward", discount: RewardFn = "discount",
                 render_observation: str | None = None, render: bool = False,
                 agent: str | None = None):
        self.connection = connection
        self.world_name = world_name
        self.agent = agent
        self._options = dict(observations=observations, actions=actions, nested=nested, reward=reward,
                             discount=discount, render_observation=render_observation, render=render)
        response = connection.send(pb.JoinWorldRequest(world_name=world_name,
                                                       settings=settings_tensors(join_settings)))
        self.joined = True
        #: dm_env_rpc's state after the latest step.
        self.state = State.INVALID
        #: The discount of the latest step (``discount=``: an observation, a callable or 1.0).
        self.last_discount = 1.0
        self.frame: np.ndarray | None = None
        self.last_observations: dict[str, np.ndarray] = {}
        #: The exact spaces (and a dm_env's specs) a dmrpc_gym server described, else None.
        #: The served env's exact spaces (a dmrpc_gym server's description), else None.
        self.exact: ExactSpaces | None = None
        # A dmrpc_gym server sends the env's info when asked (dmrpc_gym.protocol.info), and
        # describes its spaces and renders on demand (dmrpc_gym.protocol.fidelity).
        self._carries_info = INFO_FEATURE in connection.server_features
        self._fidelity = FIDELITY_FEATURE in connection.server_features
        self._lost_info: set[str] = set()
        self._specs_bytes: bytes | None = None    # the specs the spaces were built from
        self._apply_specs(response.specs)

    def rejoin(self, connection: Connection, world_name: str, join_settings: Mapping[str, Any] | None = None) -> None:
        """Join ``world_name`` again over a new ``connection`` (the old one was lost), keeping the
        options; a server that now sends other specs rebuilds the spaces with a warning."""
        response = connection.send(pb.JoinWorldRequest(world_name=world_name,
                                                       settings=settings_tensors(join_settings)))
        self.connection, self.world_name = connection, world_name
        self.joined, self.state, self.frame, self.last_observations = True, State.INVALID, None, {}
        features = connection.server_features
        carries_info, fidelity = INFO_FEATURE in features, FIDELITY_FEATURE in features
        if (carries_info, fidelity) != (self._carries_info, self._fidelity):   # another server build
            self._carries_info, self._fidelity, self._specs_bytes = carries_info, fidelity, None
        self._apply_specs(response.specs)
        self.plan_regions()                   # (on the new connection)
        self.steady = self._steady_step()

    # -- specs -> spaces ---------------------------------------------------------
    def _apply_specs(self, specs: pb.ActionObservationSpecs) -> None:
        raw = specs.SerializeToString(deterministic=True)
        if raw == self._specs_bytes:
            return
        first = self._specs_bytes is None
        self._specs_bytes = raw
        o = self._options
        self.specs = SpecManager(specs.actions, specs.observations)
        obs_specs = self.specs.observations.specs
        names = list(obs_specs)
        render_name = o["render_observation"]
        if render_name is None and "RGB" in names and o["observations"] is None:
            render_name = "RGB"
        if render_name is not None and render_name not in names:
            raise ValueError(f"render_observation={render_name!r} names no observation; "
                             f"the server offers {sorted(names)}")
        self.render_name = render_name
        self.reward = Scalar(o["reward"], "reward", 0.0, names, self.agent)
        self.discount = Scalar(o["discount"], "discount", 1.0, names, self.agent)
        if o["observations"] is None:   # the same space whatever reward= / discount= are
            scalars = {"reward", "discount", self.reward.name, self.discount.name}
            candidates = [n for n in names if n not in scalars and n != render_name]
        else:                            # what was named, even an observation a scalar reads
            candidates = names
        chosen, bare = select(candidates, o["observations"], "observations")
        self.observation_space, self.obs_names, self.extra_names = self._space(
            {n: obs_specs[n] for n in chosen}, bare, o["nested"], "observation")
        act_names, act_bare = select(list(self.specs.actions.specs), o["actions"], "actions")
        self.action_space, self.act_names, _ = self._space(
            {n: self.specs.actions.specs[n] for n in act_names}, act_bare, o["nested"], "action")
        self._act_codec = _spaces.ValueCodec(self.action_space, self._bare_name(self.action_space, self.act_names))
        self._obs_codec = _spaces.ValueCodec(self.observation_space,
                                             self._bare_name(self.observation_space, self.obs_names))
        if self._fidelity and o["observations"] is None and o["actions"] is None:
            self._use_exact_spaces()
        # What to ask for every step: everything a callable might read, else what is used.
        wanted = set(names) if (self.reward.fn or self.discount.fn) else (
            set(chosen) | {self.reward.name, self.discount.name} - {None})
        if render_name is not None and render_name not in chosen:
            wanted.discard(render_name)        # rendered only when asked for
            if o["render"] and not (self._fidelity and o["render_observation"] is None):
                wanted.add(render_name)
                if first and not self._fidelity:
                    self._say_frames_cost(render_name, obs_specs[render_name])
        self.requested = sorted(self.specs.observations.uid(n) for n in wanted)
        if self._carries_info:
            self.requested.append(INFO_UID)
        if self._fidelity:
            self.requested.append(EXACT_UID)
        self.plan_regions()
        self._requests: dict[tuple, pb.StepRequest] = {}
        self._quick = {}
        for source in (self.reward, self.discount):
            spec = obs_specs.get(source.name) if source.fn is None and source.name else None
            if spec is not None and not spec.shape and spec.dtype in _QUICK_DTYPES:
                self._quick[self.specs.observations.uid(source.name)] = (source.name, tensors.np_dtype(spec.dtype))
        #: The steady-state step (:class:`~dmrpc_gym.client.steady_step.SteadyStep`), or None where there is none.
        self.steady = self._steady_step()
        if not first:
            warnings.warn(f"the server changed the specs of {self.agent or 'the agent'}; spaces were rebuilt",
                          stacklevel=3)

    def _steady_step(self) -> Any:
        """The steady-state step (:func:`~dmrpc_gym.client.steady_step.steady_step`), but for a connection whose large
        actions go through shared memory (its tries would write each into the region twice)."""
        return steady_step(self) if not self.connection.regions.writes else None

    def plan_regions(self, **shared: Any) -> None:
        """Lay out the large actions and requested observations in the connection's shared memory (where it
        has some: :meth:`Connection.plan_regions`); ``shared``: a vector env's one region and offsets."""
        regions = self.connection.regions
        if regions.nonce is None:
            return
        threshold = regions.threshold
        actions = large_specs({uid: c.spec for uid, c in self.specs.actions.by_uid.items()}, threshold)
        observations = large_specs({uid: c.spec for uid, c in self.specs.observations.by_uid.items()}, threshold,
                                   self.requested)
        self.connection.plan_regions(actions, observations, **shared)
        self._requests = {}                  # (the requests and steady frames memoized hold the targets)
        self.steady = self._steady_step()

    def _use_exact_spaces(self) -> None:
        """Take the served env's own spaces (:class:`~dmrpc_gym.client.fidelity.ExactSpaces`), when usable."""
        self.exact = ExactSpaces.read(Properties(self.connection), self.obs_names, self.act_names)
        if self.exact is not None:
            self.observation_space, self.action_space = self.exact.observation_space, self.exact.action_space
            self._obs_codec, self._act_codec = self.exact.codecs
            self.obs_names, self.act_names = list(self._obs_codec.names), list(self._act_codec.names)

    def _say_frames_cost(self, name: str, spec: pb.TensorSpec) -> None:
        """Say once how a foreign server's frames come, and what they cost: every step carries one."""
        size, who = math.prod(spec.shape) * tensors.np_dtype(spec.dtype).itemsize, self.agent or "the agent"
        warnings.warn(f"render_mode='rgb_array': the server at {self.connection.address} renders nothing on demand "
                      f"(no dmrpc_gym server), so {who}'s frames come from its {name!r} observation "
                      f"({list(spec.shape)}, {size} bytes), sent with every step", stacklevel=5)

    def _space(self, specs: Mapping[str, pb.TensorSpec], bare: bool, nested: bool, kind: str):
        spaces: dict[str, gym.Space] = {}
        left_out = []
        for name, spec in specs.items():
            try:
                spaces[name] = _spaces.space_from_spec(spec, self.connection.max_message_size)
            except _spaces.UnsupportedSpec as why:
                left_out.append(name)
                where = "returned in info" if kind == "observation" else "not sendable through the action space"
                warnings.warn(f"{kind} {name!r} has no faithful gymnasium space ({why}); its values are {where}",
                              stacklevel=4)
        names = list(spaces)
        if bare and len(names) == 1:
            return spaces[names[0]], names, left_out
        return _spaces.dict_space(spaces, nested=nested), names, left_out

    # -- actions ----------------------------------------------------------------
    @staticmethod
    def _bare_name(space: gym.Space, names: list[str]) -> str:
        return "" if isinstance(space, gym.spaces.Dict) else names[0]

    def _pack_actions(self, action: Any, request: pb.StepRequest, pieces: large_tensors.Pieces) -> None:
        """Check ``action`` against the action specs and pack it; ``ValueError`` naming what is wrong."""
        if isinstance(action, Mapping) and not isinstance(self.action_space, gym.spaces.Dict):
            raise ValueError(f"got a dict action with keys {sorted(map(str, action))}, but the action space is "
                             f"{self.action_space}, the single action {self.act_names[0]!r}: "
                             "pass its value itself")
        self.specs.actions.pack(self._act_codec.flatten(action), request.actions, pieces)

    # -- steps ------------------------------------------------------------------
    def step_request(self, action: Any = None) -> tuple[pb.StepRequest, large_tensors.Pieces | None]:
        """The StepRequest for ``action`` (``None``: no actions), checked but not sent, and
        its large actions (:mod:`~dmrpc_gym.protocol.large_tensors`): what ``connection.submit`` takes.

        Multi-connection envs build every request first, so that a bad action
        for one agent is refused before anything is sent for any of them.
        """
        key = action_key(action)
        request = self._requests.get(key) if key is not None else None
        if request is not None:
            return request, None           # Discrete actions, small Box ones: built once, shared (never modified)
        request, pieces = pb.StepRequest(requested_observations=self.requested), large_tensors.Pieces(large_tensors.ACTIONS)
        regions = self.connection.regions
        if regions.region is not None:           # shared memory: where its large tensors lie
            if regions.targets:
                request.MergeFromString(regions.targets)
            pieces.regions = regions if regions.writes else None
        if action is not None:
            self._pack_actions(action, request, pieces)
        if key is not None and len(self._requests) < _MEMO:
            self._requests[key] = request
        return request, pieces or None

    def submit_step(self, action: Any = None) -> None:
        """Send a StepRequest (``action=None`` sends no actions) without waiting."""
        self.connection.submit(*self.step_request(action))

    def receive_step(self) -> tuple[Any, float, bool, bool, dict]:
        """The answer to the oldest ``submit_step``: ``(obs, reward, terminated, truncated, info)``."""
        steady = self.steady              # answers of the learned layout: read at their offsets
        response, large = self.connection.receive_step(steady.decode if steady is not None else None)
        if large is None:
            return steady.wrap(response, steady.state)
        result = self._stepped(response, large)
        return result if steady is None else steady.learn(result)

    def step(self, action: Any = None) -> tuple[Any, float, bool, bool, dict]:
        """Send ``action`` and return the answer, as one call (an interrupt drops its answer)."""
        steady = self.steady                # the steady-state path (dmrpc_gym.client.steady_step)
        result = steady.step(action) if steady is not None and action is not None else None
        if result is None:                   # the general path: its answer read at the offsets where it has
            decode = steady.decode if steady is not None else None     # the learned layout, as receive_step
            response, large = self.connection.send_step(*self.step_request(action), steady=decode)
            if large is None:
                return steady.wrap(response, steady.state)
            result = self._stepped(response, large)
            result = result if steady is None else steady.learn(result)
        return result

    def _stepped(self, response: pb.StepResponse, large: dict) -> tuple[Any, float, bool, bool, dict]:
        state = _STATES.get(response.state) or State(response.state)
        self.state = state
        observations = response.observations
        info_tensor = None                 # the info observation (dmrpc_gym.protocol.info), if sent
        quick = self._quick
        if quick:                          # scalar reward/discount without the general unpacking
            named, rest = {}, {}
            for uid in observations:       # (a protobuf map's items() iterates in Python)
                tensor = observations[uid]
                found = quick.get(uid)
                payload = tensor.WhichOneof("payload") if found is not None else None
                values = getattr(tensor, payload).array if payload is not None else ()
                if len(values) == 1:
                    named[found[0]] = np.array(values[0], found[1])
                else:
                    rest[uid] = tensor
            if self._carries_info:
                info_tensor = rest.pop(INFO_UID, None)
            exact_tensor = rest.pop(EXACT_UID, None) if self._fidelity else None
            if rest or large:
                named.update(self.specs.observations.unpack(rest, large=large))
        else:
            if self._carries_info and INFO_UID in observations:
                info_tensor = observations[INFO_UID]
                del observations[INFO_UID]
            exact_tensor = None
            if self._fidelity and EXACT_UID in observations:
                exact_tensor = observations[EXACT_UID]
                del observations[EXACT_UID]
            named = self.specs.observations.unpack(observations, large=large)
        carried = None if info_tensor is None else self.read_info(info_tensor)
        self.last_observations = named
        result = self.step_result(named, state, carried)
        if exact_tensor is None:
            if self.exact is not None:
                self.exact.said = NOTHING_SAID
            return result
        return exactly(result, exact_tensor, self.exact, self.reward.fn is None and self.reward.name == "reward")

    def read_info(self, tensor: pb.Tensor) -> dict[str, Any] | None:
        """The served env's info from the ``info`` observation (a string tensor: never one of the
        large ones read outside protobuf); None when it cannot be read.

        A value the server could not send, or an info that cannot be read, is said once per key."""
        try:
            text = tensor.strings.array[0]        # (no strings payload: an IndexError)
            info = unpack_info(text)
        except (ValueError, IndexError) as exc:
            self._say_lost("info", f"the server's info could not be read ({exc})")
            return None
        if DROPPED not in text:
            return info
        for key in dropped_keys(info):
            self._say_lost(key, f"info[{key!r}] of {self.agent or 'the served env'} cannot cross the wire "
                                "(numbers, strings, numpy arrays and dicts / lists of them can): it is left out")
        return without_dropped(info)

    def _say_lost(self, key: str, message: str) -> None:
        if key not in self._lost_info:
            self._lost_info.add(key)
            warnings.warn(message, stacklevel=5)

    def step_result(self, named: dict[str, np.ndarray], state: State, carried: dict[str, Any] | None = None):
        if self.render_name is not None and self.render_name in named:
            self.frame = named[self.render_name]
        info: dict[str, Any] = {**carried} if carried else {}
        self.last_discount = self.discount(named, state)
        for name in self.extra_names:
            if name in named:
                info[name] = named[name]
        obs = self._obs_codec.unflatten(named)
        return (obs, self.reward(named, state), state == _TERMINATED, state == _INTERRUPTED, info)

    # -- resets -----------------------------------------------------------------
    def submit_reset(self, settings: Mapping[str, Any] | None = None) -> bool:
        """Send a ResetRequest when one is needed (running, or settings to apply).

        Returns whether one was sent (and so an answer must be received).
        """
        if self.needs_reset(settings):
            self.connection.submit(pb.ResetRequest(settings=settings_tensors(settings)))
            return True
        return False

    def needs_reset(self, settings: Mapping[str, Any] | None = None) -> bool:
        """Whether a new sequence takes a ResetRequest first (running, or settings to apply); else the next
        step starts one."""
        return self.state == State.RUNNING or bool(settings)

    def receive_reset(self) -> None:
        self._apply_specs(self.connection.receive().specs)
        self.state = State.INTERRUPTED

    def reset(self, settings: Mapping[str, Any] | None = None) -> tuple[Any, dict]:
        """Start a new sequence and return its first ``(observation, info)``."""
        if self.submit_reset(settings):
            self.receive_reset()
        obs, _, _, _, info = self.step(None)
        return obs, info

    def current_frame(self, render_mode: str) -> np.ndarray | None:
        """The frame of the current state: rendered now by a dmrpc_gym server (``ValueError`` when
        its env was not built to render, a ``DmRpcError`` with the server's reason when rendering
        fails), else the latest render observation (None before the first step; ``ValueError``
        when the server offers none)."""
        if self._fidelity and self._options["render_observation"] is None:
            try:
                return Properties(self.connection)[FRAME_PROPERTY]
            except KeyError:               # no frame property: the env does not render rgb_array
                raise self.no_frames(render_mode) from None
            except DmRpcError as err:
                if err.code_name != "FAILED_PRECONDITION":
                    raise                  # the env failed to render: the server's reason
                raise self.no_frames(render_mode, err.message) from None
        if self.render_name is None:
            raise self.no_frames(render_mode)
        return None if self.frame is None else np.array(self.frame, copy=True)

    def no_frames(self, render_mode: str, reason: str | None = None) -> ValueError:
        """The error for ``render_mode`` on an agent with no frames: ``reason``, the server's
        answer, or what a dmrpc_gym server says of its env's rendering (``render_failure``)."""
        if reason is None and self.connection.server_software is not None:
            try:
                failure = str(Properties(self.connection)["render_failure"].item())
            except Exception:  # noqa: BLE001 - an older server: nothing more is known
                failure = ""
            reason = f"the server offers none: its env failed to render: {failure}" if failure else \
                ("the served env renders no rgb_array frames" if self._fidelity else None)
        why = f" ({reason})" if reason else ""
        who = f" of agent {self.agent!r}" if self.agent else ""
        return ValueError(f"render_mode={render_mode!r} needs frames or a render observation{who}{why}; pass "
                          "render_observation= naming a uint8 HxWx3 observation "
                          "(dmrpc-gym record: --render-observation NAME)")

    def leave(self, timeout: float = 2.0) -> None:
        """LeaveWorld, best effort and bounded in time."""
        self.last_observations, self.frame = {}, None      # (views of a shared region, with copy=False)
        if not self.joined or self.connection.closed:
            return
        self.joined = False
        self.connection.shorten_timeout(timeout)
        try:
            self.connection.send(pb.LeaveWorldRequest())
        except Exception:
            pass
