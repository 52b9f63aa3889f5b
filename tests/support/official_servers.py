"""In-process dm_env_rpc servers written with the OFFICIAL ``dm-env-rpc`` package only.

They are the third-party peer that proves our client works with servers we
did not write: nothing here imports ``dmrpc_gym``. Every action a server
receives is echoed back as the observation ``echo.<action name>`` (same spec,
the tensor copied verbatim), so a test can check that packing is exact.

    with start_official_server(UNUSUAL_SPECS, episode_length=3) as server:
        ...  # connect to server.address ("127.0.0.1:PORT")

Spec definitions are ``name -> dict(dtype=..., shape=[...], min=..., max=...,
kind="action" | "observation")`` (kind defaults to "observation"; dtype is a
numpy dtype or its name, ``"str"`` for strings, or an official ``DataType``).
Besides them every server observes ``reward`` and ``discount`` (DOUBLE scalars).

Behaviour (per connection):
- CreateWorld: settings ``seed`` only (anything else -> INVALID_ARGUMENT);
  worlds are named ``world-1``, ``world-2``... JoinWorld accepts a created
  world or ``""`` (the default world) and any join settings (recorded).
- Step: from a non-RUNNING state (after join, reset, or the end of a
  sequence) the actions are ignored and a new sequence starts. Each RUNNING
  step records the actions (``server.received``) and counts; after
  ``episode_length`` of them the state is TERMINATED (or INTERRUPTED with
  ``end_with="interrupted"``). Reward is the step number within the sequence,
  discount 0.0 on TERMINATED, else 1.0. Unknown action or observation UIDs
  -> INVALID_ARGUMENT.
- Reset (settings ``seed`` only), ResetWorld, LeaveWorld, DestroyWorld
  (FAILED_PRECONDITION while the calling connection is joined to it).
- ``error_at_step=k``: the k-th StepRequest on each connection is answered
  with an error (``error_code``, ``error_message``); the stream stays open.
- ``unavailable_first=k``: the first k streams end with gRPC status UNAVAILABLE
  once their first request arrives (a server that reports ready too early, as
  DeepMind's loaders expect); ``server.refused`` counts them.
- ``unavailable_answers=k``: the first k requests are answered with an UNAVAILABLE
  error (the stream stays open); ``server.refused`` counts them too.
"""
from __future__ import annotations

import concurrent.futures as cf
import itertools
import threading
from typing import Any, Callable, Mapping

import grpc
import numpy as np
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm
from dm_env_rpc.v1 import dm_env_rpc_pb2_grpc, tensor_spec_utils, tensor_utils
from google.rpc import code_pb2, status_pb2

__all__ = ["UNUSUAL_SPECS", "OfficialServer", "start_official_server", "official_specs", "default_value"]

ACTION_UID_BASE = 101        # UIDs deliberately neither 0-based nor shared between the two maps
OBSERVATION_UID_BASE = 501

#: The awkward spec set: several are actions, so the echo proves how they are packed.
UNUSUAL_SPECS: dict[str, dict[str, Any]] = {
    # actions
    "aim": dict(kind="action", dtype="float32", shape=[3], min=[-1.0, -2.0, -3.0], max=[1.0, 2.0, 3.0]),
    "paddle": dict(kind="action", dtype="int32", shape=[], min=-1, max=1),
    "levels": dict(kind="action", dtype="uint8", shape=[3], min=0, max=[1, 5, 9]),
    "throttle": dict(kind="action", dtype="float64", shape=[], min=0.0, max=1.0),
    "grid": dict(kind="action", dtype="int8", shape=[2, 3],
                 min=[[-1, -2, -3], [0, 0, 0]], max=[[1, 2, 3], [4, 5, 6]]),
    "buttons": dict(kind="action", dtype="bool", shape=[4]),
    "say": dict(kind="action", dtype="str", shape=[]),
    "arm.x": dict(kind="action", dtype="float32", shape=[], min=-1.0, max=1.0),
    "arm.y": dict(kind="action", dtype="float32", shape=[], min=-1.0, max=1.0),
    # observations
    "camera": dict(dtype="uint8", shape=[8, 6, 3]),
    "score": dict(dtype="int64", shape=[]),
    "flags": dict(dtype="bool", shape=[2, 2]),
    "title": dict(dtype="str", shape=[]),
    "pos.x": dict(dtype="float64", shape=[], min=-10.0, max=10.0),
    "pos.y": dict(dtype="float64", shape=[], min=-10.0, max=10.0),
    "points": dict(dtype="float32", shape=[-1, 2]),
}

