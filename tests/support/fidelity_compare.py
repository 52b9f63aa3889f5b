"""How the differential fidelity suite compares (tests/fidelity/test_fidelity.py): exactly.

:func:`differences` walks two values (the served env's and the local env's) and says where they
differ: types (a tuple is no list, a dict no tuple, an array no scalar), dtypes, shapes, keys and
values bit for bit (NaN equals NaN; 0.0 and -0.0 differ). A Python scalar counts as the numpy
scalar of the dtype numpy gives it (``1.0`` is ``np.float64(1.0)``, ``0`` is ``np.int64(0)``):
the wire carries dtypes, not Python types. :func:`spec_differences` does the same for dm_env
specs, :func:`run_differences` for two runs' records.

>>> differences((1, np.float32(2.0)), (1, np.float32(2.5)))
['[1]: np.float32(2.0) where the local env has np.float32(2.5)']
>>> differences({"a": 0.0}, {"a": 0})
["['a']: float 0.0 (float64) where the local env has int 0 (int64)"]
>>> differences(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))
[]
>>> differences(np.array([-0.0]), np.array([0.0]))
['value: 1 of 1 values differ, first at [0]: np.float64(-0.0) where the local env has np.float64(0.0)']
>>> differences(np.array(1.5), np.float64(1.5))
['value: a ndarray (array(1.5)) where the local env has float64 np.float64(1.5)']
>>> differences({"b": 1, "a": 2}, {"a": 2, "b": 1})
["value: keys in the order ['b', 'a'] where the local env has ['a', 'b']"]
>>> differences({"x": [1]}, {"x": (1,)})
["['x']: a list ([1]) where the local env has a tuple ((1,))"]
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["differences", "spec_differences", "run_differences", "first_lines"]


def _scalar_dtype(x: Any) -> np.dtype | None:
    """The dtype of a scalar: a Python scalar counts as the numpy scalar numpy makes of it (the
    wire carries dtypes, not Python types), so ``1.0`` matches ``np.float64(1.0)``; a 0-d
    array is no scalar."""
    if isinstance(x, np.generic):
        return x.dtype
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, enum.Enum):
        return np.asarray(x).dtype
    return None


def _short(x: Any, width: int = 70) -> str:
    if isinstance(x, np.ndarray) and x.size > 8:
        return f"array(shape={x.shape}, dtype={x.dtype})"
    text = repr(x)
    return text if len(text) <= width else text[:width] + "..."


def _same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise bit equality (NaN equals NaN; 0.0 and -0.0 differ)."""
    if a.dtype.kind in "fc":
        same_nan = np.isnan(a) & np.isnan(b)
        av = np.ascontiguousarray(a.reshape(-1)).view(np.uint8).reshape(a.size, -1)
        bv = np.ascontiguousarray(b.reshape(-1)).view(np.uint8).reshape(b.size, -1)
        return same_nan | (av == bv).all(axis=-1).reshape(a.shape)
    if a.dtype.kind in "biuSUV":
        return a == b
    return np.vectorize(lambda x, y: not differences(x, y), otypes=[bool])(a, b)


