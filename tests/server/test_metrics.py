"""The server's Prometheus metrics (issue 34, item 3): read over HTTP from a real server after real
episodes, parsed with prometheus-client's own parser; counts checked against what the clients did."""
from __future__ import annotations

import socket
import sys
import urllib.request

import pytest

prometheus_client = pytest.importorskip("prometheus_client", reason="the metrics extra (prometheus-client)")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import dmrpc_gym  # noqa: E402
import servers  # noqa: E402
from fixed_episodes import LENGTH, Fixed, play  # noqa: E402
from dmrpc_gym.app.cli import main  # noqa: E402
from dmrpc_gym.client.connection import Connection  # noqa: E402
from dmrpc_gym.protocol.errors import DmRpcError  # noqa: E402
from dmrpc_gym.protocol.wire import pb  # noqa: E402
from dmrpc_gym.server import Server  # noqa: E402
from dmrpc_gym.worlds.catch import Catch  # noqa: E402


def scrape(server: Server) -> dict[str, dict[tuple, float]]:
    """``{sample name: {sorted labels: value}}`` of the server's /metrics."""
    text = urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=30).read().decode()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_counts_after_episodes_match_what_the_client_did():
    with servers.start(Fixed, metrics_port=0) as server:
        play(server.address, episodes=4)
        m = scrape(server)
    gym_kind = (("kind", "gym"),)
    # Each episode: the step that starts the sequence (env.reset), then LENGTH steps.
    assert m["dmrpc_gym_steps_total"][gym_kind] == 4 * (LENGTH + 1)
    assert m["dmrpc_gym_resets_total"][gym_kind] == 4
    assert m["dmrpc_gym_steps_total"][(("kind", "parallel"),)] == 0
    assert m["dmrpc_gym_worlds_created_total"][gym_kind] == 1
    assert m["dmrpc_gym_worlds_destroyed_total"][gym_kind] == 1   # the client destroyed it as it closed
    assert m["dmrpc_gym_worlds"][gym_kind] == 0
    for part in ("env", "server"):
        assert m[f"dmrpc_gym_step_{part}_seconds_count"][gym_kind] == 4 * (LENGTH + 1)
        buckets = m[f"dmrpc_gym_step_{part}_seconds_bucket"]
        assert buckets[(("kind", "gym"), ("le", "+Inf"))] == 4 * (LENGTH + 1)
        assert m[f"dmrpc_gym_step_{part}_seconds_sum"][gym_kind] > 0
    assert m["dmrpc_gym_received_bytes_total"][()] > 0 and m["dmrpc_gym_sent_bytes_total"][()] > 0
    assert m["dmrpc_gym_serving"][()] == 1 and m["dmrpc_gym_draining"][()] == 0


def test_gauges_follow_worlds_connections_and_streams():
    with servers.start(Catch, metrics_port=0) as server:
        with Connection(server.address) as first, Connection(server.address) as second:
            world = first.send(pb.CreateWorldRequest()).world_name
            second.send(pb.JoinWorldRequest(world_name=world))
            m = scrape(server)
            assert m["dmrpc_gym_connections"][()] == 2
            assert m["dmrpc_gym_streams"][()] == 2
            assert m["dmrpc_gym_worlds"][(("kind", "gym"),)] == 1
            assert m["dmrpc_gym_agents"][(("kind", "gym"),)] == 1
            second.send(pb.LeaveWorldRequest())
            second.send(pb.DestroyWorldRequest(world_name=world))
        m = scrape(server)
        assert m["dmrpc_gym_worlds"][(("kind", "gym"),)] == 0
        assert m["dmrpc_gym_worlds_destroyed_total"][(("kind", "gym"),)] == 1


def test_multi_agent_worlds_count_as_parallel():
    from dmrpc_gym.worlds.tag import Tag
    with servers.start(Tag, metrics_port=0) as server:
        env = dmrpc_gym.parallel_env(server.address)
        try:
            env.reset(seed=0)
            env.step({agent: 0 for agent in env.agents})
            agents = len(env.possible_agents)
        finally:
            env.close()
        m = scrape(server)
    parallel = (("kind", "parallel"),)
    assert m["dmrpc_gym_steps_total"][parallel] == 2 * agents    # every agent's first step, then one each
    assert m["dmrpc_gym_resets_total"][parallel] == 1
    assert m["dmrpc_gym_worlds_created_total"][parallel] == 1
    assert m["dmrpc_gym_steps_total"][(("kind", "gym"),)] == 0


