"""How an env holds a scalar value: a 0-d array, a numpy scalar or a Python number.

A TensorSpec of shape ``()`` says the dtype, not the container: dm_control gives
``np.float64`` scalars, PettingZoo's rock-paper-scissors 0-d arrays, toy-text
envs Python ints. :class:`~dmrpc_gym.spaces.codec.ValueCodec` gives 0-d arrays for
a ``Box`` and numpy scalars for a ``Discrete``; :class:`ScalarKinds` notes, per
scalar leaf of a space, where an observation differs from that, so that our client
can hold each value as the env did (:mod:`dmrpc_gym.protocol.fidelity`).

>>> import gymnasium as gym
>>> kinds = ScalarKinds(gym.spaces.Dict({"x": gym.spaces.Box(0, 1, ()), "n": gym.spaces.Discrete(3)}))
>>> said = kinds.of({"x": np.float32(0.5), "n": 2})
>>> said == {"x": "numpy", "n": "int"}
True
>>> kinds.apply({"x": np.array(0.5, np.float32), "n": np.int64(2)}, said)
{'x': np.float32(0.5), 'n': 2}
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces as gs

__all__ = ["ScalarKinds"]

_PYTHON = {bool: "bool", int: "int", float: "float"}


def _kind(value: Any) -> str | None:
    if type(value) is np.ndarray:
        return "array"
    if isinstance(value, np.generic):
        return "numpy"
    return _PYTHON.get(type(value))


def _as(value: Any, kind: str) -> Any:
    arr = np.asarray(value)
    if kind == "array":
        return arr
    if kind == "numpy":
        return arr[()]
    return {"bool": bool, "int": int, "float": float}[kind](arr.item())


class ScalarKinds:
    """The scalar leaves of a space (``Box`` of shape ``()``, ``Discrete``), by dotted name."""

    __slots__ = ("_leaves",)

    def __init__(self, space: gs.Space, name: str = ""):
        self._leaves: dict[str, tuple[tuple, str]] = {}     # name -> (path, the codec's kind)
        self._walk(space, name, ())

    def _walk(self, space: gs.Space, name: str, path: tuple) -> None:
        if isinstance(space, gs.Dict):
            for key, sub in space.spaces.items():
                self._walk(sub, f"{name}.{key}" if name else str(key), (*path, key))
        elif isinstance(space, gs.Tuple):
            for i, sub in enumerate(space.spaces):
                self._walk(sub, f"{name}.{i}" if name else str(i), (*path, i))
        elif isinstance(space, gs.Discrete):
            self._leaves[name] = (path, "numpy")
        elif isinstance(space, gs.Box) and space.shape == ():
            self._leaves[name] = (path, "array")

    def __len__(self) -> int:
        """How many scalar leaves the space has (none: no value needs its kinds said)."""
        return len(self._leaves)

    def of(self, value: Any) -> dict[str, str] | None:
        """The leaves of ``value`` not held as the codec holds them: ``{name: kind}`` (None: all are)."""
        if not self._leaves:
            return None
        out = None
        for name, (path, usual) in self._leaves.items():
            try:
                leaf = value
                for step in path:
                    leaf = leaf[step]
            except (KeyError, IndexError, TypeError):
                continue
            kind = _kind(leaf)
            if kind is not None and kind != usual:
                out = out or {}
                out[name] = kind
        return out

    def apply(self, value: Any, kinds: Mapping[str, str]) -> Any:
        """``value`` (as the codec made it) with the leaves named in ``kinds`` held that way."""
        for name, kind in kinds.items():
            found = self._leaves.get(name)
            if found is not None:
                value = _replace(value, found[0], kind)
        return value


def _replace(value: Any, path: tuple, kind: str) -> Any:
    if not path:
        return _as(value, kind)
    head, rest = path[0], path[1:]
    if isinstance(value, tuple):
        return tuple(_replace(v, rest, kind) if i == head else v for i, v in enumerate(value))
    if isinstance(value, dict) and head in value:
        value[head] = _replace(value[head], rest, kind)
    return value
