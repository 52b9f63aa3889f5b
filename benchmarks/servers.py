"""Trivial dm_env_rpc servers for the benchmarks: the wire and the client are what they measure.

Two servers of one world: an observation ``"observation"`` (a Box of a given
shape and dtype, the same value every step), a ``"reward"`` (DOUBLE) and an
action ``"action"`` (Discrete(2)); it never terminates.

- ``official``: written with the official ``dm-env-rpc`` package and grpcio's
  sync server. Every answer is built once and kept serialized, so the server
  does the least work a Python grpc server can.
- ``ours``: :class:`dmrpc_gym.server.Server` serving :class:`TrivialEnv`.

Run one in a subprocess (what ``bench_steps.py`` does)::

    python benchmarks/servers.py official --shape 84,84,3 --dtype uint8

It prints ``ADDRESS host:port`` and serves until its stdin closes.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["TrivialEnv", "official_server", "ours_server", "spawn", "serve_command", "main"]

TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORLD = "bench"


def _value(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """The observation every step: small, distinct values (so nothing compresses away)."""
    dtype = np.dtype(dtype)
    return (np.arange(int(np.prod(shape)), dtype=np.int64) % 100).astype(dtype).reshape(shape)


class TrivialEnv(gym.Env):
    """Box observation of ``shape``/``dtype`` (constant), Discrete(2) action, reward 1, never ends."""

    metadata = {"render_modes": []}

    def __init__(self, shape: tuple[int, ...] = (4,), dtype: Any = np.float32):
        shape = tuple(int(d) for d in np.atleast_1d(shape))
        self._obs = _value(shape, dtype)
        info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
        low, high = (info.min, info.max) if info else (-np.inf, np.inf)
        self.observation_space = gym.spaces.Box(low, high, shape, np.dtype(dtype))
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs, {}

    def step(self, action):
        return self._obs, 1.0, False, False, {}


def official_server(shape: tuple[int, ...] = (4,), dtype: Any = np.float32, host: str = "127.0.0.1"):
    """Start the official-package server: ``(grpc.Server, "host:port")``."""
    import grpc
    from dm_env_rpc.v1 import dm_env_rpc_pb2 as opb
    from dm_env_rpc.v1 import dm_env_rpc_pb2_grpc, tensor_utils

    specs = opb.ActionObservationSpecs()
    obs_spec = specs.observations[1]
    obs_spec.name = "observation"
    obs_spec.shape.extend(shape)
    obs_spec.dtype = {np.dtype(np.float32): opb.FLOAT, np.dtype(np.float64): opb.DOUBLE,
                      np.dtype(np.uint8): opb.UINT8, np.dtype(np.int32): opb.INT32}[np.dtype(dtype)]
    reward_spec = specs.observations[2]
    reward_spec.name, reward_spec.dtype = "reward", opb.DOUBLE
    action = specs.actions[1]
    action.name, action.dtype = "action", opb.INT32
    action.min.int32s.array.append(0)
    action.max.int32s.array.append(1)
    tensors = {1: tensor_utils.pack_tensor(_value(shape, dtype)), 2: tensor_utils.pack_tensor(1.0)}

    def answer(**payload) -> bytes:
        return opb.EnvironmentResponse(**payload).SerializeToString()

    fixed = {
        "create_world": answer(create_world=opb.CreateWorldResponse(world_name=WORLD)),
        "join_world": answer(join_world=opb.JoinWorldResponse(specs=specs)),
        "reset": answer(reset=opb.ResetResponse(specs=specs)),
        "reset_world": answer(reset_world=opb.ResetWorldResponse()),
        "leave_world": answer(leave_world=opb.LeaveWorldResponse()),
        "destroy_world": answer(destroy_world=opb.DestroyWorldResponse()),
    }
    steps: dict[tuple[int, ...], bytes] = {}   # requested uids -> the serialized answer

    def step_answer(request) -> bytes:
        key = tuple(request.requested_observations)
        found = steps.get(key)
        if found is None:
            step = opb.StepResponse(state=opb.RUNNING)
            for uid in key:
                step.observations[uid].CopyFrom(tensors[uid])
            found = steps[key] = answer(step=step)
        return found

    class Servicer(dm_env_rpc_pb2_grpc.EnvironmentServicer):
        def Process(self, request_iterator, context):
            for request in request_iterator:
                kind = request.WhichOneof("payload")
                if kind == "step":
                    yield step_answer(request.step)
                else:
                    yield fixed[kind]

    server = grpc.server(cf.ThreadPoolExecutor(max_workers=64))
    handler = grpc.stream_stream_rpc_method_handler(
        Servicer().Process, request_deserializer=opb.EnvironmentRequest.FromString,
        response_serializer=None)   # answers are already bytes
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("dm_env_rpc.v1.Environment", {"Process": handler})])
    port = server.add_insecure_port(f"{host}:0")
    server.start()
    return server, f"{host}:{port}"


def ours_server(shape: tuple[int, ...] = (4,), dtype: Any = np.float32):
    """Start :class:`dmrpc_gym.server.Server` serving :class:`TrivialEnv`: ``(server, address)``."""
    import functools

    from dmrpc_gym.server import Server

    server = Server(functools.partial(TrivialEnv, shape=shape, dtype=np.dtype(dtype)), kind="gym").start()
    return server, server.address


def spawn(kind: str, shape: tuple[int, ...] = (4,), dtype: str = "float32",
          timeout: float = 30.0) -> tuple[subprocess.Popen, str]:
    """Start a server in a subprocess: ``(process, address)``; end it with ``process.stdin.close()``."""
    here = os.path.abspath(__file__)
    proc = subprocess.Popen(
        [sys.executable, here, kind, "--shape", ",".join(map(str, shape)), "--dtype", dtype],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        proc.kill()
        raise TimeoutError(f"the {kind} benchmark server did not start within {timeout} s")
    line = proc.stdout.readline().strip()
    if not line.startswith("ADDRESS "):
        proc.kill()
        raise RuntimeError(f"the {kind} benchmark server said {line!r}, expected 'ADDRESS host:port'")
    return proc, line.split()[1]


def serve_command(target: str, *extra: str, tree: str = TREE) -> tuple[subprocess.Popen, str]:
    """``python -m dmrpc_gym serve TARGET --port 0 [EXTRA]`` of the checkout ``tree`` (its package and its
    ``benchmarks`` folder first on the path, paths relative to its root) in a subprocess: ``(process, address)``."""
    path = [tree, os.path.join(tree, "benchmarks"), os.environ.get("PYTHONPATH", "")]
    proc = subprocess.Popen([sys.executable, "-m", "dmrpc_gym", "serve", target, "--port", "0", *extra], cwd=tree,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path))),
                            stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("serving "):
            return proc, line.split(" on ")[-1].strip()
    proc.kill()
    raise RuntimeError(f"dmrpc-gym serve {target} (in {tree}) did not say its address")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["official", "ours"])
    parser.add_argument("--shape", default="4", help="observation shape, comma separated")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    shape = tuple(int(d) for d in args.shape.split(","))
    make = official_server if args.kind == "official" else ours_server
    server, address = make(shape, np.dtype(args.dtype))
    print(f"ADDRESS {address}", flush=True)
    sys.stdin.read()            # serve until the parent closes our stdin (or dies)
    server.stop(0)


if __name__ == "__main__":
    main()
