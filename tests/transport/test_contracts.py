"""Each part (mixin) of the client connection and of the server protocol is held to its written contract.

A part's contract (``transport/client/contracts.py``, ``transport/server/contracts.py``) is a
``typing.Protocol`` naming what the part needs of its host. Read from the sources: every name the
part uses on ``self`` and does not define itself must be in its protocol, nothing more; and the host
class must provide every name of every part's protocol (a method, a class attribute, or an attribute
its ``__init__`` sets).
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Protocol

import pytest

from dmrpc_gym.transport.client import contracts as client_contracts
from dmrpc_gym.transport.client.clock import CallClock
from dmrpc_gym.transport.client.connection import GrpcConnection
from dmrpc_gym.transport.client.control import ControlFrames
from dmrpc_gym.transport.client.keepalive import IdleConnection
from dmrpc_gym.transport.client.large_messages import LargeMessages
from dmrpc_gym.transport.client.steady import SteadyTrips
from dmrpc_gym.transport.server import contracts as server_contracts
from dmrpc_gym.transport.server.deadlines import Watching
from dmrpc_gym.transport.server.answering import Answering
from dmrpc_gym.transport.server.protocol import GrpcProtocol
from dmrpc_gym.transport.server.replies import Replies
from dmrpc_gym.transport.server.requests import Requests
from dmrpc_gym.transport.server.steady import Steady

PARTS = {
    ControlFrames: (GrpcConnection, client_contracts.ControlHost),
    LargeMessages: (GrpcConnection, client_contracts.LargeMessagesHost),
    CallClock: (GrpcConnection, client_contracts.ClockHost),
    IdleConnection: (GrpcConnection, client_contracts.IdleHost),
    SteadyTrips: (GrpcConnection, client_contracts.SteadyHost),
    Requests: (GrpcProtocol, server_contracts.RequestsHost),
    Replies: (GrpcProtocol, server_contracts.RepliesHost),
    Answering: (GrpcProtocol, server_contracts.AnsweringHost),
    Watching: (GrpcProtocol, server_contracts.WatchingHost),
    Steady: (GrpcProtocol, server_contracts.SteadyHost),
}


def _tree(cls: type) -> ast.ClassDef:
    return ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]


def _self_names(node: ast.AST) -> tuple[set[str], set[str]]:
    """Names used on ``self`` in ``node``, and those among them assigned."""
    used, stored = set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
            used.add(sub.attr)
            if isinstance(sub.ctx, ast.Store):
                stored.add(sub.attr)
    return used, stored


def _init_sets(host: type) -> set[str]:
    init = next((n for n in _tree(host).body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    return _self_names(init)[1] if init is not None else set()


def _members(protocol: type) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("__")}
    return names


def _needs(part: type, host: type) -> set[str]:
    """What ``part`` uses on self that it neither defines (a method, a class attribute) nor keeps as
    state of its own (assigned by it, and not by the host's ``__init__``)."""
    node = _tree(part)
    used, stored = _self_names(node)
    own = set(vars(part)) | (stored - _init_sets(host))
    return used - own


@pytest.mark.parametrize("part", list(PARTS), ids=lambda c: c.__name__)
def test_a_part_uses_of_its_host_exactly_what_its_contract_names(part):
    host, protocol = PARTS[part]
    assert issubclass(protocol, Protocol)
    needs, written = _needs(part, host), _members(protocol)
    assert needs - written == set(), f"{part.__name__} uses {sorted(needs - written)}, missing from {protocol.__name__}"
    assert written - needs == set(), f"{protocol.__name__} names {sorted(written - needs)}, which {part.__name__} does not use"


@pytest.mark.parametrize("part", list(PARTS), ids=lambda c: c.__name__)
def test_the_host_provides_every_name_of_the_contract(part):
    host, protocol = PARTS[part]
    provided = set(dir(host)) | _init_sets(host)
    missing = _members(protocol) - provided
    assert not missing, f"{host.__name__} lacks {sorted(missing)} of {protocol.__name__}"


# -- what each steady path requires of its connection's state -------------------------------------------
STATES = {
    Steady: (server_contracts.SteadyState, "dmrpc_gym.transport.server.state", "ServerState"),
    SteadyTrips: (client_contracts.SteadyState, "dmrpc_gym.transport.client.state", "ClientState"),
}


def _state_names(part: type) -> tuple[set[str], list[str]]:
    """The names ``part`` uses on its local ``state`` (the connection's state), and the calls it makes of it."""
    used, calls = set(), []
    for sub in ast.walk(_tree(part)):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "state":
            used.add(sub.attr)
        if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and isinstance(sub.func.value, ast.Name)
                and sub.func.value.id == "state"):
            calls.append(sub.func.attr)
    return used, calls


@pytest.mark.parametrize("part", list(STATES), ids=lambda c: c.__name__)
def test_a_steady_path_uses_of_the_state_exactly_its_contract_and_the_state_provides_it(part):
    import importlib
    protocol, module, name = STATES[part]
    used, calls = _state_names(part)
    assert used == _members(protocol), f"{part.__name__} uses {sorted(used)} of the state; {protocol.__name__} " \
                                       f"names {sorted(_members(protocol))}"
    state = getattr(importlib.import_module(module), name)
    slots = {slot for cls in state.__mro__ for slot in getattr(cls, "__slots__", ())}
    assert _members(protocol) <= set(dir(state)) | slots
    # one call per direction of a step (the receive side: received, or refund where a handler declines)
    methods = {m for m, value in vars(protocol).items() if callable(value) and not m.startswith("__")}
    assert set(calls) == methods
