"""``dmrpc-gym status ADDRESS``: a running server on one screen (health, worlds, steps per second, connections).

It reads the ``dmrpc_gym.server_status`` property (:mod:`dmrpc_gym.server.serving.stats`) over an
ordinary dm_env_rpc connection, so it reaches the server wherever a client can (a token,
TLS, a Unix socket), without joining a world. A server that does not serve the property (any
other dm_env_rpc server, or an older dmrpc_gym) is told apart from a refusal of the connection.

Rates need two readings: the screen shows the steps per second and the mean step time
(in the env and in all) over the ``interval`` between them; ``interval=0`` takes one reading
and gives the means over each world's life instead.

>>> doc = {"server": "dmrpc-gym/1.0", "env": "CartPole-v1", "uptime": 65.0, "instance": "a",
...        "health": {"serving": True, "draining": False, "why": ""}, "connections": 1, "streams": 1,
...        "bytes_in": 2048, "bytes_out": 4096, "limits": {"max_worlds": 8}, "errors": {}, "refused": {},
...        "totals": {"gym": {"steps": 10, "resets": 1, "created": 1, "destroyed": 0}},
...        "worlds": [{"name": "world-1", "kind": "gym", "agents": 1, "settings": {}, "steps": 10,
...                    "resets": 1, "step_seconds": 0.01, "env_seconds": 0.004, "age": 5.0}]}
>>> rated = with_rates(doc, None)
>>> rated["worlds"][0]["steps_per_second"], rated["worlds"][0]["step_ms"]
(2.0, 1.0)
>>> print(format_status(rated, "h:1").splitlines()[1])
health       SERVING
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from typing import Any, TextIO

from dmrpc_gym.client.connection import Connection
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import pack_any, props_pb, unpack_any
from dmrpc_gym.server.serving.stats import STATUS_PROPERTY

__all__ = ["STATUS_PROPERTY", "StatusReader", "with_rates", "format_status", "watch"]
_MAX_SETTINGS = 40
#: How a server says it has no such property, or no properties extension at all.
_NOT_SERVED = ("NOT_FOUND", "UNIMPLEMENTED", "INVALID_ARGUMENT")


class StatusReader:
    """One connection to a server, reading its status document as often as asked.

    ``ValueError`` (from :meth:`read`) when the server does not serve the status property,
    naming what answered and what is missing; ``ConnectionError`` when it cannot be reached; the
    server's own refusal (UNAUTHENTICATED without the token) as its ``DmRpcError``.
    """

    def __init__(self, address: str, **connection: Any):
        self.address = address
        self._connection = Connection(address, **connection)

    def read(self) -> dict[str, Any]:
        """The server's status document, with ``"clock"``: when it was read (``time.monotonic``)."""
        document = self.read_json(STATUS_PROPERTY)
        document["clock"] = time.monotonic()
        return document

    def read_json(self, key: str) -> Any:
        """The JSON document of property ``key`` (a string property of dmrpc_gym servers)."""
        value = self.read_value(key)
        try:
            return json.loads(str(value.item()))
        except (ValueError, TypeError) as exc:
            raise ValueError(self._not_served(key, f"answered something that is not its JSON ({exc})")) from None

    def read_value(self, key: str) -> Any:
        """Property ``key``'s value (a numpy array); ``ValueError`` when the server does not serve it."""
        request = props_pb.PropertyRequest(read_property=props_pb.ReadPropertyRequest(key=key))
        response = self._ask(key, request, "read_property")
        return tensors.unpack(response.read_property.value)

    def write_value(self, key: str, value: Any) -> None:
        """Write property ``key`` (``value``: what :func:`~dmrpc_gym.protocol.tensors.pack` takes)."""
        request = props_pb.PropertyRequest(write_property=props_pb.WritePropertyRequest(
            key=key, value=tensors.pack(value)))
        self._ask(key, request, "write_property")

    def _ask(self, key: str, request: Any, field: str) -> Any:
        try:
            answer = self._connection.send_extension(pack_any(request))
        except DmRpcError as err:
            if err.code_name not in _NOT_SERVED:
                raise
            raise ValueError(self._not_served(key, f"answered {err.code_name}: {err.message}")) from None
        response = unpack_any(answer, props_pb.PropertyResponse)
        if response is None or not response.HasField(field):
            raise ValueError(self._not_served(key, f"answered with {answer.type_url or 'an empty extension'}"))
        return response

    def _not_served(self, key: str, what: str) -> str:
        software = self._connection.server_software
        who = f"a {software} server" if software else "not a dmrpc_gym server (another dm_env_rpc server)"
        hint = (f"it is older than the {key!r} property: upgrade it" if software else
                f"`dmrpc-gym status` and `dmrpc-gym dashboard` read properties only dmrpc_gym servers serve; "
                f"the metrics or the logs of that server are where to look")
        return (f"{self.address} is {who}: asked for property {key!r}, it {what}; {hint}")

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> "StatusReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def with_rates(now: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    """``now`` with each world's ``steps_per_second``, ``step_ms`` and ``env_ms`` (None without steps) over
    the time since ``before`` (None, or a reading of another run of the server: over each world's life)."""
    if before is not None and before.get("instance") != now.get("instance"):
        before = None
    earlier = {w["name"]: w for w in before["worlds"]} if before is not None else {}
    interval = now["clock"] - before["clock"] if before is not None else None
    worlds = []
    for world in now["worlds"]:
        old = earlier.get(world["name"], {})
        seconds = min(interval, world["age"]) if interval is not None else world["age"]
        steps = world["steps"] - old.get("steps", 0)
        took = world["step_seconds"] - old.get("step_seconds", 0.0)
        env = world["env_seconds"] - old.get("env_seconds", 0.0)
        worlds.append({**world, "steps_per_second": round(steps / seconds, 1) if seconds > 0 else None,
                       "step_ms": round(1000 * took / steps, 3) if steps else None,
                       "env_ms": round(1000 * env / steps, 3) if steps else None})
    return {**now, "worlds": worlds, "interval": interval}


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}d {text}" if days else text


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count:,}" for name, count in sorted(counts.items())) or "none"


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _shared_memory(said: dict[str, Any] | None) -> str:
    """The status line of shared memory: offered or not, and how many streams use it."""
    if not said:
        return "not said (an older server)"
    if not said["offered"]:
        return "not offered (serve --no-shared-memory)"
    return f"offered; {said['streams']:,} streams use it ({_size(said['bytes'])} of regions)"


