"""A multi-agent dm_env_rpc server written only with the official ``dm-env-rpc`` package.

It is the independent peer for ``DmRpcParallelEnv``: nothing of dmrpc_gym is
imported here. A world (CreateWorld; several may exist at once) has two agents
with different specs, claimed with the join setting ``agent``:

- ``"a"`` observes ``position`` (float32 [3]) and acts with ``move`` (int32 in [0, 2]);
- ``"b"`` observes ``image`` (uint8 [4, 4]) and acts with ``force`` (float32 [2] in [-1, 1]);
- both observe ``reward`` and ``discount`` (float64 scalars).

A sequence starts when every joined agent has asked for it (a step from a
non-running state). Each step of a running agent is held until every running
agent has stepped; then the world advances one tick. Agent ``a`` is TERMINATED
at tick ``a_steps`` (world setting, default 3), agent ``b`` INTERRUPTED at tick
``b_steps`` (default 5); an agent that has finished waits for the others before
its next sequence starts.

Observations tell what happened: ``position = [tick, a's last move, b's last
force[0]]``, ``image`` is ``tick`` everywhere except ``image[0, 0] = a's last move``
and ``image[0, 1] = 100 + 10 * b's force[0]`` (rounded); a's reward is its move, b's
reward the sum of its force; discount is 0 on TERMINATED, else 1.

World setting ``hold_joins=True`` answers a JoinWorld only once both agents
have joined (so a client must send its agents' joins concurrently).
World setting ``hold_on_leave=True`` makes the world wait forever for an agent
that left or disconnected mid-sequence (a server that never gives up on a
missing player), so clients must bound their waits. ``drop(world, agent)``
cancels that agent's stream from the server side, as a crash would.
"""
from __future__ import annotations

import concurrent.futures
import itertools
import threading

import grpc
import numpy as np
from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb
from dm_env_rpc.v1 import dm_env_rpc_pb2_grpc, tensor_utils
from google.rpc import code_pb2, status_pb2

AGENTS = ("a", "b")
_OBS_REWARD, _OBS_DISCOUNT = 2, 3


