"""The Godot RL Agents spaces: ``env_info``'s entries as gymnasium spaces, observations in, actions out.

Observation entries: ``{"space": "box", "size": [...], "low": l, "high": h}`` is a float32
``Box`` (bounds default -1 and 1), ``{"space": "discrete", "size": n}`` a ``Discrete(n)``, and an
entry whose key contains ``2d`` an image: a uint8 ``Box`` in [0, 255] of shape ``size``, sent as
the hex text of its bytes. Action entries: ``{"action_type": "discrete", "size": n}`` is
``Discrete(n)``, ``"continuous"`` a float32 ``Box(-1, 1, (n,))``. Each agent's spaces are a
``Dict`` of its entries.

>>> space = observation_space({"obs": {"space": "box", "size": [2], "low": -5, "high": 5},
...                            "camera_2d": {"space": "box", "size": [1, 2, 1]}})
>>> space["obs"], space["camera_2d"]
(Box(-5.0, 5.0, (2,), float32), Box(0, 255, (1, 2, 1), uint8))
>>> decode_observation(space, {"obs": [0.5, -4], "camera_2d": "00ff"}, "agent_0")["camera_2d"].ravel()
array([  0, 255], dtype=uint8)
>>> actions = action_space({"move": {"size": 2, "action_type": "continuous"}, "jump": {"size": 2, "action_type": "discrete"}})
>>> encode_action(actions, {"move": [0.25, -1.0], "jump": 1}, "agent_0")
{'jump': 1, 'move': [0.25, -1.0]}
>>> neutral_action(actions)
{'jump': 0, 'move': [0.0, 0.0]}
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from dmrpc_gym.integrations.godot_rl.wire import GodotRLProtocolError

__all__ = ["observation_space", "action_space", "decode_observation", "encode_action", "neutral_action",
           "is_image"]


def is_image(key: str) -> bool:
    """Whether an observation entry is an image (its key contains ``2d``): uint8, sent as hex."""
    return "2d" in key


def _shape(size: Any, where: str) -> tuple[int, ...]:
    dims = size if isinstance(size, list) else [size]
    if not dims or any(isinstance(d, bool) or not isinstance(d, (int, float)) or d != int(d) or d < 1 for d in dims):
        raise GodotRLProtocolError(f"{where}: size {size!r} is not a positive int or a list of them")
    return tuple(int(d) for d in dims)


def _bound(entry: Mapping, name: str, default: float, shape: tuple[int, ...], where: str) -> np.ndarray:
    value = entry.get(name, default)
    try:
        array = np.asarray(value, np.float32)
        return np.broadcast_to(array, shape).copy()
    except (TypeError, ValueError):
        raise GodotRLProtocolError(f"{where}: {name} {value!r} is not a number or a list of shape {shape}") from None


def observation_space(entries: Any, where: str = "observation_space") -> spaces.Dict:
    """The ``Dict`` space of one agent's observation entries (``GodotRLProtocolError`` naming a bad one)."""
    if not isinstance(entries, dict) or not entries:
        raise GodotRLProtocolError(f"{where} must be a non-empty JSON object of named entries; got {entries!r}")
    out = {}
    for key, entry in entries.items():
        at = f"{where} entry {key!r}"
        if not isinstance(entry, dict) or "size" not in entry:
            raise GodotRLProtocolError(f"{at} must be an object with 'space' and 'size'; got {entry!r}")
        kind = entry.get("space", "box")
        if kind == "discrete":
            out[key] = spaces.Discrete(_shape(entry["size"], at)[0])
        elif kind == "box" and is_image(key):
            out[key] = spaces.Box(0, 255, _shape(entry["size"], at), np.uint8)
        elif kind == "box":
            shape = _shape(entry["size"], at)
            low, high = _bound(entry, "low", -1.0, shape, at), _bound(entry, "high", 1.0, shape, at)
            if np.any(low > high):
                raise GodotRLProtocolError(f"{at}: low {entry.get('low')!r} exceeds high {entry.get('high')!r}")
            out[key] = spaces.Box(low, high, shape, np.float32)
        else:
            raise GodotRLProtocolError(f"{at}: space {kind!r} is not one of 'box', 'discrete'")
    return spaces.Dict(out)


