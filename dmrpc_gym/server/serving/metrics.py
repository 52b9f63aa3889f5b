"""A server's metrics in Prometheus' text format, on an HTTP port of their own (``Server(metrics_port=...)``,
``dmrpc-gym serve --metrics-port PORT``).

prometheus-client (the ``metrics`` extra) serves them at ``/metrics`` from a
registry of the server's own (not its global one: two servers in one process
each have theirs). Nothing is pushed per step: when Prometheus scrapes, a
collector reads the server's :class:`~dmrpc_gym.server.serving.stats.ServerStats` once,
on the server's event loop, the same numbers ``dmrpc-gym status`` shows.

The series (``kind``: ``gym``, ``parallel``, ``aec`` or ``dm_env``):

- gauges: ``dmrpc_gym_worlds{kind}``, ``dmrpc_gym_agents{kind}`` (joined), ``dmrpc_gym_connections``,
  ``dmrpc_gym_streams``, ``dmrpc_gym_serving`` (1 or 0), ``dmrpc_gym_draining``,
  ``dmrpc_gym_start_time_seconds`` and ``dmrpc_gym_server_info{version, env}``;
- counters: ``dmrpc_gym_steps_total{kind}``, ``dmrpc_gym_resets_total{kind}`` (env resets: episodes
  begun), ``dmrpc_gym_worlds_created_total{kind}``, ``dmrpc_gym_worlds_destroyed_total{kind}``,
  ``dmrpc_gym_errors_total{code}`` (error answers and streams ended with a status other than OK),
  ``dmrpc_gym_received_bytes_total``, ``dmrpc_gym_sent_bytes_total``,
  ``dmrpc_gym_refusals_total{limit}`` (``max_connections``, ``max_streams``, ``max_message_size``,
  ``max_header_list_size``, ``max_worlds``, ``max_worlds_per_connection``);
- histograms: ``dmrpc_gym_step_env_seconds{kind}`` and ``dmrpc_gym_step_server_seconds{kind}``, a
  step's time in the env and in the server (:mod:`~dmrpc_gym.server.serving.stats`).

>>> from dmrpc_gym.server.serving.stats import ServerStats, WorldCounts
>>> stats = ServerStats(timed=True)
>>> counts = WorldCounts("gym"); stats.world_made(counts); counts.record(0.001, 0.0004)
>>> families = {f.name: f for f in StatsCollector(stats).collect()}
>>> [s.value for s in families["dmrpc_gym_steps"].samples if s.labels == {"kind": "gym"}]
[1]
"""
from __future__ import annotations

import logging
from typing import Any, Iterator

from dmrpc_gym._extras import install_hint
from dmrpc_gym.server.serving.stats import KINDS, ServerStats

__all__ = ["MetricsEndpoint", "StatsCollector", "check_metrics_port"]

log = logging.getLogger("dmrpc_gym.server")

_KINDS = tuple(dict.fromkeys(KINDS.values()))


def check_metrics_port(port: Any) -> None:
    """``ValueError`` for a port that is not 0..65535, ``ImportError`` (naming the option and the extra)
    when prometheus-client is not installed; None is no metrics and always passes."""
    if port is None:
        return
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"metrics_port (serve --metrics-port) must be a port number 0..65535, got {port!r}")
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ImportError(f"metrics_port (serve --metrics-port) serves Prometheus metrics through "
                          f"prometheus-client, which is not installed: {install_hint('metrics')}") from None


