"""gymnasium space -> TensorSpecs (the server side), and a space's values <-> named wire arrays.

A :class:`ValueCodec` walks a space once and keeps one leaf per spec (``Dict``
keys and ``Tuple`` indices joined by dots); both ends use it every step: the
client to send actions and read observations, the server the other way round.
"""
from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces as gs
from gymnasium.spaces.space import Space

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.specs import cast_exact
from dmrpc_gym.protocol.wire import pb

__all__ = ["ValueCodec", "value_codec", "specs_from_space", "flatten_value", "unflatten_value"]

# Spec dtypes for numpy dtypes dm_env_rpc lacks.
WIDEN = {np.dtype(np.float16): np.dtype(np.float32),
          np.dtype(np.int16): np.dtype(np.int32),
          np.dtype(np.uint16): np.dtype(np.uint32)}


def _wire_dtype(dtype: Any, where: str) -> tuple[np.dtype, int]:
    dtype = np.dtype(dtype)
    wire = WIDEN.get(dtype, dtype)
    try:
        return wire, tensors.data_type(wire)
    except TypeError as exc:
        raise TypeError(f"{where}: {exc}") from None


def _set_bound(value: pb.TensorSpec.Value, bound: np.ndarray, dt: int) -> None:
    flat = bound.ravel()
    if flat.size and (flat == flat[0]).all():
        flat = flat[:1]
    tensors.pack_flat_into(value, flat, dt)


def _label(name: str) -> str:
    return repr(name) if name else "the value"


class _Leaf:
    """One spec: converts a value to its wire array and back."""

    __slots__ = ("name", "spec", "wire", "dtype", "shape")

    def __init__(self, name: str, spec: pb.TensorSpec, wire: np.dtype, dtype: np.dtype, shape: tuple):
        self.name, self.spec, self.wire, self.dtype, self.shape = name, spec, wire, dtype, shape

    def flatten_into(self, value: Any, out: dict[str, np.ndarray]) -> None:
        arr = value if type(value) is np.ndarray else np.asarray(value)
        if arr.dtype != self.wire:
            # Values the spec dtype cannot hold are passed on as they are, so
            # that check_value can say what is wrong with them.
            cast = cast_exact(arr, self.wire)
            if cast is not None:
                arr = cast
        out[self.name] = arr

    def _array(self, arrays: Mapping[str, Any]) -> np.ndarray:
        try:
            value = arrays[self.name]
        except KeyError:
            raise ValueError(f"no value for {_label(self.name)}") from None
        arr = value if type(value) is np.ndarray else np.asarray(value)
        if arr.shape != self.shape:
            size = math.prod(self.shape)
            if arr.size == size:
                arr = arr.reshape(self.shape)
            elif arr.size == 1:
                arr = np.full(self.shape, arr.reshape(()), arr.dtype)
            else:
                raise ValueError(f"{_label(self.name)}: expected shape {self.shape}, got {arr.shape}")
        return arr

    def unflatten(self, arrays: Mapping[str, Any], partial: bool = False) -> Any:
        arr = self._array(arrays)
        return arr if arr.dtype == self.dtype else arr.astype(self.dtype)


class _ScalarLeaf(_Leaf):
    """Discrete: a 0-d wire array <-> a numpy scalar of the space's dtype."""

    __slots__ = ()

    def unflatten(self, arrays: Mapping[str, Any], partial: bool = False) -> Any:
        return self.dtype.type(self._array(arrays).item())


class _TextLeaf(_Leaf):
    """Text: a 0-d string array <-> ``str``."""

    __slots__ = ()

    def flatten_into(self, value: Any, out: dict[str, np.ndarray]) -> None:
        out[self.name] = np.array(value, dtype=np.str_) if isinstance(value, str) else np.asarray(value)

    def unflatten(self, arrays: Mapping[str, Any], partial: bool = False) -> Any:
        return str(self._array(arrays).item())


class _DictNode:
    __slots__ = ("name", "children", "by_key")

    def __init__(self, name: str, children: list[tuple[Any, Any]]):
        self.name = name
        self.children = children
        self.by_key = dict(children)

    def flatten_into(self, value: Any, out: dict[str, np.ndarray]) -> None:
        if not isinstance(value, Mapping):
            raise ValueError(f"{_label(self.name)}: expected a mapping for a Dict space, got {type(value).__name__}")
        by_key = self.by_key
        for key, item in value.items():
            child = by_key.get(key)
            if child is None:
                known = ", ".join(repr(k) for k in by_key)
                raise ValueError(f"{_label(self.name)}: unknown key {key!r}; expected one of {known}")
            child.flatten_into(item, out)

    def unflatten(self, arrays: Mapping[str, Any], partial: bool = False) -> Any:
        out = {}
        for key, child in self.children:
            if partial and not _present(child, arrays):
                continue
            out[key] = child.unflatten(arrays, partial)
        return out


