"""The spec table of one agent: UID <-> name <-> compiled checker <-> payload, for both ends.

dm_env_rpc addresses actions and observations by UID; people use names. A
:class:`SpecTable` holds one kind of spec (actions, or observations) of one
agent and converts at the edge: named values are checked and packed into
UID-keyed Tensors, UID-keyed Tensors are unpacked (and, where the peer cannot
be trusted to have checked, checked) into named arrays. The client packs
actions and unpacks observations; the server does the reverse with the same
table. :class:`SpecManager` is the pair a client connection holds.

>>> table = SpecTable({1: pb.TensorSpec(name="paddle", dtype=pb.INT8)}, "action")
>>> request = pb.StepRequest()
>>> table.pack({"paddle": 1}, request.actions)
>>> table.unpack(request.actions, check=True)
{'paddle': array(1, dtype=int8)}
>>> table.unpack({1: tensors.pack(1.5)}, check=True)
Traceback (most recent call last):
...
ValueError: action 'paddle': expected a INT8 tensor (int8), got a DOUBLE tensor
"""
from __future__ import annotations

import math

from typing import Any, Mapping, MutableMapping

import numpy as np

from dmrpc_gym.protocol import tensors
from dmrpc_gym.protocol import large_tensors
from dmrpc_gym.protocol.specs import SpecChecker, dtype_label
from dmrpc_gym.protocol.wire import pb

__all__ = ["SpecTable", "SpecManager"]

# DataType -> the Tensor payload field carrying it (their numbers coincide on the wire).
_PAYLOAD = {f.number: f.name for f in pb.Tensor.DESCRIPTOR.oneofs_by_name["payload"].fields}
_PAYLOAD_TYPE = {name: pb.DataType.Name(number) for number, name in _PAYLOAD.items()}