class StatsCollector:
    """A prometheus-client collector reading the series of one server's stats when scraped."""

    def __init__(self, stats: ServerStats):
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
                                            InfoMetricFamily)
        doc = self._stats.read(histograms=True)
        worlds = {kind: 0 for kind in _KINDS}
        agents = dict(worlds)
        for world in doc["worlds"]:
            worlds[world["kind"]] = worlds.get(world["kind"], 0) + 1
            agents[world["kind"]] = agents.get(world["kind"], 0) + world["agents"]
        yield InfoMetricFamily("dmrpc_gym_server", "The server's software and what it serves",
                               value={"version": doc["server"].partition("/")[2], "env": str(doc["env"])})
        for name, help_text, value in (
                ("connections", "HTTP/2 connections open", doc["connections"]),
                ("streams", "gRPC streams open", doc["streams"]),
                ("serving", "1 while the server takes new worlds, 0 while draining or at its limit of worlds",
                 int(doc["health"]["serving"])),
                ("draining", "1 while the server is stopping (draining its streams)", int(doc["health"]["draining"])),
                ("start_time_seconds", "When the server started, in seconds since the epoch", doc["started"])):
            yield GaugeMetricFamily(f"dmrpc_gym_{name}", help_text, value=value)
        for name, help_text, by_kind in (("worlds", "Worlds held, by env kind", worlds),
                                         ("agents", "Agents joined to the worlds, by env kind", agents)):
            yield _by_kind(GaugeMetricFamily(f"dmrpc_gym_{name}", help_text, labels=["kind"]), by_kind)
        totals = doc["totals"]
        for name, key, help_text in (
                ("steps", "steps", "Steps answered, by env kind"),
                ("resets", "resets", "Env resets (episodes begun), by env kind"),
                ("worlds_created", "created", "Worlds created, by env kind"),
                ("worlds_destroyed", "destroyed", "Worlds destroyed, by env kind")):
            counts = {kind: totals.get(kind, {}).get(key, 0) for kind in (*_KINDS, *totals)}
            yield _by_kind(CounterMetricFamily(f"dmrpc_gym_{name}", help_text, labels=["kind"]), counts)
        errors = CounterMetricFamily("dmrpc_gym_errors", "Requests answered with an error and streams ended with "
                                     "a gRPC status other than OK, by status code", labels=["code"])
        for code, count in sorted(doc["errors"].items()):
            errors.add_metric([code], count)
        yield errors
        refusals = CounterMetricFamily("dmrpc_gym_refusals", "Connections, streams, messages and worlds refused, "
                                       "by the limit that refused them", labels=["limit"])
        for limit, count in sorted(doc["refused"].items()):
            refusals.add_metric([limit], count)
        yield refusals
        yield CounterMetricFamily("dmrpc_gym_received_bytes", "Bytes read from the connections", value=doc["bytes_in"])
        yield CounterMetricFamily("dmrpc_gym_sent_bytes", "Bytes written to the connections", value=doc["bytes_out"])
        histograms = doc.get("histograms")
        if histograms is None:
            return
        bounds = [*(f"{b:g}" for b in histograms["buckets"]), "+Inf"]
        for part, help_text in (("env", "Time of a step in the env's calls, by env kind"),
                                ("server", "Time of a step in the server (the rest of the request), by env kind")):
            family = HistogramMetricFamily(f"dmrpc_gym_step_{part}_seconds", help_text, labels=["kind"])
            for kind, counts in histograms["kinds"].items():
                total = totals.get(kind, {})
                seconds = total.get("env_seconds", 0.0) if part == "env" else \
                    total.get("step_seconds", 0.0) - total.get("env_seconds", 0.0)
                cumulative, running = [], 0
                for bound, count in zip(bounds, counts[part]):
                    running += count
                    cumulative.append((bound, running))
                family.add_metric([kind], cumulative, sum_value=max(seconds, 0.0))
            yield family


def _by_kind(family: Any, counts: dict[str, int]) -> Any:
    for kind, count in counts.items():
        family.add_metric([kind], count)
    return family


class MetricsEndpoint:
    """prometheus-client's HTTP server for one server's :class:`StatsCollector`, on ``host:port`` (0: the OS picks).

    ``OSError`` when the port is taken. :attr:`address` is ``host:port`` with the port it got.
    """

    def __init__(self, stats: ServerStats, host: str, port: int):
        check_metrics_port(port)
        from prometheus_client import CollectorRegistry, start_http_server
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StatsCollector(stats))
        self._httpd, self._thread = start_http_server(port, addr=host, registry=self.registry)
        bound = self._httpd.server_address[1]
        self.address = f"[{host}]:{bound}" if ":" in host and not host.startswith("[") else f"{host}:{bound}"
        log.debug("metrics on http://%s/metrics", self.address)

    @property
    def url(self) -> str:
        """Where Prometheus scrapes: ``http://host:port/metrics``."""
        return f"http://{self.address}/metrics"

    def close(self) -> None:
        """Stop serving and free the port (idempotent)."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
            self._thread.join(5.0)
