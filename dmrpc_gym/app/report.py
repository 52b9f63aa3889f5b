"""What a dm_env_rpc world offers, as a table: ``dmrpc-gym inspect ADDRESS``.

:func:`inspect_world` joins a world (creating it with ``world_settings``, or
joining ``world_name``), records every action and observation spec (name,
UID, dtype, shape, bounds, the gymnasium space it becomes or why it has none)
and the world's properties, then leaves (and destroys the world it created).
In a multi-agent world (one whose ``agents`` property lists several), every
agent is joined in turn, so the report holds each agent's specs.
:func:`format_report` renders the result as text tables (drawn by ``rich``),
:func:`report_json` as plain JSON-ready data (``dmrpc-gym inspect --json``).
"""
from __future__ import annotations

import dataclasses
import textwrap
from typing import Any, Mapping, Sequence

import numpy as np
from gymnasium.spaces import Space

from dmrpc_gym.protocol.fidelity import FRAME_PROPERTY, SPACES_PROPERTY
from dmrpc_gym.protocol import tensors
from dmrpc_gym.client.connection import Connection, settings_tensors, transport_options
from dmrpc_gym.client.env import close_world, open_world
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.spaces import UnsupportedSpec, space_from_spec
from dmrpc_gym.protocol.bounds import bound_values
from dmrpc_gym.protocol.specs import dtype_label
from dmrpc_gym.protocol.region_refs import large_specs
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server.serving.watching import WATCH_FRAME_PROPERTY, WATCH_PROPERTY

__all__ = ["SpecRow", "PropertyRow", "AgentSpecs", "WorldReport", "inspect_world", "format_report",
           "describe_spec", "bounds_text", "one_line"]

_MAX_VALUE_CHARS = 48


@dataclasses.dataclass
class SpecRow:
    """One action or observation spec and the gymnasium space it becomes (``space``) or why not (``reason``)."""

    uid: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    bounds: str
    space: Space | None
    reason: str | None
    spec: pb.TensorSpec = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass
