"""Space samples to and from the GymGodot JSON protocol: actions out as arrays, observations in as the declared space.

The game only sends and receives plain JSON arrays; the spaces are declared on the
Python side. Actions are checked against their space before they are sent (a
``Discrete`` action goes out as ``[a]``); observations are cast to their space's dtype
and shape, and one that does not fit is a :class:`ValueError` naming it.

>>> from gymnasium import spaces
>>> action_to_json(spaces.Discrete(3), 2)
[2]
>>> observation_from_json(spaces.Box(0, 1, (2,), np.float32), [0.25, 1], "observation")
array([0.25, 1.  ], dtype=float32)
>>> observation_from_json(spaces.Box(0, 1, (2,), np.float32), [0.25], "observation")
Traceback (most recent call last):
...
ValueError: the game's observation [0.25] does not fit Box(0.0, 1.0, (2,), float32): 1 value(s), expected 2 (shape (2,))
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from gymnasium import spaces

__all__ = ["SUPPORTED", "check_space", "action_to_json", "observation_from_json", "observation_decoder"]

#: The spaces the protocol carries (as arrays of numbers).
SUPPORTED = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def check_space(space: Any, name: str) -> spaces.Space:
    """``space`` if the protocol can carry it, else a ``TypeError`` naming ``name``."""
    if not isinstance(space, SUPPORTED):
        kinds = ", ".join(kind.__name__ for kind in SUPPORTED)
        raise TypeError(f"{name} must be a gymnasium space of one of {kinds}; got {space!r}")
    return space


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value)
    return text if len(text) <= limit else text[:limit] + "..."


def action_to_json(space: spaces.Space, action: Any) -> list:
    """The JSON array the game receives for ``action``; ``ValueError`` if it is not in ``space``.

    Numbers of another dtype are accepted when they convert to the space's dtype without
    change (``1.0`` for a ``Discrete``, a float64 array for a float32 ``Box``).
    """
    if isinstance(space, spaces.Discrete) and isinstance(action, (int, np.integer)) and not isinstance(action, bool):
        if int(space.start) <= action < int(space.start) + int(space.n):       # the common case, fast
            return [int(action)]
    cast = None
    try:
        value = np.asarray(action)
        if value.dtype.kind in "iuf" or (value.dtype.kind == "b" and not isinstance(space, spaces.Discrete)):
            converted = value.astype(space.dtype)
            if np.array_equal(converted, value) or np.dtype(space.dtype).kind == value.dtype.kind == "f":
                cast = converted
    except (TypeError, ValueError, OverflowError):
        pass
    if isinstance(space, spaces.Discrete) and cast is not None:
        cast = cast.reshape(-1)[0] if cast.size == 1 else None
    if cast is None or not space.contains(cast):
        raise ValueError(f"action {_short(action)} is not in the action space {space} "
                         f"(expected {_expected(space)})")
    if isinstance(space, spaces.Discrete):
        return [int(cast)]
    return cast.tolist()


def _expected(space: spaces.Space) -> str:
    if isinstance(space, spaces.Discrete):
        return f"an integer in [{space.start}, {space.start + space.n - 1}]"
    if isinstance(space, spaces.Box):
        return f"an array of shape {space.shape} within [{space.low.min()}, {space.high.max()}]"
    if isinstance(space, spaces.MultiBinary):
        return f"an array of 0/1 of shape {space.shape}"
    return f"an integer array of shape {space.shape} with 0 <= value - start < {space.nvec.tolist()}"


def observation_from_json(space: spaces.Space, value: Any, what: str) -> Any:
    """``value`` (parsed JSON) as an element of ``space``; ``ValueError`` naming ``what`` if it does not fit."""
    if type(space) is spaces.Box and space.dtype.kind == "f":      # the common case, fast
        raw = np.array(value)
        if raw.dtype.kind in "iuf" and raw.shape == space.shape:
            cast = raw.astype(space.dtype)
            if (cast >= space.low).all() and (cast <= space.high).all():
                return cast

    def refuse(reason: str) -> ValueError:
        return ValueError(f"the game's {what} {_short(value)} does not fit {space}: {reason}")

    dtype = np.dtype(space.dtype)
    try:
        raw = np.array(value)
    except (TypeError, ValueError):              # ragged nesting
        raw = None
    if raw is None or raw.dtype.kind not in "biuf":
        raise refuse("expected numbers (a JSON array or number)")
    shape = () if isinstance(space, spaces.Discrete) else space.shape
    if raw.shape != shape:
        size = int(np.prod(shape, dtype=np.int64))
        if raw.size != size:
            raise refuse(f"{raw.size} value(s), expected {size} (shape {shape})")
        raw = raw.reshape(shape)
    if dtype.kind != "f" and raw.dtype.kind == "f" and (
            not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw))):
        raise refuse(f"expected integers for dtype {dtype}")
    cast = raw.astype(dtype)
    if isinstance(space, spaces.Discrete):
        cast = dtype.type(cast)
    if isinstance(space, spaces.Box):            # shape and dtype are right by construction
        inside = bool(np.all(cast >= space.low) and np.all(cast <= space.high))
    else:
        inside = space.contains(cast)
    if not inside:
        raise refuse("out of the space's bounds")
    return cast


def observation_decoder(space: spaces.Space) -> Callable[[Any, str], Any]:
    """:func:`observation_from_json` for one space, with the per-space work done once.

    A flat float ``Box`` with the same bounds for every element (the common
    game observation) is checked on the parsed JSON list in plain Python and
    converted with one ``np.array`` call; anything else, or any value that
    does not pass, takes :func:`observation_from_json` (same result, same errors).

    >>> decode = observation_decoder(spaces.Box(0, 1, (3,), np.float32))
    >>> decode([0.5, 1, 0], "observation")
    array([0.5, 1. , 0. ], dtype=float32)
    """
    if (type(space) is spaces.Box and space.dtype.kind == "f" and len(space.shape) == 1
            and (space.low == space.low[0]).all() and (space.high == space.high[0]).all()):
        lo, hi, n, dtype = float(space.low[0]), float(space.high[0]), space.shape[0], space.dtype

        def decode(value: Any, what: str) -> Any:
            try:
                # `lo <= x <= hi` is False for NaN; a non-number raises TypeError.
                if type(value) is list and len(value) == n and all(lo <= x <= hi for x in value):
                    return np.array(value, dtype)
            except TypeError:
                pass
            return observation_from_json(space, value, what)
        return decode
    return lambda value, what: observation_from_json(space, value, what)
