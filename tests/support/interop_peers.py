"""Independent gRPC peers for the interop tests: a grpclib server and client, certificates, node.

The grpclib server implements dm_env_rpc's ``Process`` minimally (an echo-ish
world: CreateWorld, JoinWorld, Step answering a uint8 observation of a chosen
size) with our generated messages; grpclib speaks HTTP/2 through python-hyper's
``h2``, a stack independent of ours and of grpcio.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import ssl
import subprocess
import threading
from typing import Any

import numpy as np
import pytest

from dmrpc_gym.protocol.wire import METHOD_PATH, pb

HERE = os.path.dirname(os.path.abspath(__file__))


# -- a minimal dm_env_rpc world ---------------------------------------------------------
def specs(obs_size: int = 4) -> pb.ActionObservationSpecs:
    """One uint8 observation ``obs`` of ``obs_size`` elements (uid 1) and an int32 action ``act`` (uid 1)."""
    out = pb.ActionObservationSpecs()
    obs = out.observations[1]
    obs.name, obs.dtype = "obs", pb.UINT8
    obs.shape.append(obs_size)
    act = out.actions[1]
    act.name, act.dtype = "act", pb.INT32
    act.min.int32s.array.append(0)
    act.max.int32s.array.append(9)
    return out


def answer(request: pb.EnvironmentRequest, obs_size: int = 4) -> pb.EnvironmentResponse:
    """The echo world's answer: the observation is ``obs_size`` bytes all equal to the last action."""
    kind = request.WhichOneof("payload")
    response = pb.EnvironmentResponse()
    if kind == "create_world":
        response.create_world.world_name = "echo"
    elif kind == "join_world":
        response.join_world.specs.CopyFrom(specs(obs_size))
    elif kind == "step":
        action = request.step.actions[1].int32s.array
        value = action[0] if len(action) else 0
        response.step.state = pb.RUNNING
        obs = response.step.observations[1]
        obs.shape.append(obs_size)
        obs.uint8s.array = bytes([value]) * obs_size
    elif kind in ("reset", "reset_world", "leave_world", "destroy_world"):
        getattr(response, kind).SetInParent()
        if kind == "reset":
            response.reset.specs.CopyFrom(specs(obs_size))
    else:
        response.error.code, response.error.message = 12, f"{kind} is not served here"
    return response


def built_peers(env_var: str, names: tuple[str, ...], installer: str) -> tuple[list[str], pytest.MarkDecorator]:
    """The paths of the peer binaries ``names`` that ``installer`` builds into the folder ``$env_var``, and
    the mark that skips a test module without them: a failure at import under ``DMRPC_REQUIRE_INTEROP=1``
    (CI), where a missing peer must not pass as a skip."""
    folder = os.environ.get(env_var, "")
    paths = [os.path.join(folder, name) for name in names]
    missing = None if folder else f"{env_var} is not set ({installer} builds the peers and prints it)"
    for path in paths if folder else ():
        if missing is None and not os.access(path, os.X_OK):
            missing = f"{path} is missing: run {installer}"
    if missing and os.environ.get("DMRPC_REQUIRE_INTEROP") == "1":
        raise RuntimeError(f"DMRPC_REQUIRE_INTEROP=1 but {missing}")
    return paths, pytest.mark.skipif(missing is not None, reason=missing or "")


def echo_on_one_connection(address: str, envs: int = 3) -> None:
    """A vector env of ``envs`` sub-envs on the echo world at ``address``: they share one
    connection, and each stream gets its own answers (its own action echoed), step after step."""
    from dmrpc_gym.client.vector import DmRpcVectorEnv

    env = DmRpcVectorEnv(envs, address, seed_setting=None, step_timeout=10.0)
    try:
        assert len({sub.connection.fileno() for sub in env.envs}) == 1
        env.reset()
        for t in range(6):
            actions = (np.arange(envs, dtype=np.int32) * 3 + t) % 10
            obs, *_ = env.step(actions)
            assert (obs == actions[:, None]).all()
    finally:
        env.close()