def test_errors_by_code_and_refusals_by_limit():
    with servers.start(Catch, metrics_port=0, max_worlds=1, token="s3cret") as server:
        with Connection(server.address, token="s3cret") as conn:
            conn.send(pb.CreateWorldRequest())
            with pytest.raises(DmRpcError, match="max_worlds"):
                conn.send(pb.CreateWorldRequest())
            with pytest.raises(DmRpcError, match="no world named"):
                conn.send(pb.JoinWorldRequest(world_name="nowhere"))
        with pytest.raises(DmRpcError, match="UNAUTHENTICATED"):
            Connection(server.address, token="wrong", connect_timeout=None).send(pb.CreateWorldRequest())
        m = scrape(server)
    assert m["dmrpc_gym_refusals_total"] == {(("limit", "max_worlds"),): 1}
    assert m["dmrpc_gym_errors_total"][(("code", "RESOURCE_EXHAUSTED"),)] == 1
    assert m["dmrpc_gym_errors_total"][(("code", "NOT_FOUND"),)] == 1
    assert m["dmrpc_gym_errors_total"][(("code", "UNAUTHENTICATED"),)] == 1
    assert m["dmrpc_gym_serving"][()] == 0           # at its limit of worlds: no new world can be made


def test_a_connection_past_max_connections_counts_as_refused():
    from dmrpc_gym.server import ConnectionLimits
    with servers.start(Catch, metrics_port=0, limits=ConnectionLimits(max_connections=1)) as server:
        with Connection(server.address, shared_memory=False) as conn:     # (stays on TCP: one connection)
            conn.send(pb.CreateWorldRequest())
            host, port = server.address.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=10) as extra:
                extra.settimeout(10)
                assert extra.recv(1) == b""               # accepted and closed at once
            m = scrape(server)
    assert m["dmrpc_gym_refusals_total"][(("limit", "max_connections"),)] == 1


def test_two_servers_in_one_process_have_their_own_metrics():
    with servers.start(Fixed, metrics_port=0) as one, servers.start(Fixed, metrics_port=0) as two:
        play(one.address, episodes=1)
        play(two.address, episodes=2)
        first, second = scrape(one), scrape(two)
    assert one.metrics_address != two.metrics_address
    assert first["dmrpc_gym_steps_total"][(("kind", "gym"),)] == LENGTH + 1
    assert second["dmrpc_gym_steps_total"][(("kind", "gym"),)] == 2 * (LENGTH + 1)


def test_metrics_are_off_by_default_and_then_keep_no_histograms():
    with servers.start(Fixed) as server:
        play(server.address, episodes=1)
        assert server.metrics_address is None
        assert server.stats.timings is None
        assert server.stats.read()["totals"]["gym"]["steps"] == LENGTH + 1   # status still counts


def test_a_busy_metrics_port_is_an_oserror_and_the_server_stops():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = Server(Catch, metrics_port=taken.getsockname()[1])
        with pytest.raises(OSError):
            server.start()
        assert server.wait(0)


def test_bad_metrics_port_is_named():
    with pytest.raises(ValueError, match=r"metrics_port \(serve --metrics-port\) must be a port number"):
        Server(Catch, metrics_port=70000)


def test_without_prometheus_client_the_option_is_named(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)       # `import prometheus_client` fails
    with pytest.raises(ImportError, match=r"--metrics-port.*prometheus-client.*\[metrics\]"):
        Server(Catch, metrics_port=0)
    assert main(["serve", "catch", "--port", "0", "--metrics-port", "0"]) == 1
    err = capsys.readouterr().err
    assert "--metrics-port" in err and "prometheus-client" in err and "[metrics]" in err


def test_serve_prints_where_its_metrics_are(tmp_path):
    from console import Served
    served = Served("catch", tmp_path, "--metrics-port", "0")
    try:
        line = served.process.stdout.readline().strip()
        assert line.startswith("metrics on http://127.0.0.1:") and line.endswith("/metrics")
        with Connection(served.address) as conn:
            conn.send(pb.CreateWorldRequest())
        text = urllib.request.urlopen(line.split(" on ", 1)[1], timeout=30).read().decode()
        created = {tuple(s.labels.items()): s.value for f in text_string_to_metric_families(text)
                   for s in f.samples if s.name == "dmrpc_gym_worlds_created_total"}
        assert created[(("kind", "gym"),)] == 1
    finally:
        assert "Traceback" not in served.stop()
