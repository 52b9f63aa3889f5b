"""A grpcio server of our messages whose answers the test scripts (order, payloads, holds, aborts)."""
from __future__ import annotations

import concurrent.futures as cf
import threading

import grpc
import numpy as np

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.wire import METHOD, SERVICE, pb

__all__ = ["ScriptedServer"]


class ScriptedServer:
    """A grpc server speaking our messages; its behaviour per request is set by the test.

    Step requests are answered with an observation 0 holding a running counter and
    an observation 1 echoing action 0, so order and payloads can be checked.
    """

    def __init__(self, credentials=None):
        self.metadata: list[tuple] = []
        self.hold = threading.Event()      # when set, step answers wait for `release`
        self.release = threading.Event()
        self.abort_with: tuple | None = None
        self._server = grpc.server(cf.ThreadPoolExecutor(8))
        handler = grpc.stream_stream_rpc_method_handler(
            self._process, pb.EnvironmentRequest.FromString, pb.EnvironmentResponse.SerializeToString)
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {METHOD: handler})])
        if credentials is None:
            self.port = self._server.add_insecure_port("127.0.0.1:0")
        else:
            self.port = self._server.add_secure_port("127.0.0.1:0", credentials)
        self.address = f"127.0.0.1:{self.port}"
        self._server.start()

    def _process(self, requests, context):
        self.metadata.append(tuple(context.invocation_metadata()))
        count = 0
        for request in requests:
            if self.abort_with is not None:
                context.abort(*self.abort_with)
            response = pb.EnvironmentResponse()
            kind = request.WhichOneof("payload")
            if kind == "step":
                if self.hold.is_set():
                    self.release.wait(10)
                count += 1
                step = response.step
                step.state = pb.RUNNING
                tensors.pack_into(step.observations[0], np.int64(count))
                if 0 in request.step.actions:
                    step.observations[1].CopyFrom(request.step.actions[0])
            elif kind == "create_world":
                if "bad" in request.create_world.settings:
                    response.error.code = 3
                    response.error.message = "unknown world setting 'bad'"
                else:
                    response.create_world.world_name = "w"
            else:
                getattr(response, kind).SetInParent()
            yield response

    def stop(self):
        self._server.stop(grace=None).wait(5)
