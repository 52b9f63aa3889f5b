"""TensorSpec <-> gymnasium space, both directions, and values between the two forms.

From a spec (client side), the space admits exactly the values the spec
admits, with the spec's dtype:

- numeric with finite bounds (broadcast or per-element): ``Box(low, high, shape, dtype)``;
- integer scalar with both bounds: ``Discrete(max - min + 1, start=min, dtype=dtype)``;
- integer array with both bounds: ``MultiDiscrete(max - min + 1, start=min, dtype=dtype)``;
  when a count ``max - min + 1`` does not fit the dtype (``uint8`` in ``[0, 255]``,
  a full-range ``int64``), gymnasium cannot hold it and the same values are
  given as a ``Box(min, max)`` of the dtype;
- ``uint8`` images (``H x W x C`` with C in 1, 3, 4): ``Box`` over the bounds (default ``[0, 255]``);
- numeric without bounds (or with one): ``Box`` over the dtype's range (±inf
  for floats, ``iinfo`` for integers), keeping a bound that is given;
- bool: ``MultiBinary(shape)`` (``MultiBinary(n)`` for a vector); a bool scalar: ``Discrete(2)``;
- string scalar: :class:`PrintableText`; a -1 dimension, PROTO, string arrays:
  :class:`UnsupportedSpec`.

From a space (server side), :func:`specs_from_space` names one spec per leaf
(``Dict`` keys and ``Tuple`` indices joined by dots: ``pos.x``, ``pair.0``).
Round trip ``space_from_spec(specs_from_space(S))`` gives the same space except:
an integer ``Box`` with small enough bounds comes back as ``Discrete`` /
``MultiDiscrete`` (same values); float16 / int16 / uint16 widen to float32 /
int32 / uint32 (:func:`unflatten_value` narrows values back); a ``Box`` of
bools comes back as ``MultiBinary``; ``Text`` comes back as
:class:`PrintableText` (a TensorSpec carries no length or charset); ``Dict`` /
``Tuple`` come back as one space per dotted name (:func:`dict_space` rebuilds
the nesting).

>>> import gymnasium as gym
>>> specs = specs_from_space(gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "n": gym.spaces.Discrete(3)}))
>>> {name: space_from_spec(spec) for name, spec in specs.items()}
{'n': Discrete(3), 'pos': Box(-1.0, 1.0, (2,), float32)}
"""
from __future__ import annotations

import functools
import math
import unicodedata
import weakref
from typing import Any, Mapping

import numpy as np
from gymnasium import spaces as gs
from gymnasium.spaces.space import Space

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.specs import SpecChecker, cast_exact
from dmrpc_gym.protocol.wire import pb

__all__ = [
    "UnsupportedSpec", "PrintableText", "TEXT_MAX_LENGTH",
    "space_from_spec", "specs_from_space", "dict_space",
    "ValueCodec", "value_codec", "flatten_value", "unflatten_value",
]

#: The ``max_length`` of the :class:`PrintableText` a STRING spec maps to. The
#: wire sets no limit; this admits any realistic text (a multi-kilobyte JSON
#: blob included) while ``sample()`` stays cheap.
TEXT_MAX_LENGTH = 65536

# Spec dtypes for numpy dtypes dm_env_rpc lacks.
_WIDEN = {np.dtype(np.float16): np.dtype(np.float32),
          np.dtype(np.int16): np.dtype(np.int32),
          np.dtype(np.uint16): np.dtype(np.uint32)}


class UnsupportedSpec(ValueError):
    """A TensorSpec with no faithful gymnasium space; ``str()`` is the reason.

    >>> try:
    ...     space_from_spec(pb.TensorSpec(name="points", dtype=pb.FLOAT, shape=[-1, 2]))
    ... except UnsupportedSpec as why:
    ...     print("no space:", "variable-size" in str(why))
    no space: True
    """


# -- Text ------------------------------------------------------------------------

