"""A served env's ``info`` dict on the wire, between a dmrpc_gym server and a dmrpc_gym client.

dm_env_rpc has no place for ``info``. Ours travels as one extra observation,
:data:`INFO_UID`, that no spec lists: a dmrpc_gym client asks for it (in
``requested_observations``) only from a server whose response headers offer
the ``info`` feature, so a foreign client never sees it, and a foreign server is
never asked. The tensor holds one string: JSON, with numpy values tagged.

What crosses: ``None``, bools, ints, floats (nan and inf too), strings, numpy
arrays and scalars of bool, number and string dtypes, and dicts (string keys),
lists and tuples of these, nested. Anything else (an object, bytes, a dict with
other keys) is replaced by a :class:`Dropped` naming its type, so the receiving
side can say which key was left out rather than lose it silently. Decoding
builds nothing but those types: no pickle, no code.

>>> text = pack_info({"lives": np.int8(3), "pos": np.zeros(2, np.float32), "tag": ("a", 1), "env": object()})
>>> info = unpack_info(text)
>>> info["lives"], info["pos"], info["tag"], info["env"]
(np.int8(3), array([0., 0.], dtype=float32), ('a', 1), Dropped('object'))
>>> dropped_keys(info)
['env']
"""
from __future__ import annotations

import base64
import json
import json.decoder
import json.encoder
from collections.abc import Mapping
from typing import Any

import numpy as np

from dmrpc_gym.protocol.protowire import varint

__all__ = ["INFO_UID", "INFO_FEATURE", "DROPPED", "Dropped", "pack_info", "info_tensor_bytes", "unpack_info",
           "dropped_keys", "without_dropped"]

#: The observation UID ``info`` travels under (no spec lists it; far from any UID a world uses).
INFO_UID = (1 << 63) - 1
#: The feature a dmrpc_gym server announces in its response headers when it sends ``info``.
INFO_FEATURE = "info"

_ARRAY, _TUPLE, _DROPPED = "__dmrpc_array__", "__dmrpc_tuple__", "__dmrpc_dropped__"
#: In the text of an info that has a :class:`Dropped` value (absent: nothing to say).
DROPPED = _DROPPED
_PLAIN = (int, float, str, bool, type(None))   # what JSON carries as it is
# json's C encoder and scanner, made once and called directly: a step pays for the text, not
# for json's Python layers around them (several times their cost on a step's cold path).
_C_ENCODER = json.encoder.c_make_encoder
if _C_ENCODER is not None:
    _iterencode = _C_ENCODER(None, None, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)

    def _dumps(value: Any) -> str:
        return "".join(_iterencode(value, 0))
else:  # pragma: no cover - CPython ships the C encoder
    _dumps = json.JSONEncoder(separators=(",", ":")).encode
_SCAN = json.decoder.JSONDecoder().scan_once


def _loads(text: str) -> Any:
    """One JSON value that is all of ``text``."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if end != len(text):
        raise ValueError(f"extra data after character {end}")
    return value
_KINDS = "biufcU"          # numpy dtype kinds that cross: bool, ints, floats, complex, str


class Dropped:
    """A value that could not cross the wire, in its place: ``type_name`` says what it was."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dropped) and other.type_name == self.type_name

    def __repr__(self) -> str:
        return f"Dropped({self.type_name!r})"


def _encode(value: Any) -> Any:
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in _KINDS:
        arr = np.asarray(value)
        scalar = isinstance(value, np.generic)
        return {_ARRAY: [arr.dtype.str, list(arr.shape), base64.b64encode(arr.tobytes()).decode("ascii"), scalar]}
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v) for v in value]}
    if isinstance(value, Dropped):
        return {_DROPPED: value.type_name}
    for base in (bool, int, float, str):          # subclasses (an IntEnum, ...) as their base
        if isinstance(value, base):
            return base(value)
    return {_DROPPED: type(value).__name__}


def pack_info(info: Any) -> str:
    """``info`` as the text that travels (values that cannot cross become :class:`Dropped`;
    an ``info`` that is not a dict travels as ``{"info": info}``)."""
    if type(info) is dict:
        for k, v in info.items():
            if type(k) is not str or type(v) not in _PLAIN:
                break
        else:
            return _dumps(info)               # flat and plain: nothing to tag
    elif not isinstance(info, Mapping):
        info = {} if info is None else {"info": info}
    return _dumps(_encode(info))


def info_tensor_bytes(text: str) -> bytes:
    """The serialized ``Tensor`` that carries ``text``: one string (field 10, ``strings``)."""
    data = text.encode()
    inner = b"\n" + varint(len(data)) + data
    return b"R" + varint(len(inner)) + inner


def _array(tag: Any) -> Any:
    dtype_str, shape, data, scalar = tag
    dtype = np.dtype(dtype_str)
    if dtype.kind not in _KINDS or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"not an array the info codec makes: {dtype_str} {shape}")
    raw = base64.b64decode(data, validate=True)
    if len(raw) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"{len(raw)} bytes for a {dtype_str} array of shape {shape}")
    arr = np.frombuffer(raw, dtype).reshape(shape).copy()
    return arr[()] if scalar else arr


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (key, inner), = value.items()
        if key == _ARRAY:
            return _array(inner)
        if key == _TUPLE:
            return tuple(_decode(v) for v in inner)
        if key == _DROPPED:
            return Dropped(str(inner))
    return {k: _decode(v) for k, v in value.items()}


def unpack_info(text: str) -> dict[str, Any]:
    """The ``info`` dict ``text`` carries (:class:`Dropped` where a value could not cross);
    ``ValueError`` when ``text`` is not what :func:`pack_info` writes."""
    try:
        info = _loads(text)
        if "__dmrpc_" in text:            # tagged values to rebuild
            info = _decode(info)
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise ValueError(f"undecodable info ({type(exc).__name__}: {exc})") from None
    if type(info) is not dict:
        raise ValueError(f"info is a {type(info).__name__}, not a dict")
    return info


def dropped_keys(value: Any, where: str = "") -> list[str]:
    """Where :class:`Dropped` values sit in ``value``: ``key``, ``key.inner``, ``key[2]``."""
    if isinstance(value, Dropped):
        return [where]
    if isinstance(value, Mapping):
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return []
    return [key for place, inner in items for key in dropped_keys(inner, place)]


def without_dropped(info: Mapping[str, Any]) -> dict[str, Any]:
    """``info`` without the :class:`Dropped` values of its dicts (nested ones too; in a list
    or tuple a :class:`Dropped` keeps its place, so that the other items keep theirs)."""
    return {k: without_dropped(v) if isinstance(v, Mapping) else v
            for k, v in info.items() if not isinstance(v, Dropped)}