# -- grpclib server -------------------------------------------------------------------------
class GrpclibServer:
    """A grpclib server of the echo world in a background thread; ``address``; ``stop()``.

    ``keepalive``: seconds between the server's PINGs (its ``_keepalive_time``),
    ``ping_timeout``: how long it waits for the ACK before dropping the connection.
    """

    def __init__(self, *, keepalive: float | None = None, ping_timeout: float = 1.0, obs_size: int = 4,
                 tls: ssl.SSLContext | None = None):
        from grpclib.config import Configuration
        from grpclib.const import Cardinality, Handler

        self.obs_size = obs_size

        async def process(stream) -> None:
            async for request in stream:
                await stream.send_message(answer(request, self.obs_size))

        class Servicer:
            def __mapping__(self):
                return {METHOD_PATH: Handler(process, Cardinality.STREAM_STREAM,
                                             pb.EnvironmentRequest, pb.EnvironmentResponse)}

        config = Configuration(_keepalive_time=keepalive, _keepalive_timeout=ping_timeout,
                               _keepalive_permit_without_calls=True,
                               _http2_max_pings_without_data=0)
        self._loop = asyncio.new_event_loop()
        ready: concurrent.futures.Future = concurrent.futures.Future()

        async def start() -> None:
            from grpclib.server import Server
            self._server = Server([Servicer()], config=config)
            await self._server.start("127.0.0.1", 0, ssl=tls)
            ready.set_result(self._server._server.sockets[0].getsockname()[1])

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(start())
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name="grpclib-server")
        self._thread.start()
        self.port = ready.result(timeout=10)
        self.address = f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        async def stop() -> None:
            self._server.close()
            await asyncio.wait_for(self._server.wait_closed(), 5)
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> GrpclibServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# -- grpclib client -----------------------------------------------------------------------
def grpclib_exchange(address: str, requests: list, *, metadata: dict | None = None,
                     tls: ssl.SSLContext | None = None, path: str = METHOD_PATH) -> list:
    """Send ``requests`` on one grpclib stream to ``address``; the answers, then the GRPCError if one ended it.

    (grpclib cannot close gracefully mid-stream: python-hyper's ``h2`` stops
    reading once it has sent GOAWAY, so graceful close is tested with grpc-js.)
    """
    from grpclib.client import Channel
    from grpclib.const import Cardinality
    from grpclib.exceptions import GRPCError

    host, port = address.rsplit(":", 1)

    async def run() -> list:
        channel = Channel(host, int(port), ssl=tls)
        answers: list = []
        try:
            async with channel.request(path, Cardinality.STREAM_STREAM, pb.EnvironmentRequest,
                                       pb.EnvironmentResponse, metadata=metadata, timeout=20) as stream:
                for i, request in enumerate(requests):
                    await stream.send_message(request, end=i == len(requests) - 1)
                while (answer := await stream.recv_message()) is not None:
                    answers.append(answer)
        except GRPCError as err:
            answers.append(err)
        finally:
            channel.close()
        return answers

    return asyncio.run(run())


# -- certificates ---------------------------------------------------------------------------
def self_signed(tmp_path, host: str = "127.0.0.1") -> tuple[str, str]:
    """A self-signed certificate for ``host`` (``cryptography`` if installed, else ``openssl``): (cert, key)."""
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    try:
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor the openssl command is available")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={host}",
                        "-addext", f"subjectAltName=IP:{host},DNS:localhost"], check=True, capture_output=True)
        return cert, key
    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(private.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host)),
                                                               x509.DNSName("localhost")]), critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(private, hashes.SHA256()))
    with open(cert, "wb") as f:
        f.write(certificate.public_bytes(serialization.Encoding.PEM))
    with open(key, "wb") as f:
        f.write(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return cert, key