def differences(got: Any, want: Any, path: str = "", out: list[str] | None = None,
                limit: int = 6) -> list[str]:
    """Where ``got`` (the served env's) differs from ``want`` (the local env's): a list of
    ``"path: what"`` lines, empty when they are the same (types, dtypes, shapes, keys and
    values, NaN-aware, bit for bit), at most ``limit`` of them."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out

    def say(message: str) -> None:
        out.append(f"{path or 'value'}: {message}")

    wd = _scalar_dtype(want)
    if isinstance(want, enum.Enum) or isinstance(got, enum.Enum):
        if type(got) is not type(want) or got != want:
            say(f"{got!r} where the local env has {want!r}")
    elif isinstance(want, Mapping):
        if not isinstance(got, Mapping):
            say(f"a {type(got).__name__} ({_short(got)}) where the local env has a "
                f"{type(want).__name__} with keys {list(want)}")
            return out
        extra, missing = [k for k in got if k not in want], [k for k in want if k not in got]
        if extra or missing:
            say(f"keys differ: {len(extra)} extra {extra[:6]}, {len(missing)} missing {missing[:6]}")
        elif list(got) != list(want):
            say(f"keys in the order {list(got)[:8]} where the local env has {list(want)[:8]}")
        for key in want:
            if key in got:
                differences(got[key], want[key], f"{path}[{key!r}]", out, limit)
    elif isinstance(want, (tuple, list)):
        if type(got) is not type(want):
            say(f"a {type(got).__name__} ({_short(got)}) where the local env has a {type(want).__name__} "
                f"({_short(want)})")
        elif len(got) != len(want):
            say(f"{len(got)} items where the local env has {len(want)}")
        else:
            for i, (g, w) in enumerate(zip(got, want)):
                differences(g, w, f"{path}[{i}]", out, limit)
    elif isinstance(want, np.ndarray):
        if not isinstance(got, np.ndarray):
            say(f"a {type(got).__name__} ({_short(got)}) where the local env has an array of "
                f"shape {want.shape}, {want.dtype}")
        elif got.dtype != want.dtype:
            say(f"dtype {got.dtype} where the local env has {want.dtype}")
        elif got.shape != want.shape:
            say(f"shape {got.shape} where the local env has {want.shape}")
        else:
            same = _same_bits(got, want)
            if not same.all():
                bad = np.argwhere(~same) if same.ndim else np.zeros((1, 0), int)
                where = tuple(int(i) for i in bad[0])
                say(f"{int((~same).sum())} of {same.size} values differ, first at {list(where)}: "
                    f"{got[where]!r} where the local env has {want[where]!r}")
    elif wd is not None:
        gd = _scalar_dtype(got)
        if gd is None:
            say(f"a {type(got).__name__} ({_short(got)}) where the local env has {type(want).__name__} {want!r}")
        elif gd != wd:
            say(f"{type(got).__name__} {got!r} ({gd}) where the local env has {type(want).__name__} {want!r} ({wd})")
        elif not _same_bits(np.asarray(got, gd), np.asarray(want, wd)):
            say(f"{got!r} where the local env has {want!r}")
    elif want is None:
        if got is not None:
            say(f"{_short(got)} where the local env has None")
    elif type(got) is not type(want) or got != want:
        say(f"{type(got).__name__} {_short(got)} where the local env has {type(want).__name__} {_short(want)}")
    return out


def spec_differences(got: Any, want: Any, path: str = "", out: list[str] | None = None) -> list[str]:
    """Where dm_env specs (or nests of them) differ: class, name, shape, dtype, bounds and the
    shape of the bounds, ``num_values``."""
    out = [] if out is None else out
    if isinstance(want, Mapping) or isinstance(want, (list, tuple)):
        if type(got) is not type(want) and not (isinstance(got, Mapping) and isinstance(want, Mapping)):
            out.append(f"{path or 'spec'}: a {type(got).__name__} ({_short(got, 200)}) where the local env "
                       f"has a {type(want).__name__} ({_short(want, 200)})")
        elif isinstance(want, Mapping):
            if list(got) != list(want):
                out.append(f"{path or 'spec'}: keys {list(got)} where the local env has {list(want)}")
            for key in want:
                if key in got:
                    spec_differences(got[key], want[key], f"{path}[{key!r}]", out)
        elif len(got) != len(want):
            out.append(f"{path or 'spec'}: {len(got)} items where the local env has {len(want)}")
        else:
            for i, (g, w) in enumerate(zip(got, want)):
                spec_differences(g, w, f"{path}[{i}]", out)
        return out
    where = path or "spec"
    if type(got) is not type(want):
        out.append(f"{where}: {got!r} where the local env has {want!r}")
        return out
    for field in ("name", "shape", "dtype", "num_values"):
        if hasattr(want, field) and getattr(got, field) != getattr(want, field):
            out.append(f"{where}.{field}: {getattr(got, field)!r} where the local env has {getattr(want, field)!r}")
    for bound in ("minimum", "maximum"):
        if hasattr(want, bound):
            differences(getattr(got, bound), getattr(want, bound), f"{where}.{bound}", out, limit=20)
    return out


def first_lines(lines: list[str], what: str) -> str:
    return f"{what}:\n  " + "\n  ".join(lines)


def run_differences(got: list[dict], want: list[dict], ops: list[tuple[str, Any]]) -> list[str]:
    """The differences of two runs' records: each differing field once, at the first operation
    where it differs (``op 3 (step)['obs']: ...``), then how many operations differ in all."""
    out: list[str] = []
    seen: set[str] = set()
    differing = 0
    for i, w in enumerate(want):
        where = f"op {i} ({ops[i][0]})"
        if i >= len(got):
            out.append(f"{where}: the served env's run ended after {len(got)} operations")
            break
        if "error" in got[i]:
            out.append(f"{where}: the served env raised {got[i]['error']}")
            break
        found = differences(got[i], w, "", limit=12)
        differing += bool(found)
        for line in found:
            field = line.split(": ", 1)[0]
            if field not in seen and len(out) < 8:
                seen.add(field)
                out.append(f"{where}{line}")
    if differing > 1:
        out.append(f"({differing} of {len(want)} operations differ)")
    return out