def format_status(doc: dict[str, Any], address: str, rows: int = 20, width: int = 100) -> str:
    """The screen of ``dmrpc-gym status`` for a reading with rates (:func:`with_rates`): at most ``rows``
    worlds (the busiest first), lines cut to ``width`` characters."""
    health = doc["health"]
    state = "SERVING" if health["serving"] else f"NOT SERVING ({health['why']})"
    totals = doc["totals"].values()
    made, gone = sum(t.get("created", 0) for t in totals), sum(t.get("destroyed", 0) for t in totals)
    steps = sum(t.get("steps", 0) for t in totals)
    worlds = doc["worlds"]
    rate = sum(w["steps_per_second"] or 0.0 for w in worlds)
    over = f"over the last {doc['interval']:.1f} s" if doc.get("interval") else "mean over each world's life"
    limit = doc.get("limits", {}).get("max_worlds")
    lines = [
        f"{doc['server']} at {address}, serving {doc['env']}, up {_duration(doc['uptime'])}",
        f"health       {state}",
        f"connections  {doc['connections']:,} ({doc['streams']:,} streams); in {_size(doc['bytes_in'])}, "
        f"out {_size(doc['bytes_out'])}",
        f"worlds       {len(worlds):,}" + (f" of {limit:,} at most" if limit else "") + f"; made {made:,}, destroyed {gone:,}",
        f"steps        {steps:,} in all; {rate:,.1f} steps/s ({over})",
        f"errors       {_counts(doc['errors'])}",
        f"refused      {_counts(doc['refused'])}",
        f"shared mem   {_shared_memory(doc.get('shared_memory'))}",
    ]
    if worlds:
        shown = sorted(worlds, key=lambda w: (-(w["steps_per_second"] or 0.0), w["name"]))[:max(rows, 1)]
        table = [("WORLD", "KIND", "AGENTS", "STEPS", "STEPS/S", "STEP MS", "ENV MS", "SETTINGS")]
        for w in shown:
            settings = ", ".join(f"{k}={v}" for k, v in w["settings"].items()) or "-"
            if len(settings) > _MAX_SETTINGS:
                settings = settings[:_MAX_SETTINGS - 3] + "..."
            table.append((w["name"], w["kind"], str(w["agents"]), f"{w['steps']:,}",
                          _number(w["steps_per_second"], 1), _number(w["step_ms"], 3), _number(w["env_ms"], 3),
                          settings))
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        lines.append("")
        for row in table:
            cells = [cell.ljust(widths[i]) if i in (0, 1, 7) else cell.rjust(widths[i]) for i, cell in enumerate(row)]
            lines.append("  ".join(cells).rstrip())
        if len(worlds) > len(shown):
            lines.append(f"... and {len(worlds) - len(shown):,} more worlds (--json lists them all)")
    return "\n".join(line[:width] for line in lines)


def watch(reader: Any, address: str, *, interval: float = 1.0, forever: bool = False, as_json: bool = False,
          out: TextIO | None = None) -> None:
    """Read ``reader`` and print the screen (or one JSON document a line); with an ``interval``, read
    twice for the rates; ``forever``: again every ``interval`` seconds until interrupted."""
    out = out or sys.stdout
    live = forever and not as_json and out.isatty()
    before = None
    if interval > 0:
        before = reader.read()
        time.sleep(interval)
    while True:
        now = reader.read()
        rated = with_rates(now, before)
        if as_json:
            rated.pop("clock", None)
            out.write(json.dumps(rated, indent=None if forever else 2) + "\n")
        else:
            size = shutil.get_terminal_size((100, 30))
            screen = format_status(rated, address, rows=max(size.lines - 11, 5) if live else 20, width=size.columns)
            out.write(("\x1b[H\x1b[J" if live else "") + screen + ("\n" if not forever or live else "\n\n"))
        out.flush()
        if not forever:
            return
        before = now
        time.sleep(interval)