class _TupleNode:
    __slots__ = ("name", "children")

    def __init__(self, name: str, children: list[Any]):
        self.name = name
        self.children = children

    def flatten_into(self, value: Any, out: dict[str, np.ndarray]) -> None:
        if isinstance(value, (str, bytes, Mapping)) or len(value) != len(self.children):
            raise ValueError(f"{_label(self.name)}: expected a sequence of {len(self.children)} "
                             f"values for a Tuple space, got {value!r:.80}")
        for child, item in zip(self.children, value):
            child.flatten_into(item, out)

    def unflatten(self, arrays: Mapping[str, Any], partial: bool = False) -> Any:
        return tuple(child.unflatten(arrays, partial) for child in self.children)


def _present(node: Any, arrays: Mapping[str, Any]) -> bool:
    if isinstance(node, _Leaf):
        return node.name in arrays
    children = node.children if isinstance(node, _TupleNode) else [c for _, c in node.children]
    return any(_present(c, arrays) for c in children)


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _build(space: Space, name: str, leaves: list[_Leaf]) -> Any:
    """The codec node for ``space`` named ``name``; appends its leaves to ``leaves``."""
    where = f"space {_label(name)}"
    if isinstance(space, gs.Dict):
        return _DictNode(name, [(k, _build(s, _join(name, k), leaves)) for k, s in space.spaces.items()])
    if isinstance(space, gs.Tuple):
        return _TupleNode(name, [_build(s, _join(name, i), leaves) for i, s in enumerate(space.spaces)])
    if isinstance(space, gs.Text):
        spec = pb.TensorSpec(name=name, dtype=pb.STRING)
        leaf = _TextLeaf(name, spec, np.dtype(np.str_), np.dtype(np.str_), ())
    elif isinstance(space, gs.Discrete):
        wire, dt = _wire_dtype(space.dtype, where)
        spec = pb.TensorSpec(name=name, dtype=dt)
        start = int(space.start)
        tensors.pack_flat_into(spec.min, np.array([start], wire), dt)
        tensors.pack_flat_into(spec.max, np.array([start + int(space.n) - 1], wire), dt)
        leaf = _ScalarLeaf(name, spec, wire, space.dtype, ())
    elif isinstance(space, gs.MultiDiscrete):
        wire, dt = _wire_dtype(space.dtype, where)
        spec = pb.TensorSpec(name=name, dtype=dt, shape=space.shape)
        start = space.start.astype(object)
        _set_bound(spec.min, np.array(start.tolist(), wire), dt)
        _set_bound(spec.max, np.array((start + space.nvec.astype(object) - 1).tolist(), wire), dt)
        leaf = _Leaf(name, spec, wire, space.dtype, space.shape)
    elif isinstance(space, gs.MultiBinary):
        spec = pb.TensorSpec(name=name, dtype=pb.BOOL, shape=space.shape)
        leaf = _Leaf(name, spec, np.dtype(np.bool_), space.dtype, tuple(space.shape))
    elif isinstance(space, gs.Box):
        wire, dt = _wire_dtype(space.dtype, where)
        spec = pb.TensorSpec(name=name, dtype=dt, shape=space.shape)
        if dt != pb.BOOL and space.low.size:
            low, high = space.low.astype(wire), space.high.astype(wire)
            if not (wire.kind == "f" and np.isneginf(low).all()):
                _set_bound(spec.min, low, dt)
            if not (wire.kind == "f" and np.isposinf(high).all()):
                _set_bound(spec.max, high, dt)
        leaf = _Leaf(name, spec, wire, space.dtype, space.shape)
    else:
        raise TypeError(f"{where}: {type(space).__name__} has no dm_env_rpc TensorSpec "
                        f"(supported: Box, Discrete, MultiDiscrete, MultiBinary, Text, Dict, Tuple)")
    if any(other.name == name for other in leaves):
        raise ValueError(f"two parts of the space are both named {name!r}")
    leaves.append(leaf)
    return leaf


