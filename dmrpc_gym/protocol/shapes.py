"""Shapes of received tensors: a -1 dimension resolved, and a bound on what a broadcast may make.

A dm_env_rpc tensor of one element stands for a whole shape (it is broadcast).
That is the one way a few bytes from a peer can become a large array, so the
receiver bounds it before allocating: by the spec's size where a spec is known,
else by :data:`MAX_TENSOR_BYTES`.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from dmrpc_gym.protocol.dtypes import BY_FIELD_NAME, data_type_name

__all__ = ["MAX_TENSOR_BYTES", "element_limit", "resolve_shape", "full_shape", "check_shape"]

#: The most bytes one received tensor may grow to where no spec bounds it (a setting, a
#: property value): what the default message-size limit lets a message carry. Only a
#: broadcast can make a tensor larger than its payload, so this bounds what a peer's
#: few bytes can make the receiver allocate.
MAX_TENSOR_BYTES = 64 << 20


def resolve_shape(shape: Any, size: int) -> tuple[int, ...]:
    """``shape`` with its -1 dimension (at most one) inferred from ``size`` elements.

    A single element broadcasts, so ``size == 1`` fits any shape (a -1 becomes 1).

    >>> resolve_shape([2, -1], 6)
    (2, 3)
    >>> resolve_shape([2, 3], 1)
    (2, 3)
    """
    shape = tuple(int(d) for d in shape)
    unknown = [i for i, d in enumerate(shape) if d < 0]
    if len(unknown) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"shape {list(shape)} may have at most one -1 dimension "
                         f"and no other negative size")
    known = math.prod(d for d in shape if d >= 0)
    if unknown:
        i = unknown[0]
        if size == 1 and known != 1:
            return shape[:i] + (1,) + shape[i + 1:]
        if (known == 0 and size != 0) or (known and size % known):
            raise ValueError(f"a payload of {size} elements does not fit shape {list(shape)} "
                             f"(needs a multiple of {known}, or 1 to broadcast)")
        return shape[:i] + (size // known if known else 0,) + shape[i + 1:]
    if size not in (known, 1):
        raise ValueError(f"a payload of {size} elements does not fit shape {list(shape)} "
                         f"(needs {known}, or 1 to broadcast)")
    return shape


def element_limit(dtype: np.dtype, max_bytes: int = MAX_TENSOR_BYTES) -> int:
    """How many elements of ``dtype`` fit ``max_bytes`` (a proto cell counts as 1 KiB)."""
    return max_bytes // (1024 if dtype == object else max(dtype.itemsize, 1))


def full_shape(shape: list[int], size: int, name: str, dtype: np.dtype,
               max_elements: int | None = None) -> tuple[int, ...]:
    """The shape a payload of ``size`` elements of ``name`` takes in ``shape``: -1 resolved, a single
    element broadcast within ``max_elements`` (the spec's size, where a spec is known) or what
    :data:`MAX_TENSOR_BYTES` holds; ``ValueError`` naming the misfit."""
    dt = data_type_name(BY_FIELD_NAME[name].dt)
    try:
        full = resolve_shape(shape, size)
    except ValueError as e:
        raise ValueError(f"cannot unpack a {dt} tensor: {e}") from None
    count = math.prod(full)
    if count != size:
        limit = element_limit(dtype) if max_elements is None else max_elements
        if count > limit:
            raise ValueError(f"cannot unpack a {dt} tensor: its one element would be broadcast to shape "
                             f"{list(full)} ({count} elements), more than the {limit} allowed")
    return full


def check_shape(shape: list[int], size: int, name: str, max_elements: int | None = None) -> None:
    """``ValueError`` when a payload of ``size`` elements of ``name`` (e.g. ``"floats"``) cannot
    take ``shape``: a lie is found before the payload is decoded or copied (a 64 MiB payload
    claiming another shape cost 3x its message).

    >>> check_shape([2, 3], 5, "floats")
    Traceback (most recent call last):
    ...
    ValueError: cannot unpack a FLOAT tensor: a payload of 5 elements does not fit shape [2, 3] (needs 6, or 1 to broadcast)
    """
    if size != 1 and (not shape or min(shape) < 0 or math.prod(shape) != size):
        full_shape(shape, size, name, BY_FIELD_NAME[name].dtype, max_elements)
