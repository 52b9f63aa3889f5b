"""gRPC health checking on our server with grpc-go's own health client (Debian's grpc-go 1.33.3, its
``grpc_health_v1`` package: ``tests/interop/go/health``): Check over TCP, a Unix socket and TLS, the
token and its exemption, NOT_FOUND for another service, and a Watch that sees the drain begin.

Needs the ``dmrpc-go-health`` binary that ``.ci/install_go_peer.sh`` builds, in the folder named by
``DMRPC_GO_PEER_DIR``; skipped without it unless ``DMRPC_REQUIRE_INTEROP=1`` (CI) makes that a failure.
"""
from __future__ import annotations

import subprocess
import threading

import pytest
from interop_peers import built_peers, self_signed

from dmrpc_gym import DmRpcEnv
from dmrpc_gym.protocol.wire import SERVICE
from dmrpc_gym.server import Server
from dmrpc_gym.worlds.catch import Catch

(GO_HEALTH,), pytestmark = built_peers("DMRPC_GO_PEER_DIR", ("dmrpc-go-health",), ".ci/install_go_peer.sh")
TOKEN = "s3cret"


def go_check(address: str, *flags: str) -> str:
    """What ``dmrpc-go-health`` printed for one Check: ``STATUS <name>`` or ``ERROR <code> <message>``."""
    done = subprocess.run([GO_HEALTH, *flags, address], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("how", ["tcp", "unix", "tls"])
def test_go_checks_our_server(how, tmp_path):
    options, flags = {}, []
    if how == "unix":
        options["address"] = f"unix:{tmp_path / 'health.sock'}"
    if how == "tls":
        cert, key = self_signed(tmp_path)
        options["tls"], flags = (cert, key), ["-ca", cert]
    with Server(Catch, **options) as server:
        assert go_check(server.address, *flags) == "STATUS SERVING"
        assert go_check(server.address, *flags, "-service", SERVICE) == "STATUS SERVING"
        unknown = go_check(server.address, *flags, "-service", "no.such.Service")
        assert unknown.startswith("ERROR 5 ") and "no.such.Service" in unknown        # NOT_FOUND


def test_go_check_and_the_token():
    with Server(Catch, token=TOKEN) as server:
        assert go_check(server.address).startswith("ERROR 16 ")                       # UNAUTHENTICATED
        assert go_check(server.address, "-token", TOKEN) == "STATUS SERVING"
    with Server(Catch, token=TOKEN, health_without_token=True) as server:
        assert go_check(server.address) == "STATUS SERVING"


def test_go_watch_sees_the_drain_begin():
    server = Server(Catch).start()
    env = DmRpcEnv(server.address)
    watcher = subprocess.Popen([GO_HEALTH, "-watch", "2", "-wait", "-service", SERVICE, server.address],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    drainer = None
    try:
        env.reset(seed=0)                                     # an episode keeps the drain open
        assert watcher.stdout.readline().strip() == "STATUS SERVING"
        assert watcher.stdout.readline().strip() == "WATCHING"
        drainer = threading.Thread(target=server.drain, args=(60,))
        drainer.start()
        watcher.stdin.write("\n")
        watcher.stdin.flush()
        assert watcher.stdout.readline().strip() == "STATUS NOT_SERVING"
        assert watcher.wait(timeout=60) == 0
    finally:
        env.close()
        if drainer is not None:
            drainer.join(30)
        if watcher.poll() is None:
            watcher.kill()
        watcher.wait(10)
        server.stop()