class PropertyRow:
    """One property: its spec, access flags, and its value when readable (``error`` if reading failed)."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    readable: bool
    writable: bool
    listable: bool
    description: str
    value: Any = None
    error: str | None = None
    #: Why a readable property was not read (:data:`UNREAD`), else None.
    unread: str | None = None


@dataclasses.dataclass
class AgentSpecs:
    """One agent of a multi-agent world and its specs (``error`` when it could not be joined)."""

    name: str
    actions: list[SpecRow]
    observations: list[SpecRow]
    error: str | None = None


@dataclasses.dataclass
class WorldReport:
    """Everything :func:`inspect_world` found; ``properties`` is ``None`` when the server has none to list.

    ``actions`` / ``observations`` are the specs of the agent the report joined as;
    ``agents`` lists every agent of a multi-agent world (else it is empty).
    """

    address: str
    world_name: str
    created: bool
    actions: list[SpecRow]
    observations: list[SpecRow]
    properties: list[PropertyRow] | None
    properties_error: str | None = None
    agents: list[AgentSpecs] = dataclasses.field(default_factory=list)
    #: Whether the report's connection used shared memory for the world's large tensors, or why not
    #: (:attr:`~dmrpc_gym.client.connection.Connection.shared_memory`).
    shared_memory: str = ""
    #: Whether that connection moved from TCP to the server's Unix socket (:attr:`Connection.same_host
    #: <dmrpc_gym.client.connection.Connection.same_host>`).
    same_host: bool = False


# -- one spec ------------------------------------------------------------------------------
def _dtype_text(dt: int) -> str:
    try:
        return dtype_label(tensors.np_dtype(dt))
    except ValueError:
        return tensors.data_type_name(dt)


def _num(x: Any) -> str:
    x = x.item() if isinstance(x, np.generic) else x
    if isinstance(x, float):
        return f"{x:g}"
    return str(x)


def _summary(low: np.ndarray | None, high: np.ndarray | None) -> str:
    lo = "-inf" if low is None else _num(low.min())
    hi = "+inf" if high is None else _num(high.max())
    return f"[{lo} .. {hi}]"


def bounds_text(spec: pb.TensorSpec) -> str:
    """The spec's bounds, compact: ``[-1, 1]``, ``>= 0``, ``[-1 .. 2] per-element (6)``, or ``-``.

    One number per side when the bound is a scalar (broadcast); per-element
    bounds are summarized by their lowest minimum and highest maximum.

    >>> spec = pb.TensorSpec(name="x", dtype=pb.INT32, shape=[3])
    >>> spec.min.int32s.array.extend([-1, 0, 0]); spec.max.int32s.array.extend([1, 2, 2])
    >>> bounds_text(spec)
    '[-1 .. 2] per-element (3)'
    """
    low, high = bound_values(spec.min), bound_values(spec.max)
    if low is None and high is None:
        return "-"
    sizes = [b.size for b in (low, high) if b is not None]
    if max(sizes) > 1:
        return f"{_summary(low, high)} per-element ({max(sizes)})"
    if low is None:
        return f"<= {_num(high[0])}"
    if high is None:
        return f">= {_num(low[0])}"
    return f"[{_num(low[0])}, {_num(high[0])}]"


def describe_spec(uid: int, spec: pb.TensorSpec) -> SpecRow:
    """A :class:`SpecRow` for one spec: its gymnasium space, or the reason it has none."""
    space = reason = None
    try:
        space = space_from_spec(spec)
    except UnsupportedSpec as why:
        reason = f"no gymnasium space: {why}"
    except ValueError as why:
        reason = f"invalid spec: {why}"
    return SpecRow(uid=int(uid), name=spec.name, dtype=_dtype_text(spec.dtype), shape=tuple(spec.shape),
                   bounds=bounds_text(spec), space=space, reason=reason, spec=spec)


# -- properties ------------------------------------------------------------------------------
#: Properties not read for the report, and why: a frame is rendered when read, the spaces'
#: description is what our client reads for itself (:mod:`dmrpc_gym.protocol.fidelity`), and a
#: dashboard's watch is read only after it is written (reading it first is an error the server counts).
UNREAD = {FRAME_PROPERTY: "rendered when read: env.render()",
          SPACES_PROPERTY: "what our client reads for itself",
          WATCH_PROPERTY: "a dashboard's watch: dmrpc-gym dashboard",
          WATCH_FRAME_PROPERTY: "a dashboard's watch: dmrpc-gym dashboard"}


def _properties(connection: Connection) -> list[PropertyRow]:
    from dmrpc_gym.client.properties import Properties
    props = Properties(connection)
    rows: list[PropertyRow] = []
    keys = [""]
    seen = set()
    while keys:   # breadth-first over listable properties
        key = keys.pop(0)
        for name, prop in sorted(props.specs(key).items()):
            if name in seen:
                continue
            seen.add(name)
            spec = prop.spec
            row = PropertyRow(key=name, dtype=_dtype_text(spec.dtype) if spec.dtype else "-",
                              shape=tuple(spec.shape), readable=prop.is_readable, writable=prop.is_writable,
                              listable=prop.is_listable, description=prop.description)
            if prop.is_readable and name in UNREAD:
                row.unread = UNREAD[name]
            elif prop.is_readable:
                try:
                    row.value = props[name]
                except (DmRpcError, KeyError, ValueError) as err:
                    row.error = str(err)
            rows.append(row)
            if prop.is_listable:
                keys.append(name)
    return rows


def _spec_rows_of(specs: pb.ActionObservationSpecs) -> tuple[list[SpecRow], list[SpecRow]]:
    return ([describe_spec(uid, spec) for uid, spec in sorted(specs.actions.items())],
            [describe_spec(uid, spec) for uid, spec in sorted(specs.observations.items())])


def _property_value(rows: list[PropertyRow] | None, key: str) -> Any:
    for row in rows or ():
        if row.key == key and row.error is None:
            return row.value
    return None


def _other_agents(address: str, world_name: str, me: str, everyone: Sequence[str],
                  connect_timeout: float, timeout: float | None, options: Mapping[str, Any]) -> list[AgentSpecs]:
    """Join ``world_name`` as each agent but ``me``, one at a time, and take its specs."""
    found = []
    for name in everyone:
        if name == me:
            continue
        connection = Connection(address, connect_timeout=connect_timeout, timeout=timeout, **options)
        try:
            specs = connection.send(pb.JoinWorldRequest(
                world_name=world_name, settings=settings_tensors({"agent": name}))).specs
            found.append(AgentSpecs(name, *_spec_rows_of(specs)))
            connection.send(pb.LeaveWorldRequest())
        except DmRpcError as err:
            found.append(AgentSpecs(name, [], [], error=str(err)))
        finally:
            connection.close()
    return found


def inspect_world(address: str, *, world_settings: Mapping[str, Any] | None = None,
                  world_name: str | None = None, join_settings: Mapping[str, Any] | None = None,
                  connect_timeout: float = 5.0, timeout: float | None = 10.0, tls: Any = None,
                  token: str | None = None, compression: str | None = None) -> WorldReport:
    """Join a world at ``address`` and report its specs and properties; leaves cleanly.

    Creates a world with ``world_settings`` (destroyed afterwards), or joins the
    existing ``world_name``. An unreachable address raises ``ConnectionError``
    naming it; errors answered by the server raise ``DmRpcError``. ``tls``,
    ``token`` and ``compression`` are the :class:`Connection`'s.

    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> report = inspect_world(embedded_server("catch").address)
    >>> [(row.name, str(row.space)) for row in report.actions]
    [('paddle', 'Discrete(3, start=-1, dtype=int8)')]
    """
    options = transport_options(tls, token, compression)
    connection = Connection(address, connect_timeout=connect_timeout, timeout=timeout, **options)
    created = joined = False
    try:
        name, created = open_world(connection, world_settings, world_name)
        specs = connection.send(pb.JoinWorldRequest(world_name=name,
                                                    settings=settings_tensors(join_settings))).specs
        joined = True
        actions, observations = _spec_rows_of(specs)
        threshold = connection.regions.threshold        # lays the large tensors out, as an env's agent does
        connection.plan_regions(large_specs(dict(specs.actions), threshold), large_specs(dict(specs.observations), threshold))
        properties, properties_error = None, None
        try:
            properties = _properties(connection)
        except DmRpcError as err:
            properties_error = str(err)
        agents: list[AgentSpecs] = []
        everyone = _property_value(properties, "agents")
        me = _property_value(properties, "agent")
        if everyone is not None and me is not None and everyone.size > 1:
            everyone = [str(a) for a in everyone.reshape(-1).tolist()]
            others = {a.name: a for a in _other_agents(address, name, str(me.item()), everyone,
                                                         connect_timeout, timeout, options)}
            mine = AgentSpecs(str(me.item()), actions, observations)
            agents = [mine if agent == mine.name else others[agent] for agent in everyone]
        return WorldReport(address=address, world_name=name, created=created, actions=actions,
                           observations=observations, properties=properties,
                           properties_error=properties_error, agents=agents,
                           shared_memory=connection.shared_memory, same_host=connection.same_host)
    finally:
        if joined and not connection.closed:
            try:
                connection.send(pb.LeaveWorldRequest())
            except Exception:
                pass
        if created:
            close_world(connection, name)
        connection.close()


# -- text ---------------------------------------------------------------------------------
def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ",
           width: int | None = None, wrapped: int = 2) -> list[str]:
    """``rows`` under ``headers`` as text lines: a header, a rule, one line per row; with ``width``, the
    last ``wrapped`` columns wrap within their cells so that no line is wider (else none wraps)."""
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), header_style="")
    for i, header in enumerate(headers):
        wraps = width is not None and i >= len(headers) - wrapped
        table.add_column(header, no_wrap=not wraps, overflow="fold" if wraps else "ignore")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))   # Text: brackets in cells are not markup
    room = 100_000 if width is None else max(width - len(indent), 40)
    console = Console(file=io.StringIO(), width=room, color_system=None, highlight=False,
                      force_jupyter=False, force_terminal=False)   # plain text, in Jupyter too
    console.print(table)
    lines = [line.rstrip() for line in console.file.getvalue().splitlines()]
    return [indent + line for line in lines if line]


def _shape_text(shape: tuple[int, ...]) -> str:
    return "()" if not shape else "(" + ", ".join(map(str, shape)) + (",)" if len(shape) == 1 else ")")


def _value_text(value: Any) -> str:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, np.ndarray):
        text = np.array2string(value, threshold=8, separator=", ", max_line_width=10_000)
    else:
        text = repr(value)
    text = one_line(text)
    return text if len(text) <= _MAX_VALUE_CHARS else text[:_MAX_VALUE_CHARS - 3] + "..."


def one_line(text: str) -> str:
    """``text`` with its runs of white space (newlines too) as single spaces."""
    return " ".join(text.split())


def _spec_rows(rows: list[SpecRow]) -> list[list[str]]:
    return [[str(r.uid), r.name, r.dtype, _shape_text(r.shape), r.bounds,
             one_line(str(r.space)) if r.space is not None else r.reason or ""] for r in rows]


_SPEC_HEADERS = ["UID", "name", "dtype", "shape", "bounds", "gymnasium space"]


def _spec_sections(actions: list[SpecRow], observations: list[SpecRow], of: str = "",
                   width: int | None = None) -> list[str]:
    lines: list[str] = []
    for title, rows in (("Actions", actions), ("Observations", observations)):
        lines += ["", f"{title}{of} ({len(rows)})"]
        lines += _table(_SPEC_HEADERS, _spec_rows(rows), width=width) if rows else ["  (none)"]
    return lines


def _same_specs(a: AgentSpecs, b: AgentSpecs) -> bool:
    return _spec_rows(a.actions) == _spec_rows(b.actions) and _spec_rows(a.observations) == _spec_rows(b.observations)


def format_report(report: WorldReport, width: int | None = None) -> str:
    """The report as text tables: actions, observations (per agent in a multi-agent world), properties.
    ``width``: the widest a table's line may be (their last columns wrap: bounds and spaces,
    values and descriptions; the terminal's width from ``dmrpc-gym inspect``); None: never wrapped.

    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> print(format_report(inspect_world(embedded_server("catch").address)))  # doctest: +ELLIPSIS
    World '...' at 127.0.0.1:... (created for this report, destroyed after)
    Shared memory: ...
    <BLANKLINE>
    Actions (1)
      UID  name    dtype  shape  bounds   gymnasium space
      ──────...
      1    paddle  int8   ()     [-1, 1]  Discrete(3, start=-1, dtype=int8)
    ...
    """
    how = "created for this report, destroyed after" if report.created else "joined, left after"
    lines = [f"World {report.world_name!r} at {report.address} ({how})"]
    if report.shared_memory:
        lines.append(f"Shared memory: {report.shared_memory}")
    if report.same_host:
        lines.append("Connection: moved to the server's Unix socket (same host)")
    if report.agents:
        lines += ["", *textwrap.wrap(f"Agents ({len(report.agents)}): {', '.join(a.name for a in report.agents)}",
                                     width or 100_000, subsequent_indent="  ", break_on_hyphens=False)]
        shown: list[AgentSpecs] = []
        for agent in report.agents:
            if agent.error is not None:
                lines += ["", f"Agent {agent.name!r}: could not be joined ({agent.error})"]
                continue
            twin = next((s for s in shown if _same_specs(s, agent)), None)
            if twin is not None:
                lines += ["", f"Agent {agent.name!r}: the same specs as {twin.name!r}"]
                continue
            shown.append(agent)
            lines += _spec_sections(agent.actions, agent.observations, of=f" of {agent.name!r}", width=width)
    else:
        lines += _spec_sections(report.actions, report.observations, width=width)
    special = [n for n in ("reward", "discount") if any(r.name == n for r in report.observations)]
    if special:
        note = (f"({' and '.join(map(repr, special))}: DmRpcEnv's reward/discount by default, "
                "not part of its observation space)")
        lines += textwrap.wrap(note, (width or 100_000) - 2, initial_indent="  ", subsequent_indent="   ")
    lines += [""]
    if report.properties is None:
        lines += [f"Properties: none offered ({report.properties_error})"]
    else:
        lines += [f"Properties ({len(report.properties)})"]
        if report.properties:
            rows = [[p.key, p.dtype, _shape_text(p.shape),
                     ("r" if p.readable else "-") + ("w" if p.writable else "-") + ("l" if p.listable else "-"),
                     (f"error: {p.error}" if p.error else f"(not read: {p.unread})" if p.unread
                      else _value_text(p.value)) if p.readable else "",
                     p.description] for p in report.properties]
            lines += _table(["key", "dtype", "shape", "access", "value", "description"], rows, width=width)
        else:
            lines += ["  (none)"]
    return "\n".join(lines)