_WHITESPACE_CONTROLS = "\t\n\x0b\x0c\r"


@functools.lru_cache(maxsize=None)
def _printable_prototype() -> gs.Text:
    """One ``Text`` over the printable charset; its lookup tables are shared by every PrintableText."""
    chars = [c for c in map(chr, range(0x110000))
             if c.isprintable() or c in _WHITESPACE_CONTROLS
             or unicodedata.category(c) in ("Cf", "Zl", "Zp")]
    return gs.Text(1, min_length=0, charset="".join(chars))


class PrintableText(gs.Text):
    """A ``Text`` admitting any printable text: the space of a STRING scalar spec.

    Its charset is every assigned Unicode character except control characters
    (tab, newline, carriage return, vertical tab and form feed are kept),
    surrogates and private-use characters: ~150k characters, so that
    ``contains()`` (which checks each character against the charset) accepts
    real text in any script, emoji and joiners included. The lookup tables are
    built once per process (a fraction of a second, on first use) and shared;
    ``repr`` and pickles leave them out.

    >>> space = PrintableText()
    >>> space.contains("héllo wörld\\n✓ 🙂"), space.contains("\\x00"), space.contains("")
    (True, False, True)
    >>> space
    PrintableText(0, 65536)
    """

    def __init__(self, max_length: int = TEXT_MAX_LENGTH, *, min_length: int = 0,
                 seed: int | np.random.Generator | None = None):
        super().__init__(max_length, min_length=min_length, charset=" ", seed=seed)
        self.__dict__.update(self._shared_tables())

    @staticmethod
    def _shared_tables() -> dict[str, Any]:
        return {k: v for k, v in vars(_printable_prototype()).items() if k.startswith("_char")}

    def __repr__(self) -> str:
        return f"PrintableText({self.min_length}, {self.max_length})"

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_char")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.update(self._shared_tables())


# -- spec -> space -----------------------------------------------------------------

def _is_image(dtype: np.dtype, shape: tuple[int, ...]) -> bool:
    return dtype == np.uint8 and len(shape) == 3 and shape[2] in (1, 3, 4)


def _full(bound: np.ndarray | None, shape: tuple[int, ...], fill: Any, dtype: np.dtype) -> np.ndarray:
    if bound is None:
        return np.full(shape, fill, dtype)
    return np.broadcast_to(bound, shape).astype(dtype)


def space_from_spec(spec: pb.TensorSpec) -> Space:
    """The gymnasium space admitting exactly the values ``spec`` admits (rules in the module doc).

    Raises ``ValueError`` for a malformed spec and :class:`UnsupportedSpec`
    for one with no faithful space.

    >>> spec = pb.TensorSpec(name="move", dtype=pb.INT32)
    >>> spec.min.int32s.array.append(-1); spec.max.int32s.array.append(1)
    >>> space_from_spec(spec)
    Discrete(3, start=-1, dtype=int32)
    >>> space_from_spec(pb.TensorSpec(name="names", dtype=pb.STRING, shape=[2]))
    Traceback (most recent call last):
    ...
    dmrpc_gym.spaces.UnsupportedSpec: 'names': string arrays (shape [2]) have no gymnasium space; only string scalars map to Text
    """
    checker = SpecChecker(spec)
    name, dt, shape, dtype = spec.name, spec.dtype, checker.shape, checker.dtype
    if dt == pb.PROTO:
        raise UnsupportedSpec(f"{name!r}: PROTO tensors have no gymnasium space")
    if not checker.fixed:
        raise UnsupportedSpec(f"{name!r}: shape {list(shape)} has a variable-size (-1) dimension, "
                              f"which no gymnasium space can hold")
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


# -- space -> spec, and values ---------------------------------------------------------

def _wire_dtype(dtype: Any, where: str) -> tuple[np.dtype, int]:
    dtype = np.dtype(dtype)
    wire = _WIDEN.get(dtype, dtype)
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
