"""Errors that say what happened (issue 30, item 5), tried as a new user would."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import servers

from dmrpc_gym import DmRpcEnv, DmRpcError
from dmrpc_gym.app.cli import main
from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.worlds.catch import Catch

ROOT = Path(__file__).resolve().parents[2]
FORMS = r"accepted: host:port, \[IPv6\]:port, unix:PATH or unix:///ABSOLUTE/PATH"
AT_ONCE = 1.0                        # seconds within which a refusal counts as at once
PATIENCE = 4.0                       # connect_timeout of the tests that wait


@pytest.mark.parametrize("address, why", [
    ("http://127.0.0.1:40611", r"has a scheme \(http://\).*give '127.0.0.1:40611'"),
    ("dns:///localhost:40611", r"has a scheme \(dns://\).*give 'localhost:40611'"),
    ("127.0.0.1", "is not of the form host:port"),
    ("sim 0:40611", "is not of the form host:port"),
    ("localhost:99999", "is not of the form host:port"),
])
def test_a_malformed_address_is_refused_at_once_naming_the_forms(address, why):
    start = time.monotonic()
    with pytest.raises(ValueError, match=f"{why}.*{FORMS}"):
        DmRpcEnv(address, connect_timeout=PATIENCE)
    assert time.monotonic() - start < AT_ONCE


def test_grpc_targets_are_taken_where_grpcio_connects():
    import grpc
    with servers.start(Catch) as server:
        port = server.address.rsplit(":", 1)[1]
        with Connection(f"dns:///127.0.0.1:{port}", credentials=grpc.local_channel_credentials()) as conn:
            assert conn.send(pb.CreateWorldRequest()).world_name


def test_an_unresolvable_name_is_told_at_once_while_connect_timeout_retries():
    """It was retried 14 times in silence; the first failure's cause now comes as a warning at once."""
    failed: list[BaseException] = []

    def connect() -> None:
        try:
            Connection("nosuchhost.invalid:10000", connect_timeout=PATIENCE)
        except BaseException as exc:  # noqa: BLE001 - looked at below
            failed.append(exc)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        worker = threading.Thread(target=connect, daemon=True)
        start = time.monotonic()
        worker.start()
        while not caught and time.monotonic() - start < AT_ONCE:
            time.sleep(0.01)
        told, still_retrying = time.monotonic() - start, worker.is_alive()
        worker.join(PATIENCE + 5)
    assert caught and told < AT_ONCE and still_retrying, f"no warning within {AT_ONCE} s"
    assert len(caught) == 1 and issubclass(caught[0].category, RuntimeWarning)
    assert "nosuchhost.invalid:10000" in str(caught[0].message) and "connect_timeout" in str(caught[0].message)
    assert isinstance(failed[0], ConnectionError) and "gave up" in str(failed[0])


def test_a_server_that_is_not_up_yet_is_waited_for_in_silence():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ConnectionError, match="gave up"):
            Connection("127.0.0.1:1", connect_timeout=0.3)      # refused: a server still starting
    assert not caught, [str(w.message) for w in caught]


def test_a_message_past_a_size_limit_names_the_option_that_sets_it():
    with servers.start(Catch, max_message_size=1 << 10) as server:
        with Connection(server.address) as conn:
            big = pb.CreateWorldRequest(settings={"blob": tensors.pack(np.zeros(4096, np.uint8))})
            with pytest.raises(DmRpcError, match=r"RESOURCE_EXHAUSTED.*of 1024 bytes \(set by the server's "
                                                 r"max_message_size=, dmrpc-gym serve --max-message-size\)"):
                conn.send(big)
        with Connection(server.address, max_message_size=64) as conn:
            world = conn.send(pb.CreateWorldRequest()).world_name
            with pytest.raises(Exception, match=r"of 64 bytes \(set by max_message_size= of the client\)"):
                conn.send(pb.JoinWorldRequest(world_name=world))


def test_inspect_json_is_rfc_8259_json_with_infinite_bounds_as_strings(capsys):
    """It wrote Infinity, which Node's JSON.parse refuses and jq turns into -1.79e308."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON (RFC 8259)")

    with servers.start("CartPole-v1") as server:
        assert main(["inspect", server.address, "--json"]) == 0
    report = json.loads(capsys.readouterr().out, parse_constant=refuse)
    bounds = report["observations"][0]
    assert "inf" in bounds["max"] and "-inf" in bounds["min"]
    assert [float(x) for x in bounds["max"]][0] == pytest.approx(4.8)


def test_pytest_names_skipped_tests_and_why_in_its_summary(tmp_path):
    """The README says skipped tests are named in the summary: pyproject's addopts has -rs."""
    test = tmp_path / "test_skipping.py"
    test.write_text("import pytest\n\n\ndef test_needs_a_peer():\n    pytest.skip('no such peer here')\n")
    result = subprocess.run([sys.executable, "-m", "pytest", str(test), "-c", str(ROOT / "pyproject.toml"),
                             "--rootdir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert "SKIPPED [1]" in result.stdout and "no such peer here" in result.stdout, result.stdout
