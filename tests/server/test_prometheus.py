"""A real Prometheus scrapes the server's metrics (issue 34, item 3): Debian's ``prometheus`` binary,
started by the test with a one-second scrape of our metrics port, must return the step counter
through its HTTP API after a few episodes.

Skipped when the binary is missing; ``DMRPC_REQUIRE_PROMETHEUS=1`` (set by ``.ci/run``, which
installs it) makes that a failure.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra (prometheus-client)")

import servers  # noqa: E402
from fixed_episodes import LENGTH, Fixed, play  # noqa: E402

WAIT = 90.0      # seconds Prometheus may take to start, and then to scrape the final count
BINARY = shutil.which("prometheus")


def _missing_binary() -> None:
    why = "Debian's prometheus binary is not installed (apt-get install prometheus)"
    if os.environ.get("DMRPC_REQUIRE_PROMETHEUS") == "1":
        pytest.fail(f"{why}, and DMRPC_REQUIRE_PROMETHEUS=1 requires it")
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return 0, str(err)


def _until(what: str, probe, proc: subprocess.Popen, log_path) -> object:
    deadline = time.monotonic() + WAIT
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited ({proc.returncode}) while waiting for {what}: "
                                 f"{log_path.read_text()[-2000:]}")
        found, last = probe()
        if found is not None:
            return found
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {WAIT:g} s; last: {last}; prometheus said: {log_path.read_text()[-2000:]}")


def test_prometheus_scrapes_the_step_counter(tmp_path):
    if BINARY is None:
        _missing_binary()
    with servers.start(Fixed, metrics_port=0) as server:
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                          "scrape_configs:\n  - job_name: dmrpc_gym\n    static_configs:\n"
                          f"      - targets: ['{server.metrics_address}']\n")
        web = f"127.0.0.1:{_free_port()}"
        log_path = tmp_path / "prometheus.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen([BINARY, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                     f"--web.listen-address={web}"], stdout=log, stderr=subprocess.STDOUT)
        try:
            def ready():
                code, body = _get(f"http://{web}/-/ready")
                return (True if code == 200 else None), (code, body[:200])
            _until("readiness", ready, proc, log_path)
            play(server.address, episodes=3)
            expected = 3 * (LENGTH + 1)

            def query(expression: str):
                def probe():
                    code, body = _get(f"http://{web}/api/v1/query?" + urllib.parse.urlencode({"query": expression}))
                    if code != 200:
                        return None, (code, body[:300])
                    result = json.loads(body)["data"]["result"]
                    values = [float(r["value"][1]) for r in result]
                    return (values[0] if values == [expected] else None), values
                return probe
            steps = _until(f"dmrpc_gym_steps_total == {expected}",
                           query('dmrpc_gym_steps_total{job="dmrpc_gym",kind="gym"}'), proc, log_path)
            assert steps == expected
            code, body = _get(f"http://{web}/api/v1/query?" + urllib.parse.urlencode({"query": 'up{job="dmrpc_gym"}'}))
            assert code == 200 and [r["value"][1] for r in json.loads(body)["data"]["result"]] == ["1"]
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(15)