class SpecTable:
    """One kind of spec (``"action"`` or ``"observation"``) of one agent, by UID and by name.

    Constructing it validates every spec (``ValueError`` naming a bad one) and
    refuses a name used twice.
    """

    __slots__ = ("kind", "by_uid", "_uids", "_payloads", "_sizes", "listing")

    def __init__(self, specs: Mapping[int, pb.TensorSpec], kind: str):
        self.kind = kind
        self.by_uid: dict[int, SpecChecker] = {}
        self._uids: dict[str, int] = {}
        for uid, spec in specs.items():
            if spec.name in self._uids:
                raise ValueError(f"{kind} spec name {spec.name!r} is used twice "
                                 f"(UIDs {self._uids[spec.name]} and {uid})")
            self.by_uid[int(uid)] = SpecChecker(spec, kind)
            self._uids[spec.name] = int(uid)
        self._payloads = {uid: _PAYLOAD[c.data_type] for uid, c in self.by_uid.items()}
        # A received tensor may not broadcast past its spec's size (unknown with a -1: the default bound).
        self._sizes = {uid: None if any(d < 0 for d in c.shape) else math.prod(c.shape)
                       for uid, c in self.by_uid.items()}
        #: ``1='paddle', 2='say'``: what error messages list.
        self.listing = ", ".join(f"{uid}={c.name!r}" for uid, c in self.by_uid.items()) or "none"

    @property
    def specs(self) -> dict[str, pb.TensorSpec]:
        """Name -> ``TensorSpec``."""
        return {c.name: c.spec for c in self.by_uid.values()}

    @property
    def checkers(self) -> dict[str, SpecChecker]:
        """Name -> compiled spec."""
        return {c.name: c for c in self.by_uid.values()}

    @property
    def uids(self) -> list[int]:
        """Every UID, in the order the specs came."""
        return list(self.by_uid)

    def uid(self, name: str) -> int:
        """The UID of ``name``; ``ValueError`` listing the known names."""
        try:
            return self._uids[name]
        except KeyError:
            names = ", ".join(repr(n) for n in self._uids) or "none"
            raise ValueError(f"unknown {self.kind} {name!r}; the server's {self.kind}s are: {names}") from None

    def checker(self, uid: int) -> SpecChecker:
        """The compiled spec of ``uid``; ``ValueError`` listing the known UIDs."""
        try:
            return self.by_uid[uid]
        except KeyError:
            raise ValueError(f"no {self.kind} has UID {uid} ({self.kind}s: {self.listing})") from None

    def pack(self, values: Mapping[str, Any], into: MutableMapping[int, pb.Tensor],
             pieces: large_tensors.Pieces | None = None) -> None:
        """Check the given values (sparse: only these names) and pack them into ``into`` by UID.

        ``into`` is a ``map<uint64, Tensor>`` of a message (``request.actions``) or a dict;
        with ``pieces``, large values go there instead (:mod:`~dmrpc_gym.protocol.large_tensors`).
        """
        for name, value in values.items():
            uid = self.uid(name)
            checker = self.by_uid[uid]
            array = checker.check(value, self.kind)
            if pieces is not None and pieces.take(uid, array, checker.data_type):
                continue
            try:
                tensor = into[uid]
            except KeyError:
                tensor = into[uid] = pb.Tensor()
            tensors.pack_into(tensor, array, checker.data_type)

    def unpack(self, tensors_by_uid: Mapping[int, pb.Tensor], *, check: bool = False,
               large: Mapping[int, large_tensors.Decoded] | None = None) -> dict[str, np.ndarray]:
        """UID-keyed Tensors -> named arrays; ``ValueError`` naming an unknown UID.

        ``check=True`` (values from a peer that must obey the spec: a server
        reading actions) also requires the spec's payload type exactly and
        checks shape and bounds per element. ``large``: tensors the message
        carried outside protobuf (:func:`~dmrpc_gym.protocol.large_tensors.split`), already decoded.
        """
        out = {}
        for uid in tensors_by_uid:          # (a message's map has no C-level items())
            tensor = tensors_by_uid[uid]
            checker = self.by_uid.get(uid) or self.checker(uid)
            if check and tensor.WhichOneof("payload") != self._payloads[uid]:
                self._wrong_payload(uid, tensor.WhichOneof("payload"))
            try:
                array = tensors.unpack(tensor, self._sizes.get(uid))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{self.kind} {checker.name!r}: {exc}") from None
            out[checker.name] = checker.check(array, self.kind) if check else array
        if large:
            for uid, (payload, array) in large.items():
                checker = self.checker(uid)
                if check and payload != self._payloads[uid]:
                    self._wrong_payload(uid, payload)
                out[checker.name] = checker.check(array, self.kind) if check else array
        return out

    def _wrong_payload(self, uid: int, payload: str | None) -> None:
        checker, want = self.by_uid[uid], self._payloads[uid]
        got = f"a {_PAYLOAD_TYPE[payload]} tensor" if payload else "a tensor with no payload"
        raise ValueError(f"{self.kind} {checker.name!r}: expected a {_PAYLOAD_TYPE[want]} tensor "
                         f"({dtype_label(checker.dtype)}), got {got}")

    def __repr__(self) -> str:
        return f"SpecTable({self.kind}: {self.listing})"


class SpecManager:
    """The action and observation tables of one client connection (what JoinWorld answered).

    >>> act = pb.TensorSpec(name="paddle", dtype=pb.INT32)
    >>> obs = pb.TensorSpec(name="board", dtype=pb.FLOAT, shape=[2])
    >>> manager = SpecManager({1: act}, {7: obs})
    >>> req = pb.StepRequest()
    >>> manager.actions.pack({"paddle": 1}, req.actions)
    >>> dict(req.actions)[1].int32s.array[:]
    [1]
    >>> manager.observations.unpack({7: tensors.pack(np.array([0.5, 1.0], np.float32))})
    {'board': array([0.5, 1. ], dtype=float32)}
    """

    __slots__ = ("actions", "observations")

    def __init__(self, action_specs: Mapping[int, pb.TensorSpec],
                 observation_specs: Mapping[int, pb.TensorSpec]):
        self.actions = SpecTable(action_specs, "action")
        self.observations = SpecTable(observation_specs, "observation")

    def __repr__(self) -> str:
        return f"SpecManager({self.actions!r}, {self.observations!r})"