class ValueCodec:
    """Converts values of one space to named wire arrays and back; build once, use every step.

    >>> import gymnasium as gym
    >>> codec = value_codec(gym.spaces.Tuple((gym.spaces.Discrete(3, start=-1), gym.spaces.MultiBinary(2))), "a")
    >>> codec.names
    ('a.0', 'a.1')
    >>> arrays = codec.flatten((np.int64(-1), np.array([1, 0], np.int8)))
    >>> arrays
    {'a.0': array(-1), 'a.1': array([ True, False])}
    >>> codec.unflatten(arrays)
    (np.int64(-1), array([1, 0], dtype=int8))
    """

    __slots__ = ("_root", "_leaves", "names", "__weakref__")

    def __init__(self, space: Space, name: str = ""):
        leaves: list[_Leaf] = []
        self._root = _build(space, name, leaves)
        self._leaves = tuple(leaves)
        self.names: tuple[str, ...] = tuple(leaf.name for leaf in leaves)

    @property
    def whole(self) -> str | None:
        """The name of the one array that a value is, where an ``ndarray`` already of the wire dtype is its
        own flattened array (a Box, MultiBinary or MultiDiscrete space); else None."""
        return self._root.name if type(self._root) is _Leaf else None

    @property
    def specs(self) -> dict[str, pb.TensorSpec]:
        """One fresh ``TensorSpec`` per leaf, by name."""
        out = {}
        for leaf in self._leaves:
            spec = pb.TensorSpec()
            spec.CopyFrom(leaf.spec)
            out[leaf.name] = spec
        return out

    def flatten(self, value: Any) -> dict[str, np.ndarray]:
        """``value`` as ``{name: array in the spec dtype}``; a Dict value may give only some keys."""
        out: dict[str, np.ndarray] = {}
        self._root.flatten_into(value, out)
        return out

    def unflatten(self, arrays: Mapping[str, Any], partial: bool = False) -> Any:
        """Named arrays back to a value of the space; ``partial=True`` leaves out Dict keys with no arrays."""
        return self._root.unflatten(arrays, partial)


_CODECS: dict[tuple[int, str], tuple[weakref.ref, ValueCodec]] = {}


def value_codec(space: Space, name: str = "") -> ValueCodec:
    """The (cached) :class:`ValueCodec` of ``space``, with ``name`` for a bare space."""
    key = (id(space), name)
    hit = _CODECS.get(key)
    if hit is not None and hit[0]() is space:
        return hit[1]
    codec = ValueCodec(space, name)
    try:
        ref = weakref.ref(space, lambda _ref, key=key: _CODECS.pop(key, None))
    except TypeError:
        return codec
    _CODECS[key] = (ref, codec)
    return codec


def specs_from_space(space: Space, name: str = "") -> dict[str, pb.TensorSpec]:
    """One ``TensorSpec`` per leaf of ``space``, by dotted name (a bare space gets ``name``).

    >>> import gymnasium as gym
    >>> spec = specs_from_space(gym.spaces.Box(0.0, 1.0, (3,), np.float64), "level")["level"]
    >>> pb.DataType.Name(spec.dtype), list(spec.shape), list(spec.min.doubles.array), list(spec.max.doubles.array)
    ('DOUBLE', [3], [0.0], [1.0])
    """
    return value_codec(space, name).specs


def flatten_value(space: Space, value: Any, name: str = "") -> dict[str, np.ndarray]:
    """``value`` of ``space`` as ``{spec name: array in the spec dtype}`` (names as in :func:`specs_from_space`).

    Does not validate: a value its spec dtype cannot hold exactly is passed on
    uncast, for :func:`dmrpc_gym.protocol.specs.check_value` to report.
    """
    return value_codec(space, name).flatten(value)


def unflatten_value(space: Space, arrays: Mapping[str, np.ndarray], name: str = "",
                    partial: bool = False) -> Any:
    """Named arrays back to a value ``space.contains`` accepts (the inverse of :func:`flatten_value`).

    Discrete -> numpy scalar of the space dtype, Box / MultiDiscrete -> array of
    its dtype and shape, MultiBinary -> int8 array, Text -> ``str``, Dict ->
    ``dict``, Tuple -> ``tuple``. ``partial=True`` leaves out Dict keys with no arrays.
    """
    return value_codec(space, name).unflatten(arrays, partial)