_NAMED_DTYPES = {"str": dm.STRING, "string": dm.STRING, "proto": dm.PROTO}


def _data_type(dtype: Any) -> int:
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return dtype
    if isinstance(dtype, str) and dtype in _NAMED_DTYPES:
        return _NAMED_DTYPES[dtype]
    return tensor_utils.np_type_to_data_type(np.dtype(dtype))


def _make_spec(name: str, definition: Mapping[str, Any]) -> dm.TensorSpec:
    spec = dm.TensorSpec(name=name, dtype=_data_type(definition["dtype"]),
                         shape=list(definition.get("shape", [])))
    lo, hi = definition.get("min"), definition.get("max")
    if lo is not None or hi is not None:
        tensor_spec_utils.set_bounds(spec, lo, hi)
    return spec


def official_specs(specs: Mapping[str, Mapping[str, Any]], echo: bool = True
                   ) -> tuple[dict[int, dm.TensorSpec], dict[int, dm.TensorSpec]]:
    """(action specs, observation specs) by UID, as the server built from ``specs`` announces them."""
    actions, observations = {}, {}
    for name, definition in specs.items():
        kind = definition.get("kind", "observation")
        if kind not in ("action", "observation"):
            raise ValueError(f"spec {name!r}: kind must be 'action' or 'observation', not {kind!r}")
        target = actions if kind == "action" else observations
        target[name] = _make_spec(name, definition)
    if echo:
        for name, spec in actions.items():
            copy = dm.TensorSpec()
            copy.CopyFrom(spec)
            copy.name = f"echo.{name}"
            observations[copy.name] = copy
    for name in ("reward", "discount"):
        observations[name] = dm.TensorSpec(name=name, dtype=dm.DOUBLE)
    return ({ACTION_UID_BASE + i: s for i, s in enumerate(actions.values())},
            {OBSERVATION_UID_BASE + i: s for i, s in enumerate(observations.values())})


def default_value(spec: dm.TensorSpec, step: int) -> np.ndarray:
    """A deterministic value of ``spec`` that changes with ``step`` (within the bounds)."""
    np_type = tensor_utils.data_type_to_np_type(spec.dtype)
    shape = [(step % 3) + 1 if d < 0 else d for d in spec.shape]
    size = int(np.prod(shape))
    if spec.dtype == dm.STRING:
        return np.full(shape, f"step {step} ✓", dtype=object)
    if spec.dtype == dm.BOOL:
        return ((np.arange(size) + step) % 2 == 0).reshape(shape)
    ramp = np.arange(size).reshape(shape) + step
    if spec.HasField("min") and spec.HasField("max"):
        bounds = tensor_spec_utils.bounds(spec)
        lo = np.broadcast_to(np.asarray(bounds.min, np.float64), shape)
        hi = np.broadcast_to(np.asarray(bounds.max, np.float64), shape)
        if np.issubdtype(np_type, np.integer):
            return (lo + ramp % (hi - lo + 1)).astype(np_type)
        return (lo + (hi - lo) * ((ramp % 5) / 4)).astype(np_type)
    if np.issubdtype(np_type, np.integer):
        return (ramp % 256).astype(np_type)
    return (ramp * 0.5).astype(np_type)


def _error(code: int, message: str) -> dm.EnvironmentResponse:
    return dm.EnvironmentResponse(error=status_pb2.Status(code=code, message=message))


