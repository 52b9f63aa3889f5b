"""TensorSpecs compiled for checking: validation of a spec, and of every value against it.

A spec is compiled once into a :class:`SpecChecker` (numpy dtype, shape,
bounds as arrays), so that checking a value on every step costs a few numpy
comparisons. :mod:`~dmrpc_gym.protocol.spec_table` keeps the compiled specs
of one agent by UID and name.

>>> spec = pb.TensorSpec(name="paddle", dtype=pb.INT32)
>>> spec.min.int32s.array.append(-1); spec.max.int32s.array.append(1)
>>> check_value(spec, np.int64(1))
array(1, dtype=int32)
>>> check_value(spec, 2)
Traceback (most recent call last):
...
ValueError: action 'paddle': value 2 is above the maximum 1
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from dmrpc_gym.protocol.bounds import bound_values
from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol.protowire import remember
from dmrpc_gym.protocol.wire import pb

__all__ = [
    "cast_exact", "dtype_label", "SpecChecker", "check_value", "validate_spec",
]

_NUMERIC = frozenset({pb.FLOAT, pb.DOUBLE, pb.INT8, pb.INT32, pb.INT64, pb.UINT8, pb.UINT32, pb.UINT64})


def dtype_label(dtype: Any) -> str:
    """A short, user-facing name for a numpy dtype (``'int8'``, ``'float32'``, ``'string'``)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "U":
        return "string"
    if dtype.kind == "O":
        return "protobuf message"
    return dtype.name


def cast_exact(array: np.ndarray, dtype: Any) -> np.ndarray | None:
    """``array`` as ``dtype`` when the cast loses nothing that matters; else ``None``.

    Lossless means: integers that fit the target range; floats that are
    integral and fit (to integers); 0/1 (to bool); any number to a float type
    (rounding to the nearer float is accepted, overflowing a finite value to
    infinity is not); strings only to strings. An array that already has the
    dtype is returned as is (no copy).

    >>> cast_exact(np.array([1.0, 2.0]), np.int8)
    array([1, 2], dtype=int8)
    >>> cast_exact(np.array([0.5]), np.int8) is None
    True
    """
    target = np.dtype(dtype)
    src = array.dtype
    if src == target:
        return array
    k, t = src.kind, target.kind
    if t == "U":
        if k == "U":
            return array
        if k == "O" and all(isinstance(x, str) for x in array.flat):
            return array.astype(np.str_)
        return None
    if t == "O":
        return array if k == "O" else None
    if k == "O":
        try:
            plain = np.array(array.tolist())
        except (ValueError, TypeError):
            return None
        if plain.dtype.kind not in "biuf":
            return None
        return cast_exact(plain, target)
    if k not in "biuf":
        return None
    if t == "b":
        return array.astype(target) if ((array == 0) | (array == 1)).all() else None
    if t == "f":
        with np.errstate(over="ignore"):
            cast = array.astype(target)
        if k == "f" and (np.isinf(cast) & np.isfinite(array)).any():
            return None
        return cast
    # Integer target.
    if k == "b" or np.can_cast(src, target):
        return array.astype(target)
    if k in "iu":
        if array.size:
            info = np.iinfo(target)
            if array.ndim == 0:
                lo = hi = int(array)
            else:
                lo, hi = int(array.min()), int(array.max())
            if lo < info.min or hi > info.max:
                return None
        return array.astype(target)
    with np.errstate(invalid="ignore", over="ignore"):
        cast = array.astype(target)
        ok = bool((cast == array).all()) and bool(np.isfinite(array).all())
    if ok and array.size:
        info = np.iinfo(target)
        # Float comparisons round the limits (2**63 - 1 -> 2**63); the exact
        # round trip above catches wrap-around, this catches the rest.
        ok = float(array.min()) >= info.min and float(array.max()) <= info.max
    return cast if ok else None


def _fmt(x: Any) -> str:
    """A numpy element as the user would write it: ``2``, ``0.5``, ``'abc'``."""
    if isinstance(x, (np.generic, np.ndarray)) and np.ndim(x) == 0:
        x = x.item()
    return repr(x)


def _fmt_shape(shape: tuple[int, ...]) -> str:
    return str(tuple(shape))


def _bound_dtype_error(kind: str, name: str, which: str, value: Any, index, dt: int) -> ValueError:
    at = f" at index {index}" if index is not None else ""
    return ValueError(f"{kind} spec {name!r}: {which} {_fmt(value)}{at} does not fit {tensors.data_type_name(dt)}")


