"""Gymnasium spaces and dm_env specs as plain data: what a TensorSpec cannot say.

A dm_env_rpc TensorSpec has no Tuple, no 16-bit dtypes, no ``Discrete`` start
beyond its bounds, no ``Text`` length or charset, and no dm_env spec class,
name or bound shape. Between our own server and our own client the served
env's exact spaces (and a dm_env's exact specs) travel as this description
(the ``spaces`` property, :mod:`dmrpc_gym.protocol.fidelity`), so that the
client rebuilds them and the env it gives is the local env. Foreign peers
never ask for it and keep the faithful TensorSpec translation.

A description is JSON-able data with numpy arrays in it, written as text by
:func:`~dmrpc_gym.protocol.info.pack_info` (which keeps dtypes, shapes, nan
and inf). Rebuilding builds nothing but spaces and specs.

>>> import gymnasium as gym
>>> space = gym.spaces.Tuple((gym.spaces.Discrete(3, start=-1), gym.spaces.Box(0, 1, (2,), np.float16)))
>>> space_from_description(describe_space(space)) == space
True
>>> from dm_env import specs
>>> spec = specs.BoundedArray((1,), np.float64, [-1.0], [1.0], name="act")
>>> again = dm_spec_from_description(describe_dm_spec(spec))
>>> type(again).__name__, again.name, again.minimum.shape
('BoundedArray', 'act', (1,))
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces as gs

from dmrpc_gym.spaces.codec import WIDEN
from dmrpc_gym.spaces.text import PrintableText

__all__ = ["describe_space", "space_from_description", "describe_dm_spec", "dm_spec_from_description",
           "translation_losses"]


def _array(value: Any, dtype: Any = None) -> np.ndarray:
    return np.array(value, dtype=dtype)


def describe_space(space: gs.Space) -> dict[str, Any]:
    """``space`` as data; ``TypeError`` for a space no TensorSpec can carry values of."""
    if isinstance(space, gs.Dict):
        return {"Dict": [[key, describe_space(s)] for key, s in space.spaces.items()]}
    if isinstance(space, gs.Tuple):
        return {"Tuple": [describe_space(s) for s in space.spaces]}
    if isinstance(space, PrintableText):
        return {"PrintableText": {}}
    if isinstance(space, gs.Text):
        return {"Text": {"max_length": int(space.max_length), "min_length": int(space.min_length),
                         "charset": space.characters}}
    if isinstance(space, gs.Discrete):
        return {"Discrete": {"n": int(space.n), "start": int(space.start), "dtype": space.dtype.str}}
    if isinstance(space, gs.MultiDiscrete):
        return {"MultiDiscrete": {"nvec": _array(space.nvec), "start": _array(space.start)}}
    if isinstance(space, gs.MultiBinary):
        return {"MultiBinary": {"n": _array(space.n, np.int64)}}
    if isinstance(space, gs.Box):
        return {"Box": {"low": _array(space.low), "high": _array(space.high), "dtype": space.dtype.str}}
    raise TypeError(f"{type(space).__name__} cannot be described (Box, Discrete, MultiDiscrete, "
                    f"MultiBinary, Text, Dict and Tuple can)")


def _one(description: Any) -> tuple[str, Any]:
    if not isinstance(description, Mapping) or len(description) != 1:
        raise ValueError(f"not a description: {description!r:.80}")
    (kind, body), = description.items()
    return kind, body


def space_from_description(description: Any) -> gs.Space:
    """The space :func:`describe_space` described; ``ValueError`` for anything else."""
    kind, body = _one(description)
    try:
        if kind == "Dict":
            return gs.Dict(OrderedDict((str(k), space_from_description(d)) for k, d in body))
        if kind == "Tuple":
            return gs.Tuple([space_from_description(d) for d in body])
        if kind == "PrintableText":
            return PrintableText()
        if kind == "Text":
            return gs.Text(body["max_length"], min_length=body["min_length"], charset=body["charset"])
        if kind == "Discrete":
            return gs.Discrete(body["n"], start=body["start"], dtype=np.dtype(body["dtype"]))
        if kind == "MultiDiscrete":
            nvec, start = np.asarray(body["nvec"]), np.asarray(body["start"])
            return gs.MultiDiscrete(nvec, dtype=nvec.dtype, start=start)
        if kind == "MultiBinary":
            n = np.asarray(body["n"])
            return gs.MultiBinary(n.tolist())
        if kind == "Box":
            low, high = np.asarray(body["low"]), np.asarray(body["high"])
            return gs.Box(low, high, low.shape, np.dtype(body["dtype"]))
    except (KeyError, TypeError, ValueError, AssertionError) as exc:
        raise ValueError(f"a {kind} description that builds no space: {type(exc).__name__}: {exc}") from None
    raise ValueError(f"unknown space kind {kind!r}")


def describe_dm_spec(spec: Any) -> Any:
    """A dm_env spec, or a nest of them (dicts keep their order), as data."""
    from dm_env import specs
    if isinstance(spec, Mapping):
        return {"nest": [[str(k), describe_dm_spec(v)] for k, v in spec.items()]}
    if isinstance(spec, (list, tuple)):
        return {"list" if isinstance(spec, list) else "tuple": [describe_dm_spec(v) for v in spec]}
    base = {"shape": list(spec.shape), "name": spec.name}
    if isinstance(spec, specs.StringArray):
        return {"StringArray": {**base, "bytes": spec.string_type is bytes}}
    base["dtype"] = np.dtype(spec.dtype).str
    if isinstance(spec, specs.DiscreteArray):
        return {"DiscreteArray": {**base, "num_values": int(spec.num_values)}}
    if isinstance(spec, specs.BoundedArray):
        return {"BoundedArray": {**base, "minimum": _array(spec.minimum), "maximum": _array(spec.maximum)}}
    if isinstance(spec, specs.Array):
        return {"Array": base}
    raise TypeError(f"{type(spec).__name__} is no dm_env spec")


def dm_spec_from_description(description: Any) -> Any:
    """The dm_env spec (or nest: ``OrderedDict``, list, tuple) :func:`describe_dm_spec` described."""
    from dm_env import specs
    kind, body = _one(description)
    if kind == "nest":
        return OrderedDict((str(k), dm_spec_from_description(d)) for k, d in body)
    if kind in ("list", "tuple"):
        items = [dm_spec_from_description(d) for d in body]
        return items if kind == "list" else tuple(items)
    try:
        shape, name = tuple(body["shape"]), body["name"]
        if kind == "StringArray":
            return specs.StringArray(shape, bytes if body["bytes"] else str, name=name)
        dtype = np.dtype(body["dtype"])
        if kind == "DiscreteArray":
            return specs.DiscreteArray(body["num_values"], dtype=dtype, name=name)
        if kind == "BoundedArray":
            return specs.BoundedArray(shape, dtype, body["minimum"], body["maximum"], name=name)
        if kind == "Array":
            return specs.Array(shape, dtype, name=name)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"a {kind} description that builds no dm_env spec: {type(exc).__name__}: {exc}") from None
    raise ValueError(f"unknown dm_env spec kind {kind!r}")


def translation_losses(space: gs.Space, name: str) -> list[str]:
    """What a foreign client cannot read back from ``space``'s TensorSpecs, by spec name (our client
    reads the exact space instead).

    >>> translation_losses(gs.Tuple((gs.Box(0, 1, (2,), np.float16),)), "observation")
    ['observation is a Tuple: foreign clients get its parts as tensors observation.0 ...', 'observation.0 is float16: it travels as float32']
    """
    if isinstance(space, gs.Dict):
        return [loss for k, s in space.spaces.items() for loss in translation_losses(s, f"{name}.{k}" if name else k)]
    if isinstance(space, gs.Tuple):
        head = [f"{name} is a Tuple: foreign clients get its parts as tensors {name}.0 ..."]
        return head + [loss for i, s in enumerate(space.spaces) for loss in translation_losses(s, f"{name}.{i}")]
    if isinstance(space, gs.Text):
        return [f"{name} is Text: its length and charset do not travel (a STRING)"]
    wide = WIDEN.get(np.dtype(space.dtype)) if space.dtype is not None else None
    return [f"{name} is {space.dtype}: it travels as {wide}"] if wide is not None else []