class _Failure(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class OfficialServer(dm_env_rpc_pb2_grpc.EnvironmentServicer):
    """A dm_env_rpc server over the official messages; see the module doc for its behaviour.

    Attributes:
        address: "127.0.0.1:PORT". port: the port.
        action_specs / observation_specs: UID -> official ``TensorSpec``.
        received: one dict (action name -> array, unpacked with the official
            ``tensor_utils``) per RUNNING step, across connections, in order.
        worlds: world name -> its CreateWorld settings (unpacked).
        join_settings: the settings of every JoinWorld, in order.
    """

    def __init__(self, specs: Mapping[str, Mapping[str, Any]], *, episode_length: int = 10,
                 echo: bool = True, end_with: str = "terminated", error_at_step: int | None = None,
                 error_code: int = code_pb2.INTERNAL, error_message: str = "injected failure",
                 observation_fn: Callable[[str, dm.TensorSpec, int], Any] | None = None,
                 max_workers: int = 16, unavailable_first: int = 0, unavailable_answers: int = 0,
                 bind: str = "127.0.0.1:0"):
        if end_with not in ("terminated", "interrupted"):
            raise ValueError(f"end_with must be 'terminated' or 'interrupted', not {end_with!r}")
        self.action_specs, self.observation_specs = official_specs(specs, echo)
        self._action_names = {uid: s.name for uid, s in self.action_specs.items()}
        self._echo_uid = {s.name[len("echo."):]: uid for uid, s in self.observation_specs.items()
                          if echo and s.name.startswith("echo.")}
        self.episode_length = episode_length
        self.end_state = dm.TERMINATED if end_with == "terminated" else dm.INTERRUPTED
        self.error_at_step = error_at_step
        self.error_code, self.error_message = error_code, error_message
        self.observation_fn = observation_fn or (lambda name, spec, step: default_value(spec, step))
        self.unavailable_first, self.unavailable_answers = unavailable_first, unavailable_answers
        self.refused = 0
        self.received: list[dict[str, np.ndarray]] = []
        self.worlds: dict[str, dict[str, Any]] = {}
        self.join_settings: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._world_numbers = itertools.count(1)
        self._server = grpc.server(cf.ThreadPoolExecutor(max_workers=max_workers))
        dm_env_rpc_pb2_grpc.add_EnvironmentServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port(bind)
        self.address = bind if bind.startswith("unix:") else f"127.0.0.1:{self.port}"
        self._server.start()

    # -- lifecycle --------------------------------------------------------------

    def stop(self, grace: float | None = None) -> None:
        """Stop serving (idempotent); open streams are cancelled."""
        self._server.stop(grace).wait(10)

    def __enter__(self) -> "OfficialServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the stream ----------------------------------------------------------------

    def Process(self, request_iterator, context):  # noqa: N802 (gRPC's name)
        with self._lock:
            refuse = self.refused < self.unavailable_first
            self.refused += refuse
        if refuse:
            next(request_iterator, None)
            context.abort(grpc.StatusCode.UNAVAILABLE, "the server is warming up")
        conn = {"world": None, "running": False, "seq_step": 0, "steps": 0, "echo": {}}
        for request in request_iterator:
            with self._lock:
                refuse = self.refused < self.unavailable_answers
                self.refused += refuse
            if refuse:
                yield _error(code_pb2.UNAVAILABLE, "the world is not ready yet")
                continue
            kind = request.WhichOneof("payload")
            handler = getattr(self, f"_{kind}", None)
            if handler is None:
                yield _error(code_pb2.UNIMPLEMENTED, f"{kind} is not supported by this server")
                continue
            try:
                yield handler(getattr(request, kind), conn)
            except _Failure as failure:
                yield _error(failure.code, str(failure))

    @staticmethod
    def _settings(settings, allowed: tuple[str, ...], what: str) -> dict[str, Any]:
        unknown = sorted(set(settings) - set(allowed))
        if unknown:
            raise _Failure(code_pb2.INVALID_ARGUMENT,
                           f"{what}: unknown settings {unknown}; allowed: {list(allowed)}")
        return {k: tensor_utils.unpack_tensor(v) for k, v in settings.items()}

    def _specs(self) -> dm.ActionObservationSpecs:
        specs = dm.ActionObservationSpecs()
        for uid, spec in self.action_specs.items():
            specs.actions[uid].CopyFrom(spec)
        for uid, spec in self.observation_specs.items():
            specs.observations[uid].CopyFrom(spec)
        return specs

    def _create_world(self, request, conn):
        settings = self._settings(request.settings, ("seed",), "create_world")
        with self._lock:
            name = f"world-{next(self._world_numbers)}"
            self.worlds[name] = settings
        return dm.EnvironmentResponse(create_world=dm.CreateWorldResponse(world_name=name))

    def _join_world(self, request, conn):
        if conn["world"] is not None:
            raise _Failure(code_pb2.FAILED_PRECONDITION, f"already joined to world {conn['world']!r}")
        with self._lock:
            if request.world_name and request.world_name not in self.worlds:
                raise _Failure(code_pb2.NOT_FOUND, f"no world named {request.world_name!r}")
            self.join_settings.append({k: tensor_utils.unpack_tensor(v) for k, v in request.settings.items()})
        conn.update(world=request.world_name, running=False, seq_step=0, echo={})
        return dm.EnvironmentResponse(join_world=dm.JoinWorldResponse(specs=self._specs()))

    def _step(self, request, conn):
        conn["steps"] += 1
        if conn["world"] is None:
            raise _Failure(code_pb2.FAILED_PRECONDITION, "step before join_world")
        if self.error_at_step is not None and conn["steps"] == self.error_at_step:
            raise _Failure(self.error_code, self.error_message)
        for uid in request.actions:
            if uid not in self.action_specs:
                raise _Failure(code_pb2.INVALID_ARGUMENT, f"unknown action UID {uid}")
        for uid in request.requested_observations:
            if uid not in self.observation_specs:
                raise _Failure(code_pb2.INVALID_ARGUMENT, f"unknown observation UID {uid}")
        if not conn["running"]:
            conn.update(running=True, seq_step=0)   # a new sequence: the actions are ignored
            state = dm.RUNNING
        else:
            actions = {}
            for uid, tensor in request.actions.items():
                name = self._action_names[uid]
                actions[name] = tensor_utils.unpack_tensor(tensor)
                stored = dm.Tensor()
                stored.CopyFrom(tensor)
                conn["echo"][name] = stored
            with self._lock:
                self.received.append(actions)
            conn["seq_step"] += 1
            state = dm.RUNNING
            if conn["seq_step"] >= self.episode_length:
                state = self.end_state
                conn["running"] = False
        step = conn["seq_step"]
        response = dm.EnvironmentResponse(step=dm.StepResponse(state=state))
        observations = response.step.observations
        for uid in request.requested_observations:
            spec = self.observation_specs[uid]
            name = spec.name
            if name == "reward":
                observations[uid].CopyFrom(tensor_utils.pack_tensor(float(step), dm.DOUBLE))
            elif name == "discount":
                discount = 0.0 if state == dm.TERMINATED else 1.0
                observations[uid].CopyFrom(tensor_utils.pack_tensor(discount, dm.DOUBLE))
            elif name.startswith("echo.") and name[len("echo."):] in self._echo_uid:
                echoed = conn["echo"].get(name[len("echo."):])
                if echoed is None:
                    echoed = tensor_utils.pack_tensor(default_value(spec, 0), spec.dtype)
                observations[uid].CopyFrom(echoed)
            else:
                value = self.observation_fn(name, spec, step)
                observations[uid].CopyFrom(value if isinstance(value, dm.Tensor)   # as given, even a lie
                                           else tensor_utils.pack_tensor(value, spec.dtype))
        return response

    def _reset(self, request, conn):
        if conn["world"] is None:
            raise _Failure(code_pb2.FAILED_PRECONDITION, "reset before join_world")
        self._settings(request.settings, ("seed",), "reset")
        conn.update(running=False, seq_step=0)
        return dm.EnvironmentResponse(reset=dm.ResetResponse(specs=self._specs()))

    def _reset_world(self, request, conn):
        settings = self._settings(request.settings, ("seed",), "reset_world")
        with self._lock:
            if request.world_name and request.world_name not in self.worlds:
                raise _Failure(code_pb2.NOT_FOUND, f"no world named {request.world_name!r}")
            if request.world_name:
                self.worlds[request.world_name].update(settings)
        if conn["world"] == request.world_name:
            conn.update(running=False, seq_step=0)
        return dm.EnvironmentResponse(reset_world=dm.ResetWorldResponse())

    def _leave_world(self, request, conn):
        conn.update(world=None, running=False, seq_step=0)
        return dm.EnvironmentResponse(leave_world=dm.LeaveWorldResponse())

    def _destroy_world(self, request, conn):
        if conn["world"] is not None and conn["world"] == request.world_name:
            raise _Failure(code_pb2.FAILED_PRECONDITION,
                           f"cannot destroy world {request.world_name!r} while joined to it")
        with self._lock:
            if request.world_name not in self.worlds:
                raise _Failure(code_pb2.NOT_FOUND, f"no world named {request.world_name!r}")
            del self.worlds[request.world_name]
        return dm.EnvironmentResponse(destroy_world=dm.DestroyWorldResponse())


def start_official_server(specs: Mapping[str, Mapping[str, Any]] = UNUSUAL_SPECS, **kwargs: Any) -> OfficialServer:
    """Start an :class:`OfficialServer` on an OS-chosen loopback port; stop it (or use ``with``) when done.

    Keyword arguments: ``episode_length=10``, ``echo=True``, ``end_with="terminated" | "interrupted"``,
    ``error_at_step=None``, ``error_code=INTERNAL``, ``error_message``, ``observation_fn(name, spec, step)``,
    ``unavailable_first=0``, ``unavailable_answers=0``, ``bind="127.0.0.1:0"`` (or ``"unix:PATH"``).
    """
    return OfficialServer(specs, **kwargs)
