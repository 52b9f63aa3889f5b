"""TensorSpec -> gymnasium space (the client side): the space admits exactly what the spec admits."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from gymnasium import spaces as gs
from gymnasium.spaces.space import Space

from dmrpc_gym.protocol.shapes import MAX_TENSOR_BYTES, element_limit
from dmrpc_gym.protocol.specs import SpecChecker
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.spaces.text import PrintableText

__all__ = ["UnsupportedSpec", "space_from_spec", "dict_space"]


class UnsupportedSpec(ValueError):
    """A TensorSpec with no faithful gymnasium space; ``str()`` is the reason.

    >>> try:
    ...     space_from_spec(pb.TensorSpec(name="points", dtype=pb.FLOAT, shape=[-1, 2]))
    ... except UnsupportedSpec as why:
    ...     print("no space:", "variable-size" in str(why))
    no space: True
    """



def _is_image(dtype: np.dtype, shape: tuple[int, ...]) -> bool:
    return dtype == np.uint8 and len(shape) == 3 and shape[2] in (1, 3, 4)


def _full(bound: np.ndarray | None, shape: tuple[int, ...], fill: Any, dtype: np.dtype) -> np.ndarray:
    if bound is None:
        return np.full(shape, fill, dtype)
    return np.broadcast_to(bound, shape).astype(dtype)


def space_from_spec(spec: pb.TensorSpec, max_bytes: int = MAX_TENSOR_BYTES) -> Space:
    """The gymnasium space admitting exactly the values ``spec`` admits (rules in the module doc).

    Raises ``ValueError`` for a malformed spec, or one whose shape holds more than
    ``max_bytes`` (the largest message: no value of it could arrive, and its bounds
    would be allocated here), and :class:`UnsupportedSpec` for one with no faithful space.

    >>> spec = pb.TensorSpec(name="move", dtype=pb.INT32)
    >>> spec.min.int32s.array.append(-1); spec.max.int32s.array.append(1)
    >>> space_from_spec(spec)
    Discrete(3, start=-1, dtype=int32)
    >>> space_from_spec(pb.TensorSpec(name="names", dtype=pb.STRING, shape=[2]))
    Traceback (most recent call last):
    ...
    dmrpc_gym.spaces.from_spec.UnsupportedSpec: 'names': string arrays (shape [2]) have no gymnasium space; only string scalars map to Text
    """
    checker = SpecChecker(spec)
    name, dt, shape, dtype = spec.name, spec.dtype, checker.shape, checker.dtype
    if dt == pb.PROTO:
        raise UnsupportedSpec(f"{name!r}: PROTO tensors have no gymnasium space")
    if not checker.fixed:
        raise UnsupportedSpec(f"{name!r}: shape {list(shape)} has a variable-size (-1) dimension, "
                              f"which no gymnasium space can hold")
    if int(np.prod(shape, dtype=object)) > element_limit(dtype, max_bytes):
        raise ValueError(f"{name!r}: shape {list(shape)} of {dtype} holds more than {max_bytes} bytes, "
                         f"the largest message (set by max_message_size= of the client)")
    if dt == pb.STRING:
        if shape:
            raise UnsupportedSpec(f"{name!r}: string arrays (shape {list(shape)}) have no gymnasium "
                                  f"space; only string scalars map to Text")
        return PrintableText()
    if dt == pb.BOOL:
        if not shape:
            return gs.Discrete(2)
        return gs.MultiBinary(shape[0] if len(shape) == 1 else shape)
    lo, hi = checker.minimum, checker.maximum
    if dtype.kind == "f":
        return gs.Box(_full(lo, shape, -np.inf, dtype), _full(hi, shape, np.inf, dtype), shape, dtype)
    info = np.iinfo(dtype)
    if lo is not None and hi is not None and not _is_image(dtype, shape):
        counts = np.asarray(hi.astype(object) - lo.astype(object) + 1, dtype=object)
        if max(counts.flat, default=1) <= info.max:
            if not shape:
                return gs.Discrete(int(counts), start=int(lo), dtype=dtype)
            nvec = np.array(np.broadcast_to(counts, shape).tolist(), dtype=dtype).reshape(shape)
            return gs.MultiDiscrete(nvec, dtype=dtype, start=_full(lo, shape, 0, dtype))
    if lo is None and hi is None and _is_image(dtype, shape):
        return gs.Box(0, 255, shape, dtype)
    return gs.Box(_full(lo, shape, info.min, dtype), _full(hi, shape, info.max, dtype), shape, dtype)


def dict_space(named_spaces: Mapping[str, Space], nested: bool = False) -> gs.Dict:
    """A ``Dict`` keyed by spec name; ``nested=True`` turns dotted names into nested Dicts.

    Keys are sorted, as gymnasium's ``Dict`` sorts the keys of a plain dict.

    >>> import gymnasium as gym
    >>> dict_space({"pos.x": gym.spaces.Discrete(2), "pos.y": gym.spaces.Discrete(3), "hp": gym.spaces.Discrete(4)}, nested=True)
    Dict('hp': Discrete(4), 'pos': Dict('x': Discrete(2), 'y': Discrete(3)))
    """
    if not nested:
        return gs.Dict(dict(named_spaces))
    tree: dict[str, Any] = {}
    for name, space in named_spaces.items():
        parts = name.split(".")
        node = tree
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"cannot nest {name!r}: {'.'.join(parts[:i + 1])!r} is itself a spec")
            node = child
        if parts[-1] in node:
            raise ValueError(f"cannot nest {name!r}: it is also the prefix of other dotted names")
        node[parts[-1]] = space

    def build(node: dict[str, Any]) -> gs.Dict:
        return gs.Dict({k: build(v) if isinstance(v, dict) else v for k, v in node.items()})

    return build(tree)


