"""``dmrpc-gym inspect --json``: a :class:`~dmrpc_gym.app.report.WorldReport` as plain data.

Bounds are numbers (one for every element) or nested lists in the spec's shape;
property values are JSON values. RFC 8259 JSON has no infinities and no NaN, so
these are written as the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (which
Python's ``float()`` and numpy read back).

>>> _jsonable(np.array([-np.inf, 0.5, np.inf])), _jsonable(np.float32("nan"))
(['-inf', 0.5, 'inf'], 'nan')
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from dmrpc_gym.app.report import SpecRow, WorldReport, inspect_world, one_line  # noqa: F401 (doctest)
from dmrpc_gym.protocol.bounds import bound_values
from dmrpc_gym.protocol.wire import pb

__all__ = ["report_json"]


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float (nested in lists too) written as ``"inf"``, ``"-inf"`` or ``"nan"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return _finite(value.tolist())
    if isinstance(value, np.generic):
        return _finite(value.item())
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return _finite(value)


def _bound_json(value: pb.TensorSpec.Value, shape: tuple[int, ...]) -> Any:
    """A bound as JSON: None, a number (one for every element), or nested lists in the spec's shape."""
    flat = bound_values(value)
    if flat is None:
        return None
    if flat.size == 1:
        return _jsonable(flat[0])
    return _jsonable(flat.reshape(shape) if all(d >= 0 for d in shape) and flat.size == np.prod(shape) else flat)


def _spec_json(row: SpecRow) -> dict[str, Any]:
    return {"uid": row.uid, "name": row.name, "dtype": row.dtype, "shape": list(row.shape),
            "min": _bound_json(row.spec.min, row.shape), "max": _bound_json(row.spec.max, row.shape),
            "space": None if row.space is None else one_line(str(row.space)), "reason": row.reason}


def report_json(report: WorldReport) -> dict[str, Any]:
    """The report as plain data for ``json.dumps``: specs (per agent in a multi-agent world) and properties.

    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> data = report_json(inspect_world(embedded_server("catch").address))
    >>> data["actions"][0]["name"], data["actions"][0]["space"], data["agents"]
    ('paddle', 'Discrete(3, start=-1, dtype=int8)', [])
    """
    properties = None if report.properties is None else [
        {"key": p.key, "dtype": p.dtype, "shape": list(p.shape), "readable": p.readable,
         "writable": p.writable, "listable": p.listable, "description": p.description,
         "value": _jsonable(p.value) if p.readable and p.error is None else None, "error": p.error,
         "unread": p.unread}
        for p in report.properties]
    return {
        "address": report.address, "world_name": report.world_name, "created": report.created,
        "actions": [_spec_json(r) for r in report.actions],
        "observations": [_spec_json(r) for r in report.observations],
        "agents": [{"name": a.name, "actions": [_spec_json(r) for r in a.actions],
                    "observations": [_spec_json(r) for r in a.observations], "error": a.error}
                   for a in report.agents],
        "properties": properties, "properties_error": report.properties_error,
    }