def action_space(entries: Any, where: str = "action_space") -> spaces.Dict:
    """The ``Dict`` space of one agent's action entries (``GodotRLProtocolError`` naming a bad one)."""
    if not isinstance(entries, dict) or not entries:
        raise GodotRLProtocolError(f"{where} must be a non-empty JSON object of named entries; got {entries!r}")
    out: dict[str, spaces.Space] = {}
    for key, entry in entries.items():
        at = f"{where} entry {key!r}"
        if not isinstance(entry, dict) or "size" not in entry:
            raise GodotRLProtocolError(f"{at} must be an object with 'size' and 'action_type'; got {entry!r}")
        size = _shape(entry["size"], at)[0]
        kind = entry.get("action_type")
        if kind == "discrete":
            out[key] = spaces.Discrete(size)
        elif kind == "continuous":
            out[key] = spaces.Box(-1.0, 1.0, (size,), np.float32)
        else:
            raise GodotRLProtocolError(f"{at}: action_type {kind!r} is not one of 'discrete', 'continuous'")
    return spaces.Dict(out)


def decode_observation(space: spaces.Dict, values: Any, who: str) -> dict[str, np.ndarray]:
    """One agent's observation as ``space`` holds it: arrays of its dtypes and shapes, images from hex."""
    if not isinstance(values, dict):
        raise GodotRLProtocolError(f"{who}'s observation is not a JSON object of named entries: {values!r:.200}")
    out = {}
    for key, sub in space.spaces.items():
        if key not in values:
            raise GodotRLProtocolError(f"{who}'s observation lacks entry {key!r} (it has: "
                                       f"{', '.join(map(repr, values)) or 'none'})")
        value = values[key]
        try:
            if isinstance(sub, spaces.Discrete):
                out[key] = np.int64(value)
                continue
            if sub.dtype == np.uint8 and is_image(key):
                array = np.frombuffer(bytes.fromhex(value), np.uint8)
            else:
                array = np.asarray(value, np.float32)
            out[key] = array.reshape(sub.shape)
        except (TypeError, ValueError) as exc:
            raise GodotRLProtocolError(f"{who}'s observation entry {key!r} does not fit {sub}: {exc} "
                                       f"(got {str(value)[:120]!r})") from None
    return out


def encode_action(space: spaces.Dict, action: Any, who: str) -> dict[str, Any]:
    """One agent's action as the game reads it (a discrete entry an int, a continuous one a list of floats);
    ``ValueError`` naming the entry when ``action`` is not in ``space``."""
    if type(action) is not dict and not isinstance(action, Mapping):
        raise ValueError(f"{who}'s action must be a dict with entries {', '.join(space.spaces)}; got {action!r}")
    if len(action) != len(space.spaces) or action.keys() != space.spaces.keys():
        missing = [key for key in space.spaces if key not in action]
        extra = [key for key in action if key not in space.spaces]
        raise ValueError(f"{who}'s action {action!r} does not match {space}: "
                         f"missing {missing or 'nothing'}, unknown {extra or 'nothing'}")
    out: dict[str, Any] = {}
    for key, sub in space.spaces.items():
        value = action[key]
        if isinstance(sub, spaces.Discrete):
            if type(value) is int and 0 <= value < sub.n:             # the common case, at once
                out[key] = value
                continue
            array = np.asarray(value)
            if array.shape not in ((), (1,)) or array.dtype.kind not in "iu" or not 0 <= int(array.item()) < sub.n:
                raise ValueError(f"{who}'s action entry {key!r} must be an int in [0, {sub.n}); got {value!r}")
            out[key] = int(array.item())
        else:
            if type(value) is np.ndarray and value.shape == sub.shape and value.dtype.kind == "f":
                out[key] = value.tolist()                               # the common case, at once
                continue
            array = np.asarray(value, np.float64)
            if array.shape != sub.shape:
                raise ValueError(f"{who}'s action entry {key!r} must have shape {sub.shape}; got {value!r}")
            out[key] = [float(v) for v in array]
    return out


def neutral_action(space: spaces.Dict) -> dict[str, Any]:
    """The action sent for an agent that has no action to give: zeros, the first discrete value."""
    return {key: 0 if isinstance(sub, spaces.Discrete) else [0.0] * int(sub.shape[0])
            for key, sub in space.spaces.items()}