class SpecChecker:
    """A TensorSpec compiled for fast checks; constructing it validates the spec.

    Attributes:
        spec: the ``TensorSpec``. name: its name. data_type: its ``DataType``.
        dtype: the numpy dtype. shape: a tuple (may hold one -1).
        minimum / maximum: ``None`` or an array of ``dtype``: 0-d for a
        broadcast bound, else of ``shape`` (per-element bounds).

    >>> spec = pb.TensorSpec(name="x", dtype=pb.UINT8, shape=[2])
    >>> spec.max.uint8s.array = bytes([3, 5])
    >>> checker = SpecChecker(spec)
    >>> checker.maximum
    array([3, 5], dtype=uint8)
    >>> checker.check([1, 6], "observation")
    Traceback (most recent call last):
    ...
    ValueError: observation 'x': value 6 at index (1,) is above the maximum 5
    """

    __slots__ = ("spec", "name", "data_type", "dtype", "shape", "fixed", "minimum", "maximum",
                 "_lo", "_hi", "_float", "_lo_item", "_hi_item")

    def __init__(self, spec: pb.TensorSpec, kind: str = "observation"):
        self.spec = spec
        self.name = name = spec.name
        dt = spec.dtype
        if dt not in tensors.DTYPES:
            what = "no dtype (INVALID_DATA_TYPE)" if dt == pb.INVALID_DATA_TYPE \
                else f"an unknown dtype {tensors.data_type_name(dt)}"
            raise ValueError(f"{kind} spec {name!r} has {what}")
        self.data_type = dt
        self.dtype = tensors.DTYPES[dt]
        shape = tuple(int(d) for d in spec.shape)
        if any(d < -1 for d in shape) or sum(d == -1 for d in shape) > 1:
            raise ValueError(f"{kind} spec {name!r}: shape {list(shape)} may have at most one "
                             f"-1 dimension and no other negative size")
        self.shape = shape
        self.fixed = -1 not in shape
        self._float = self.dtype.kind == "f"
        self.minimum = self._bound(spec, "min", kind)
        self.maximum = self._bound(spec, "max", kind)
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            bad = lo > hi
            if bad.any():
                index = None if bad.ndim == 0 else tuple(int(i) for i in np.argwhere(bad)[0])
                at = f" at index {index}" if index is not None else ""
                b_lo = lo[index] if lo.ndim else lo
                b_hi = hi[index] if hi.ndim else hi
                raise ValueError(f"{kind} spec {name!r}: min {_fmt(b_lo)} is greater than "
                                 f"max {_fmt(b_hi)}{at}")
        # Bounds that exclude nothing cost nothing on the hot path: infinite float bounds, and
        # integer bounds at the dtype's own limits (a value cast to the dtype is within them:
        # a 16 MiB uint8 image in [0, 255] is not compared element by element).
        whole = np.iinfo(self.dtype) if self.dtype.kind in "iu" else None
        self._lo = None if lo is None or (self._float and np.isneginf(lo).all()) or (
            whole is not None and (lo <= whole.min).all()) else lo
        self._hi = None if hi is None or (self._float and np.isposinf(hi).all()) or (
            whole is not None and (hi >= whole.max).all()) else hi
        # Scalar values are compared as Python numbers: far cheaper than 0-d array operations.
        self._lo_item = -math.inf if self._lo is None or self._lo.ndim else self._lo.item()
        self._hi_item = math.inf if self._hi is None or self._hi.ndim else self._hi.item()

    def _bound(self, spec: pb.TensorSpec, which: str, kind: str) -> np.ndarray | None:
        if not spec.HasField(which):
            return None
        flat = bound_values(getattr(spec, which))
        if flat is None:
            return None  # an empty Value message: no bound
        name, dt = self.name, self.data_type
        if dt not in _NUMERIC:
            raise ValueError(f"{kind} spec {name!r}: {tensors.data_type_name(dt)} specs cannot "
                             f"have a {which} bound")
        if self.fixed:
            n = math.prod(self.shape)
            if flat.size not in (1, n):
                raise ValueError(f"{kind} spec {name!r}: {which} has {flat.size} elements; expected "
                                 f"1 or {n} (one per element of shape {list(self.shape)})")
        elif flat.size != 1:
            raise ValueError(f"{kind} spec {name!r}: {which} has {flat.size} elements; expected 1 "
                             f"(shape {list(self.shape)} has a -1 dimension)")
        if flat.dtype.kind == "f" and np.isnan(flat).any():
            i = int(np.argwhere(np.isnan(flat))[0][0])
            raise ValueError(f"{kind} spec {name!r}: {which} is not a number (nan)"
                             + (f" at index {np.unravel_index(i, self.shape)}" if flat.size > 1 else ""))
        cast = cast_exact(flat, self.dtype)
        if cast is None:
            for i, x in enumerate(flat):
                if cast_exact(flat[i:i + 1], self.dtype) is None:
                    index = tuple(int(j) for j in np.unravel_index(i, self.shape)) if flat.size > 1 else None
                    raise _bound_dtype_error(kind, name, which, x, index, dt)
            raise _bound_dtype_error(kind, name, which, flat, None, dt)
        if cast.size == 1:
            return cast.reshape(())
        return cast.reshape(self.shape)

    # -- checking values -------------------------------------------------------

    def check(self, value: Any, what: str = "action") -> np.ndarray:
        """``value`` as an array of the spec's dtype; ``ValueError`` saying what is wrong."""
        arr = value if type(value) is np.ndarray else np.asarray(value)
        shape = arr.shape
        if shape != self.shape and (self.fixed or not self._shape_fits(shape)):
            raise ValueError(f"{what} {self.name!r}: expected shape {_fmt_shape(self.shape)}, "
                             f"got {_fmt_shape(shape)}")
        if arr.dtype != self.dtype:
            cast = cast_exact(arr, self.dtype)
            if cast is None:
                raise self._dtype_error(arr, what)
            arr = cast
        lo, hi = self._lo, self._hi
        if lo is not None or hi is not None:
            if not shape and self.dtype.kind in "fiu":
                x = arr.item()
                # `not (a <= b)` rather than `a > b`: NaN fails it.
                if not (self._lo_item <= x <= self._hi_item):
                    raise self._bounds_error(arr, np.array(True), what)
            elif self._float:
                inside = np.ones(shape, bool) if lo is None else arr >= lo
                if hi is not None:
                    inside &= arr <= hi
                if not inside.all():
                    raise self._bounds_error(arr, ~inside, what)
            elif (lo is not None and (arr < lo).any()) or (hi is not None and (arr > hi).any()):
                bad = np.zeros(shape, bool)
                if lo is not None:
                    bad |= arr < lo
                if hi is not None:
                    bad |= arr > hi
                raise self._bounds_error(arr, bad, what)
        return arr

    def _shape_fits(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.shape) and all(
            want == -1 or want == got for want, got in zip(self.shape, shape))

    def _dtype_error(self, arr: np.ndarray, what: str) -> ValueError:
        want = dtype_label(self.dtype)
        head = f"{what} {self.name!r}: expected {want}, got {dtype_label(arr.dtype)}"
        if (arr.dtype.kind in "UO") != (self.dtype.kind in "UO") or self.dtype.kind == "O":
            return ValueError(head)
        for flat in range(arr.size):     # not np.ndindex: it builds every range first, 0-sized arrays too
            index = tuple(int(i) for i in np.unravel_index(flat, arr.shape))
            if cast_exact(arr[index].reshape(1), self.dtype) is None:
                at = f" at index {index}" if arr.ndim else ""
                return ValueError(f"{head} value {_fmt(arr[index])}{at} that {want} cannot hold")
        return ValueError(head)

    def _bounds_error(self, arr: np.ndarray, bad: np.ndarray, what: str) -> ValueError:
        index = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
        x = arr[index]
        at = f" at index {index}" if arr.ndim else ""
        lo = None if self.minimum is None else self.minimum[index if self.minimum.ndim else ()]
        hi = None if self.maximum is None else self.maximum[index if self.maximum.ndim else ()]
        head = f"{what} {self.name!r}: value {_fmt(x)}{at}"
        if lo is not None and x < lo:
            return ValueError(f"{head} is below the minimum {_fmt(lo)}")
        if hi is not None and x > hi:
            return ValueError(f"{head} is above the maximum {_fmt(hi)}")
        lo_s = "-inf" if lo is None else _fmt(lo)
        hi_s = "inf" if hi is None else _fmt(hi)
        return ValueError(f"{head} is not within [{lo_s}, {hi_s}]")

    def __repr__(self) -> str:
        return f"SpecChecker({self.name!r}, {dtype_label(self.dtype)}, shape={self.shape})"