class _Error(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _spec(name: str, dtype: int, shape=(), low=None, high=None) -> pb.TensorSpec:
    spec = pb.TensorSpec(name=name, dtype=dtype, shape=list(shape))
    field = {pb.DataType.INT32: "int32s", pb.DataType.FLOAT: "floats"}.get(dtype)
    if low is not None:
        getattr(spec.min, field).array[:] = [low]
        getattr(spec.max, field).array[:] = [high]
    return spec


def _specs(agent: str) -> pb.ActionObservationSpecs:
    specs = pb.ActionObservationSpecs()
    if agent == "a":
        specs.observations[1].CopyFrom(_spec("position", pb.DataType.FLOAT, [3]))
        specs.actions[1].CopyFrom(_spec("move", pb.DataType.INT32, [], 0, 2))
    else:
        specs.observations[1].CopyFrom(_spec("image", pb.DataType.UINT8, [4, 4]))
        specs.actions[1].CopyFrom(_spec("force", pb.DataType.FLOAT, [2], -1.0, 1.0))
    specs.observations[_OBS_REWARD].CopyFrom(_spec("reward", pb.DataType.DOUBLE))
    specs.observations[_OBS_DISCOUNT].CopyFrom(_spec("discount", pb.DataType.DOUBLE))
    return specs


def _setting(settings, name: str, default):
    if name not in settings:
        return default
    return tensor_utils.unpack_tensor(settings[name])


class _World:
    """One world: its agents, the step barrier and the sequence logic. Guarded by ``cond``."""

    def __init__(self, name: str, settings):
        unknown = set(settings) - {"a_steps", "b_steps", "hold_on_leave", "hold_joins"}
        if unknown:
            raise _Error(code_pb2.INVALID_ARGUMENT, f"unknown world settings {sorted(unknown)}")
        self.name = name
        self.lengths = {"a": int(_setting(settings, "a_steps", 3)), "b": int(_setting(settings, "b_steps", 5))}
        self.hold_on_leave = bool(_setting(settings, "hold_on_leave", False))
        self.hold_joins = bool(_setting(settings, "hold_joins", False))
        self.cond = threading.Condition()
        self.joined: dict[str, grpc.ServicerContext] = {}
        self.running: set[str] = set()
        self.waiting: dict[str, dict] = {}      # running agent -> its actions this tick
        self.starting: set[str] = set()         # idle agents asking for a new sequence
        self.results: dict[str, pb.StepResponse] = {}
        self.requested: dict[str, list[int]] = {}
        self.tick = 0
        self.last = {"move": 0, "force": np.zeros(2, np.float32)}
        self.destroyed = False

    # -- membership --------------------------------------------------------------
    def join(self, settings, context) -> str:
        unknown = set(settings) - {"agent"}
        if unknown:
            raise _Error(code_pb2.INVALID_ARGUMENT, f"unknown join settings {sorted(unknown)}; expected 'agent'")
        agent = str(_setting(settings, "agent", "")) or next((a for a in AGENTS if a not in self.joined), "")
        if agent not in AGENTS:
            raise _Error(code_pb2.INVALID_ARGUMENT, f"join setting agent={agent!r}; expected one of {AGENTS}")
        if agent in self.joined:
            raise _Error(code_pb2.ALREADY_EXISTS, f"agent {agent!r} of world {self.name!r} is taken")
        self.joined[agent] = context
        while self.hold_joins and len(self.joined) < len(AGENTS):
            if self.destroyed or not context.is_active():
                self.joined.pop(agent, None)
                raise _Error(code_pb2.CANCELLED, "gave up waiting for the other agents to join")
            self.cond.wait(0.05)
        self.cond.notify_all()
        return agent

    def leave(self, agent: str) -> None:
        self.joined.pop(agent, None)
        self.starting.discard(agent)
        self.waiting.pop(agent, None)
        if agent in self.running and self.hold_on_leave:
            return      # the world keeps waiting for it
        self.running.discard(agent)
        self._progress()

    # -- sequences ---------------------------------------------------------------
    def step(self, agent: str, request: pb.StepRequest, context) -> pb.StepResponse:
        self.requested[agent] = list(request.requested_observations)
        if agent in self.running:
            self.waiting[agent] = self._actions(agent, request)
        else:
            self.starting.add(agent)
        self._progress()
        while agent not in self.results:
            if self.destroyed:
                raise _Error(code_pb2.FAILED_PRECONDITION, f"world {self.name!r} was destroyed")
            if not context.is_active():
                raise _Error(code_pb2.CANCELLED, "the client went away")
            self.cond.wait(0.05)
        return self.results.pop(agent)

    def reset(self, agent: str) -> None:
        """ResetRequest: this agent's sequence ends; the others play on."""
        self.running.discard(agent)
        self.waiting.pop(agent, None)
        self._progress()

    def reset_world(self, settings) -> None:
        """ResetWorld: new lengths; held steps are answered INTERRUPTED; everyone restarts."""
        unknown = set(settings) - {"a_steps", "b_steps"}
        if unknown:
            raise _Error(code_pb2.INVALID_ARGUMENT, f"unknown world settings {sorted(unknown)}")
        for name in ("a", "b"):
            self.lengths[name] = int(_setting(settings, f"{name}_steps", self.lengths[name]))
        for agent in list(self.waiting):
            self.results[agent] = self._response(agent, pb.EnvironmentStateType.INTERRUPTED)
        self.waiting.clear()
        self.running.clear()
        self.cond.notify_all()

    def _actions(self, agent: str, request: pb.StepRequest) -> dict:
        actions = {}
        if 1 in request.actions:
            value = np.asarray(tensor_utils.unpack_tensor(request.actions[1]))
            if agent == "a":
                if value.shape != () or not 0 <= int(value) <= 2:
                    raise _Error(code_pb2.INVALID_ARGUMENT, f"action 'move' must be an int32 in [0, 2], not {value}")
                actions["move"] = int(value)
            else:
                if value.shape != (2,) or np.any(np.abs(value) > 1):
                    raise _Error(code_pb2.INVALID_ARGUMENT, f"action 'force' must be float32 [2] in [-1, 1], not {value}")
                actions["force"] = value.astype(np.float32)
        unknown = set(request.actions) - {1}
        if unknown:
            raise _Error(code_pb2.INVALID_ARGUMENT, f"unknown action uids {sorted(unknown)}")
        return actions

    def _progress(self) -> None:
        """Start a sequence or advance a tick when the barrier is complete."""
        if not self.running and self.joined and set(self.joined) <= self.starting:
            self.tick = 0
            self.last = {"move": 0, "force": np.zeros(2, np.float32)}
            self.running = set(self.starting)
            self.starting.clear()
            for agent in self.running:
                self.results[agent] = self._response(agent, pb.EnvironmentStateType.RUNNING)
            self.cond.notify_all()
        elif self.running and self.running <= set(self.waiting):
            self.tick += 1
            for actions in self.waiting.values():
                self.last.update(actions)
            for agent in list(self.waiting):
                ended = self.tick >= self.lengths[agent]
                state = pb.EnvironmentStateType.RUNNING
                if ended:
                    state = pb.EnvironmentStateType.TERMINATED if agent == "a" else pb.EnvironmentStateType.INTERRUPTED
                    self.running.discard(agent)
                self.results[agent] = self._response(agent, state)
            self.waiting.clear()
            self.cond.notify_all()
            self._progress()   # finished agents may now all be waiting to start

    def _response(self, agent: str, state: int) -> pb.StepResponse:
        tick, move, force = self.tick, self.last["move"], self.last["force"]
        if agent == "a":
            main = np.array([tick, move, force[0]], np.float32)
            reward = float(move)
        else:
            main = np.full((4, 4), tick % 256, np.uint8)
            main[0, 0] = move
            main[0, 1] = int(round(100 + 10 * float(force[0])))
            reward = float(np.sum(force))
        if state == pb.EnvironmentStateType.RUNNING and tick == 0:
            reward = 0.0
        values = {1: main, _OBS_REWARD: np.float64(reward),
                  _OBS_DISCOUNT: np.float64(0.0 if state == pb.EnvironmentStateType.TERMINATED else 1.0)}
        response = pb.StepResponse(state=state)
        for uid in self.requested.get(agent, ()):
            if uid not in values:
                raise _Error(code_pb2.INVALID_ARGUMENT, f"unknown observation uid {uid}")
            response.observations[uid].CopyFrom(tensor_utils.pack_tensor(values[uid]))
        return response


class _Servicer(dm_env_rpc_pb2_grpc.EnvironmentServicer):
    def __init__(self, server: "OfficialMultiAgentServer"):
        self.server = server

    def Process(self, request_iterator, context):
        session = {"world": None, "agent": None}
        try:
            for request in request_iterator:
                kind = request.WhichOneof("payload")
                try:
                    payload = self._handle(session, kind, getattr(request, kind), context)
                    response = pb.EnvironmentResponse()
                    getattr(response, kind).CopyFrom(payload)
                except _Error as err:
                    response = pb.EnvironmentResponse(error=status_pb2.Status(code=err.code, message=str(err)))
                yield response
        finally:
            world = session["world"]
            if world is not None:
                with world.cond:
                    world.leave(session["agent"])

    def _handle(self, session, kind, request, context):
        worlds = self.server.worlds
        world = session["world"]
        if kind == "create_world":
            name = f"world_{next(self.server.counter)}"
            worlds[name] = _World(name, request.settings)
            return pb.CreateWorldResponse(world_name=name)
        if kind == "join_world":
            if world is not None:
                raise _Error(code_pb2.FAILED_PRECONDITION, "this connection already joined a world")
            target = worlds.get(request.world_name)
            if target is None:
                raise _Error(code_pb2.NOT_FOUND, f"no world named {request.world_name!r}")
            with target.cond:
                session["agent"] = target.join(request.settings, context)
            session["world"] = target
            return pb.JoinWorldResponse(specs=_specs(session["agent"]))
        if kind == "destroy_world":
            target = worlds.get(request.world_name)
            if target is None:
                raise _Error(code_pb2.NOT_FOUND, f"no world named {request.world_name!r}")
            if target is world:
                raise _Error(code_pb2.FAILED_PRECONDITION, "cannot destroy the world this connection has joined")
            with target.cond:
                target.destroyed = True
                target.cond.notify_all()
            del worlds[request.world_name]
            return pb.DestroyWorldResponse()
        if kind == "reset_world":
            target = worlds.get(request.world_name)
            if target is None:
                raise _Error(code_pb2.NOT_FOUND, f"no world named {request.world_name!r}")
            with target.cond:
                target.reset_world(request.settings)
            return pb.ResetWorldResponse()
        if kind == "leave_world":
            if world is not None:
                with world.cond:
                    world.leave(session["agent"])
                session["world"] = session["agent"] = None
            return pb.LeaveWorldResponse()
        if world is None:
            raise _Error(code_pb2.FAILED_PRECONDITION, f"{kind} before joining a world")
        agent = session["agent"]
        if kind == "step":
            with world.cond:
                return world.step(agent, request, context)
        if kind == "reset":
            if request.settings:
                raise _Error(code_pb2.INVALID_ARGUMENT, f"unknown reset settings {sorted(request.settings)}")
            with world.cond:
                world.reset(agent)
            return pb.ResetResponse(specs=_specs(agent))
        raise _Error(code_pb2.UNIMPLEMENTED, f"{kind} is not supported")


class OfficialMultiAgentServer:
    """The server above on ``127.0.0.1`` at an OS-chosen port; a context manager."""

    def __init__(self, max_workers: int = 64):
        self.worlds: dict[str, _World] = {}
        self.counter = itertools.count(1)
        self._server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers))
        dm_env_rpc_pb2_grpc.add_EnvironmentServicer_to_server(_Servicer(self), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"
        self._server.start()

    def drop(self, world: str, agent: str) -> None:
        """Cancel ``agent``'s stream from the server side, as if its connection broke."""
        target = self.worlds[world]
        with target.cond:
            context = target.joined[agent]
        context.cancel()

    def stop(self) -> None:
        self._server.stop(grace=None).wait(5)

    def __enter__(self) -> "OfficialMultiAgentServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