_CHECKERS: dict[bytes, SpecChecker] = {}
_CHECKER_CACHE_SIZE = 256


def _checker(spec: pb.TensorSpec, kind: str) -> SpecChecker:
    key = spec.SerializeToString(deterministic=True)
    found = _CHECKERS.get(key)
    if found is None:
        found = remember(_CHECKERS, key, SpecChecker(spec, kind), _CHECKER_CACHE_SIZE)
    return found


def validate_spec(spec: pb.TensorSpec, kind: str = "observation") -> None:
    """Raise ``ValueError`` naming ``spec`` when it is malformed.

    Checked: a known dtype; at most one -1 dimension; bounds only on numeric
    specs, with 1 element or one per element (only 1 with a -1 dimension),
    values that fit the dtype exactly (a bound payload of another numeric
    type is accepted when its values fit), no NaN, and min <= max everywhere.
    Duplicate names are checked by :class:`~dmrpc_gym.protocol.spec_table.SpecTable`.
    """
    SpecChecker(spec, kind)


def check_value(spec: pb.TensorSpec, array: Any, what: str = "action") -> np.ndarray:
    """``array`` cast to the spec's dtype when lossless; else ``ValueError`` naming ``what`` and the spec.

    Checks the dtype (see :func:`cast_exact`), the shape (a -1 dimension takes
    any size) and the bounds (per element, naming the index). Compiled specs
    are cached; :class:`SpecChecker` is the form to hold on to on hot paths.
    """
    return _checker(spec, "observation" if what == "observation" else "action").check(array, what)
